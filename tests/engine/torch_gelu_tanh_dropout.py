"""PyTorch's gelu (both forms), tanh and dropout given a mask, for
tests/engine/gelu_tanh_dropout_test.cpp.

    torch_gelu_tanh_dropout.py IN.json OUT.json

IN holds cases {"name", "op": "gelu" | "tanh" | "dropout", "approximate" (gelu), "p" and
"mask" (dropout: 0 or 1 per element), "shape", "x", "dy"}. For each case and dtype
(float64, float32: x and dy converted from the given doubles) it runs the op forward and
backward through autograd with dy as the output gradient, and writes {name: {dtype: {"y",
"dx"}}}. Dropout's mask comes from dpcore (the generators differ): y = x * noise with
noise = mask / (1 - p), as torch.nn.functional.dropout computes it on the CPU
(noise.bernoulli_(1 - p).div_(1 - p), then input * noise), and so dx = dy * noise.
"""
import json
import os
import sys

import torch


def forward(case, x):
    if case["op"] == "gelu":
        return torch.nn.functional.gelu(x, approximate=case["approximate"])
    if case["op"] == "tanh":
        return torch.tanh(x)
    p = case["p"]
    noise = torch.tensor(case["mask"], dtype=x.dtype).reshape(x.shape).div_(1 - p)
    return x * noise


def run(case, dtype):
    shape = case["shape"]
    x = torch.tensor(case["x"], dtype=dtype).reshape(shape).requires_grad_(True)
    dy = torch.tensor(case["dy"], dtype=dtype).reshape(shape)
    y = forward(case, x)
    y.backward(dy)
    return {"y": y.detach().flatten().tolist(), "dx": x.grad.flatten().tolist()}


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    out = sys.argv[2]
    result = {c["name"]: {"float64": run(c, torch.float64), "float32": run(c, torch.float32)} for c in cases}
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
