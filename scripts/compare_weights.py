#!/usr/bin/python3
"""How far apart two weight files are, tensor by tensor.

Usage:
    scripts/compare_weights.py A.safetensors B.safetensors [--top N]

For every tensor the files share (parameters and buffers, in A's order) prints
max |A - B| / max |B|, the difference relative to the tensor's scale in B (the reference),
then the largest N and a summary per kind: convolution and linear weights, batch-norm
weights and biases, running means, running variances, batch counts. Exits with status 1,
naming the tensor, when the files hold different tensors or shapes.

Reads safetensors with the standard library and numpy only (no torch needed).
"""

import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(blob[base + begin:base + end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def kind(name):
    if name.endswith("running_mean"):
        return "running means"
    if name.endswith("running_var"):
        return "running variances"
    if name.endswith("num_batches_tracked"):
        return "batch counts"
    if ".bn" in name or name.startswith("bn") or name.endswith("downsample.1.weight") or name.endswith("downsample.1.bias"):
        return "batch-norm weights and biases"
    return "convolution and linear weights"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b", help="the reference")
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    if set(a) != set(b):
        sys.exit(f"compare_weights: the files hold different tensors: only in {args.a}: {sorted(set(a) - set(b))}, "
                 f"only in {args.b}: {sorted(set(b) - set(a))}")
    rows = []
    for name in a:
        if a[name].shape != b[name].shape:
            sys.exit(f"compare_weights: '{name}' is {list(a[name].shape)} in {args.a} but {list(b[name].shape)} in {args.b}")
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        scale = np.abs(y).max() if y.size else 0.0
        diff = np.abs(x - y).max() if y.size else 0.0
        rows.append((name, diff / scale if scale > 0 else diff))
    print(f"{'tensor':45s} relative difference")
    for name, d in sorted(rows, key=lambda r: -r[1])[:args.top]:
        print(f"{name:45s} {d:.3e}")
    print()
    groups = {}
    for name, d in rows:
        groups.setdefault(kind(name), []).append(d)
    for k, ds in groups.items():
        print(f"{k:35s} {len(ds):3d} tensors, median {np.median(ds):.3e}, max {max(ds):.3e}")


if __name__ == "__main__":
    main()
