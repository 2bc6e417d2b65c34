#!/usr/bin/env python3
"""A step profile of ResNet-50 for `dpcore predict --profile` (docs/scaling.md's GPU predictions).

dpcore does not build ResNet-50 (its zoo holds the CIFAR ResNets), so this profile comes
from PyTorch (Debian's python3-torch, CPU):
  - the parameter tensors in registration order (the order of DDP's flat buffer), built
    here layer by layer as torchvision's resnet50 is (bottleneck blocks 3, 4, 6, 3;
    torchvision is not packaged for Debian);
  - when each gradient becomes final during backward, as a fraction of backward, from
    tensor hooks over a few CPU steps at the given batch (the order and the spacing of
    the layers' gradients; a GPU runs the same layers in the same order);
  - the step's total time from a published anchor: PyTorch's own DDP benchmark (8
    machines of 8 V100, NCCL, 32 images per GPU), 329 images/s on one GPU, so one step of
    32 images takes 32/329 s; the optimizer's share as on the CPU, the rest split 1:2
    between forward and backward, as their arithmetic is (backward computes the gradients
    of both the inputs and the weights; the CPU's own split is skewed by its kernels).
    /usr/bin/python3 scripts/make_resnet50_profile.py OUT.json [--batch 32] [--images-per-s 329] [--steps 2]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def resnet50(classes=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--images-per-s", type=float, default=329.0, help="one GPU's training throughput (the anchor)")
    ap.add_argument("--steps", type=int, default=2, help="timed CPU steps after one warm-up step")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = resnet50()
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    x = torch.randn(a.batch, 3, 224, 224)
    y = torch.randint(0, 1000, (a.batch,))
    ready = [0.0] * len(params)
    for i, p in enumerate(params):
        p.register_hook(lambda g, i=i: ready.__setitem__(i, time.perf_counter()))
    forward, backward, step, fractions = [], [], [], [[] for _ in params]
    for s in range(a.steps + 1):
        optimizer.zero_grad()
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        if s == 0:
            continue  # warm-up
        forward.append(t1 - t0)
        backward.append(t2 - t1)
        step.append(t3 - t2)
        for i in range(len(params)):
            fractions[i].append((ready[i] - t1) / (t2 - t1))
    cpu = [statistics.median(v) for v in (forward, backward, step)]
    total = a.batch / a.images_per_s
    optimizer_s = total * cpu[2] / sum(cpu)
    forward_s, backward_s = (total - optimizer_s) / 3, 2 * (total - optimizer_s) / 3
    profile = {
        "model": "resnet50",
        "batch": a.batch,
        "source": f"tensor sizes and gradient order from PyTorch {torch.__version__}'s ResNet-50 on the CPU "
                  f"({a.steps} steps, batch {a.batch}); step time {total * 1e3:.1f} ms = {a.batch} images at "
                  f"{a.images_per_s:g} images/s (PyTorch's DDP benchmark, one V100), forward:backward 1:2",
        "forward_s": forward_s,
        "backward_s": backward_s,
        "optimizer_s": optimizer_s,
        "param_bytes": [p.numel() * 4 for p in params],
        "grad_ready_s": [min(1.0, max(0.0, statistics.median(f))) * backward_s for f in fractions],
        "input_bytes": x.numel() * 4,
        "output_bytes": a.batch * 1000 * 4,
        "threads": 1,
        "busy_slowdown": 1.0,
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(profile, f, indent=1)
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(params)} tensors, {sum(profile['param_bytes']) / 2**20:.1f} MiB; "
          f"forward {profile['forward_s'] * 1e3:.1f} ms, backward {profile['backward_s'] * 1e3:.1f} ms, "
          f"optimizer {profile['optimizer_s'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
