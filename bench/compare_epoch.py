#!/usr/bin/python3
"""One training epoch of a ResNet on the real Fashion-MNIST, dpcore against each PyTorch of
--torch-python (Debian's 1.13 and, once bench/install-torch.sh has made bench/.venv, the
current one pinned there), side by side: the `dpcore train` recipe of the model (train/schedule/recipe.h: batch 128, SGD with
Nesterov momentum 0.9 and weight decay 5e-4, one-cycle to 0.1 with a 15% warm-up over
`--epochs` epochs, no augmentation) and the same recipe written in PyTorch, alternating
(dpcore, each PyTorch, dpcore, ...) so that load from other work hits all of them.

    /usr/bin/python3 bench/compare_epoch.py --dpcore build/bin/dpcore --model resnet8 --rounds 2

Both sides time the training steps of epoch 1 only (the data already in memory,
normalised with the training set's per-channel mean and standard deviation, shuffled;
evaluation excluded), with 2 threads and OMP_WAIT_POLICY=passive. dpcore reports its
epoch's training seconds itself; the PyTorch side is this file started with --torch-worker
by each interpreter. The first line names the CPU model and the OpenBLAS variables.
The schedule runs over --epochs epochs (default 10, as in the recipe) but only the first is
trained and timed, so both sides see the learning rates of a real run's first epoch.
"""
import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import default_torch_pythons, describe, record  # noqa: E402
from torch_models import build_torch_model  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        blob = f.read()
    dims = blob[3]
    shape = [int.from_bytes(blob[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def torch_worker(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    labels = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = images.mean().item(), images.std().item()
    images = (images - mean) / std
    model = build_torch_model(args.model)
    steps_per_epoch = -(-len(labels) // args.batch)
    total = steps_per_epoch * args.epochs
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=total, pct_start=0.15)
    order = torch.randperm(len(labels))
    model.train()
    start = time.perf_counter()
    for b in range(steps_per_epoch):
        rows = order[b * args.batch:(b + 1) * args.batch]
        x, y = images[rows], labels[rows]
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    seconds = time.perf_counter() - start
    print(json.dumps({"engine": "pytorch", "version": torch.__version__, "seconds": seconds, "steps": steps_per_epoch,
                      "samples_per_s": len(labels) / seconds, "last_loss": loss.item()}))


def run_dpcore(args, env):
    cmd = [args.dpcore, "train", "--model", args.model, "--device", "cpu", "--threads", str(args.threads),
           "--epochs", str(args.epochs), "--steps", str(-(-60000 // 128)), "--progress", "0"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    m = re.search(r"epoch 1: .* ([0-9.]+) samples/s, ([0-9.]+) s,", out)
    if not m:
        sys.exit(f"compare_epoch: no epoch line in dpcore's output:\n{out}")
    return {"engine": "dpcore", "samples_per_s": float(m.group(1)), "seconds": float(m.group(2))}


def run_torch(args, env, python):
    cmd = [python, os.path.abspath(__file__), "--torch-worker", "--model", args.model,
           "--threads", str(args.threads), "--epochs", str(args.epochs)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dpcore", default="build/bin/dpcore")
    p.add_argument("--model", default="resnet8", choices=["resnet8", "resnet20"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10, help="the schedule's length (only epoch 1 runs)")
    p.add_argument("--torch-python", nargs="+", default=default_torch_pythons(), metavar="PYTHON",
                   help="the interpreters whose PyTorch to compare with (default: %(default)s)")
    p.add_argument("--batch", type=int, default=128, help=argparse.SUPPRESS)
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    print(describe(record(args.torch_python)))
    print(f"load average before: {os.getloadavg()}")
    ratios = {python: [] for python in args.torch_python}
    versions = {}
    for r in range(args.rounds):
        d = run_dpcore(args, env)
        line = f"round {r + 1}: dpcore {d['seconds']:.1f} s ({d['samples_per_s']:.0f} samples/s)"
        for python in args.torch_python:
            t = run_torch(args, env, python)
            versions[python] = t["version"]
            ratios[python].append(t["seconds"] / d["seconds"])
            line += (f", PyTorch {t['version']} {t['seconds']:.1f} s ({t['samples_per_s']:.0f} samples/s): "
                     f"dpcore {ratios[python][-1]:.2f}x")
        print(line)
    print(f"load average after: {os.getloadavg()}")
    for python, these in ratios.items():
        print(f"{args.model}: one epoch, dpcore / PyTorch {versions[python]} speed, median over {args.rounds} rounds: "
              f"{statistics.median(these):.2f}x (min {min(these):.2f}, max {max(these):.2f})")


if __name__ == "__main__":
    main()
