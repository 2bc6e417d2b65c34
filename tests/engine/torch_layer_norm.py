"""torch.nn.functional.layer_norm forward and backward, for tests/engine/layer_norm_test.cpp.

    torch_layer_norm.py OUT.json NAME:SHAPE:AFFINE:EPS:DTYPE...

SHAPE is dims joined by "x" (the last one normalised), AFFINE 0 or 1, DTYPE float32 or
float64. For each case: x, weight, bias and an upstream gradient dy drawn from a seed
(x with an offset of 3 so that the mean is not 0), y = layer_norm(x), and the gradients of
sum(y * dy) for x, weight and bias. All values written exactly (float64 in JSON).
"""
import json
import os
import sys

import torch


def run_case(seed, shape, affine, eps, dtype):
    gen = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + 3).to(dtype).requires_grad_(True)
    w = (torch.rand(d, generator=gen, dtype=torch.float64) + 0.5).to(dtype).requires_grad_(True)
    b = torch.randn(d, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    y = torch.nn.functional.layer_norm(x, (d,), w if affine else None, b if affine else None, eps)
    y.backward(dy)
    out = {"x": x, "w": w, "b": b, "dy": dy, "y": y, "dx": x.grad}
    if affine:
        out.update({"dw": w.grad, "db": b.grad})
    return {k: v.detach().double().flatten().tolist() for k, v in out.items()}


def main():
    out, cases = sys.argv[1], sys.argv[2:]
    result = {}
    for seed, case in enumerate(cases):
        name, shape, affine, eps, dtype = case.split(":")
        dims = [int(v) for v in shape.split("x")]
        result[name] = run_case(seed, dims, affine == "1", float(eps), getattr(torch, dtype))
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
