"""torch.nn.functional.embedding forward and backward, for tests/engine/embedding_torch_test.cpp.

    torch_embedding.py OUT.json NAME:IDS_SHAPE:VOCAB:DIM:PADDING_IDX...

IDS_SHAPE is "AxB..." ("5" for 1-d), PADDING_IDX an integer (negative counts from VOCAB) or
"none". For each case, from a seed: int64 ids in [0, VOCAB), a float32 table weight
[VOCAB, DIM] and an upstream gradient dy [*IDS_SHAPE, DIM]; then y = embedding(ids, weight,
padding_idx) and weight.grad after y.backward(dy), once in float32 and once in float64 on
the same values (float32 values are exact in float64). Writes the inputs and, per dtype,
y and dweight (exact in JSON).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F


def run_case(seed, ids_shape, vocab, dim, padding_idx):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, ids_shape, generator=gen, dtype=torch.int64)
    weight = torch.randn((vocab, dim), generator=gen, dtype=torch.float32)
    dy = torch.randn(tuple(ids_shape) + (dim,), generator=gen, dtype=torch.float32)
    record = {"ids": ids.flatten().tolist(), "weight": weight.flatten().tolist(), "dy": dy.flatten().tolist()}
    for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64")):
        w = weight.to(dtype).clone().requires_grad_(True)
        y = F.embedding(ids, w, padding_idx=padding_idx)
        y.backward(dy.to(dtype))
        record[name] = {"y": y.detach().flatten().tolist(), "dweight": w.grad.flatten().tolist()}
    return record


def main():
    out, cases = sys.argv[1], sys.argv[2:]
    result = {}
    for seed, case in enumerate(cases):
        name, shape, vocab, dim, padding = case.split(":")
        ids_shape = [int(s) for s in shape.split("x")]
        result[name] = run_case(seed, ids_shape, int(vocab), int(dim), None if padding == "none" else int(padding))
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
