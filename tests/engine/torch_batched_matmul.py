"""torch.matmul and torch.nn.functional.linear, forward and backward, for
tests/engine/batched_matmul_test.cpp.

    torch_batched_matmul.py OUT.json CASE...

CASE is NAME:DTYPE:matmul:TRANS_A:TRANS_B:BATCH:M:N:K (BATCH the batch dimensions joined
by "x", "2x4") or NAME:DTYPE:linear:LEADING:IN:OUT, DTYPE float32 or float64. Per case,
random inputs drawn from the case's index as seed and a random output gradient; a
transposed operand is stored as [..., K, M] (or [..., N, K]) and transposed by
.transpose(-1, -2), a view, as attention does. Writes per case the flattened inputs, the
output and the gradients of every input (exact decimal values in JSON).
"""
import json
import os
import sys

import torch


def dims(text):
    return [int(d) for d in text.split("x")] if text else []


def randn(gen, shape, dtype):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(True)


def run_matmul(gen, dtype, trans_a, trans_b, batch, m, n, k):
    a = randn(gen, batch + ([k, m] if trans_a else [m, k]), dtype)
    b = randn(gen, batch + ([n, k] if trans_b else [k, n]), dtype)
    c = torch.matmul(a.transpose(-1, -2) if trans_a else a, b.transpose(-1, -2) if trans_b else b)
    dc = torch.randn(c.shape, generator=gen, dtype=torch.float64).to(dtype)
    c.backward(dc)
    return {"a": a, "b": b, "dc": dc, "c": c, "da": a.grad, "db": b.grad}


def run_linear(gen, dtype, leading, features_in, features_out):
    x = randn(gen, leading + [features_in], dtype)
    w = randn(gen, [features_out, features_in], dtype)
    bias = randn(gen, [features_out], dtype)
    y = torch.nn.functional.linear(x, w, bias)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    y.backward(dy)
    return {"x": x, "w": w, "bias": bias, "dy": dy, "y": y, "dx": x.grad, "dw": w.grad, "dbias": bias.grad}


def main():
    out, cases = sys.argv[1], sys.argv[2:]
    result = {}
    for seed, case in enumerate(cases):
        name, dtype_name, kind, *fields = case.split(":")
        gen = torch.Generator().manual_seed(seed)
        dtype = {"float32": torch.float32, "float64": torch.float64}[dtype_name]
        if kind == "matmul":
            trans_a, trans_b, batch, m, n, k = fields
            tensors = run_matmul(gen, dtype, trans_a == "1", trans_b == "1", dims(batch), int(m), int(n), int(k))
        else:
            leading, features_in, features_out = fields
            tensors = run_linear(gen, dtype, dims(leading), int(features_in), int(features_out))
        result[name] = {key: t.detach().flatten().tolist() for key, t in tensors.items()}
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
