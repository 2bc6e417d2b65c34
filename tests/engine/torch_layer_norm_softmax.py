"""layer_norm and masked softmax forward and backward by PyTorch, for
tests/engine/layer_norm_softmax_test.cpp (one process for every case).

    torch_layer_norm_softmax.py OUT.json CASE...
    CASE = NAME:layer_norm:SHAPE:AFFINE:EPS:DTYPE | NAME:softmax:SHAPE:MASK_SHAPE:CAUSAL:DTYPE

SHAPE is dims joined by "x", MASK_SHAPE the same or "-" (no mask), AFFINE and CAUSAL 0 or 1,
DTYPE float32 or float64. layer_norm: x (mean offset 3), weight, bias and dy drawn from a
seed, y = torch.nn.functional.layer_norm(x, (D,), weight, bias, eps) and the gradients of
sum(y * dy) for x, weight and bias. softmax: x, a mask (every fifth entry -inf, never the
first of a row) and dy, y = torch.softmax(x + mask, -1) with causal applied as PyTorch 2.x's
scaled_dot_product_attention(is_causal=True) does (keys kept where ones(Tq, Tk).tril(0)),
and the gradient of sum(y * dy) for x. All values written exactly (float64 in JSON), -inf
as null.
"""
import json
import os
import sys

import torch


def dims(text):
    return [int(v) for v in text.split("x")]


def layer_norm_case(gen, shape, affine, eps, dtype):
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
    return out


def softmax_case(gen, shape, mask_shape, causal, dtype):
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    scores = x
    out = {"x": x, "dy": dy}
    if mask_shape is not None:
        mask = torch.rand(mask_shape, generator=gen, dtype=torch.float64).to(dtype) * 4 - 2
        flat = mask.view(-1)
        for i in range(flat.numel()):
            if i % 5 == 3 and i % mask_shape[-1] != 0:
                flat[i] = float("-inf")
        scores = scores + mask
        out["mask"] = mask
    if causal:
        keep = torch.ones(shape[-2], shape[-1], dtype=torch.bool).tril(diagonal=0)
        scores = scores.masked_fill(~keep, float("-inf"))
    y = torch.softmax(scores, dim=-1)
    y.backward(dy)
    out.update({"y": y, "dx": x.grad})
    return out


def main():
    out, cases = sys.argv[1], sys.argv[2:]
    result = {}
    for seed, case in enumerate(cases):
        name, op, shape, a, b, dtype = case.split(":")
        gen = torch.Generator().manual_seed(seed)
        dtype = getattr(torch, dtype)
        if op == "layer_norm":
            tensors = layer_norm_case(gen, dims(shape), a == "1", float(b), dtype)
        else:
            tensors = softmax_case(gen, dims(shape), None if a == "-" else dims(a), b == "1", dtype)
        # JSON has no infinity: a masked (-inf) entry is written as null.
        result[name] = {k: [None if v == float("-inf") else v for v in t.detach().double().flatten().tolist()]
                        for k, t in tensors.items()}
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
