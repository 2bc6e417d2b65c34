"""torch.nn.functional.cross_entropy over tokens, for tests/engine/cross_entropy_torch_test.cpp.

    torch_cross_entropy.py OUT.json NAME:LOGITS_SHAPE:IGNORE_INDEX:REDUCTION:IGNORED_EVERY...

LOGITS_SHAPE is "AxBx...xC", classes last (dpcore's layout; PyTorch gets the logits viewed
as [-1, C] and the targets as [-1], which is its [N, C] case over every token). From a
seed: float32 logits, int64 targets in [0, C), every IGNORED_EVERY-th token (0: none)
set to IGNORE_INDEX; REDUCTION "mean" or "sum". Writes the inputs and, in float32 and in
float64 on the same values, the loss and d(loss)/d(logits) (exact in JSON; a NaN loss as
null).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F


def run_case(seed, shape, ignore_index, reduction, ignored_every):
    gen = torch.Generator().manual_seed(seed)
    classes = shape[-1]
    logits = torch.randn(shape, generator=gen, dtype=torch.float32) * 3
    target = torch.randint(0, classes, shape[:-1], generator=gen, dtype=torch.int64)
    if ignored_every:
        target.view(-1)[::ignored_every] = ignore_index
    record = {"logits": logits.flatten().tolist(), "target": target.flatten().tolist()}
    for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64")):
        x = logits.to(dtype).clone().requires_grad_(True)
        loss = F.cross_entropy(x.view(-1, classes), target.view(-1), ignore_index=ignore_index, reduction=reduction)
        loss.backward()
        value = loss.item()
        record[name] = {"loss": None if math.isnan(value) else value, "dlogits": x.grad.flatten().tolist()}
    return record


def main():
    out, cases = sys.argv[1], sys.argv[2:]
    result = {}
    for seed, case in enumerate(cases):
        name, shape, ignore_index, reduction, ignored_every = case.split(":")
        result[name] = run_case(seed, [int(s) for s in shape.split("x")], int(ignore_index), reduction,
                                int(ignored_every))
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
