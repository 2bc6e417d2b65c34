#!/usr/bin/python3
"""Replays in PyTorch what `dpcore train --no-shuffle --no-normalize` did, and compares.

With those two flags dpcore feeds the training images in file order, as pixels / 255 and
nothing else, so a plain PyTorch loop over the same IDX files, from the same initial
weights, with the same SGD settings, must end with the same weights (to float32 rounding).
Used by tests/cli/cli_test.cpp (Cli.NoShuffleNoNormalizeRunIsReproducibleInPyTorch):

    /usr/bin/python3 tests/cli/torch_replay.py --data DIR --model fashioncnn --init INIT \\
        --result RESULT --batch B --steps S --lr LR --momentum M [--lr-schedule onecycle --warmup-steps W]

With --lr-schedule onecycle the loop steps torch.optim.lr_scheduler.OneCycleLR after every
optimizer step, as train/schedule/lr_schedule.h says dpcore's onecycle does (pct_start W/S, or 0.3
without a warm-up; momentum cycled when M > 0).

Exits 0 when every parameter matches to 1e-5 of its largest magnitude, 1 otherwise.

The comparison only holds when no max-pool window holds a tie (or a near-tie): there the
argmax is decided by the last bit of the sums, which depends on the BLAS kernel and thread
count, and the gradient goes to another pixel. So the test feeds random pixels, and this
script counts the pool windows whose two largest values lie within 1e-6 of each other: a
handful in millions with random pixels (each moves one window's share of the gradient), a
large share of all windows with a repeating pattern, which repeats each near-tie too.
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from make_fixtures import load_safetensors  # noqa: E402  (spec-checked reader)
from torch_models import build_torch_model  # noqa: E402  (the reference models)


def read_idx(path):
    with open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), np.uint8).reshape(dims)


class PoolTieCounter:
    """Wraps F.max_pool2d (the reference models pool through it) to count the windows whose
    two largest values lie within a relative `margin` of each other, where float32 rounding
    can move the argmax. Windows whose maximum is not positive are left out: after a ReLU
    they hold zeros, whose gradient is zero wherever it is routed."""

    def __init__(self, margin=1e-6):
        self.margin, self.near, self.windows = margin, 0, 0
        self.original = F.max_pool2d

    def __call__(self, x, kernel_size, stride=None, *args, **kwargs):
        stride = kernel_size if stride is None else stride
        if not args and not kwargs and kernel_size == stride:
            with torch.no_grad():
                k = kernel_size
                n, c, h, w = x.shape
                win = x[:, :, : h // k * k, : w // k * k].reshape(n, c, h // k, k, w // k, k)
                top = win.permute(0, 1, 2, 4, 3, 5).reshape(-1, k * k).topk(2, dim=1).values
                top = top[top[:, 0] > 0]
                self.windows += len(top)
                self.near += int(((top[:, 0] - top[:, 1]) <= self.margin * top[:, 0]).sum())
        return self.original(x, kernel_size, stride, *args, **kwargs)


def main():
    p = argparse.ArgumentParser()
    for flag in ("--data", "--model", "--init", "--result"):
        p.add_argument(flag, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, required=True)
    p.add_argument("--lr-schedule", choices=("constant", "onecycle"), default="constant")
    p.add_argument("--warmup-steps", type=int, default=0)
    a = p.parse_args()

    torch.set_num_threads(1)
    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).astype(np.float32) / 255)
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    images = images.unsqueeze(1)  # [N, 1, 28, 28]
    model = build_torch_model(a.model)
    model.load_state_dict(load_safetensors(a.init), strict=True)
    sgd = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    schedule = None
    if a.lr_schedule == "onecycle":
        pct_start = a.warmup_steps / a.steps if a.warmup_steps > 0 else 0.3
        schedule = torch.optim.lr_scheduler.OneCycleLR(sgd, max_lr=a.lr, total_steps=a.steps, pct_start=pct_start,
                                                       cycle_momentum=a.momentum > 0)
    ties = PoolTieCounter()
    F.max_pool2d = ties
    n, begin = len(labels), 0
    for _ in range(a.steps):
        if begin >= n:  # a new epoch, in file order again
            begin = 0
        end = min(begin + a.batch, n)  # the last batch of an epoch may be short (kept)
        sgd.zero_grad()
        F.nll_loss(model(images[begin:end]), labels[begin:end]).backward()
        sgd.step()
        if schedule:
            schedule.step()
        begin = end

    F.max_pool2d = ties.original
    print(f"max-pool windows within {ties.margin:.0e} of a tie: {ties.near} of {ties.windows}")

    result = load_safetensors(a.result)
    worst = 0.0
    for name, value in model.state_dict().items():
        diff = (result[name] - value).abs().max().item() / max(value.abs().max().item(), 1e-30)
        worst = max(worst, diff)
        print(f"{name}: relative difference {diff:.2e}")
    print(f"worst {worst:.2e}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
