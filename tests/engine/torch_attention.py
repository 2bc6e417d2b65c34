"""scaled_dot_product_attention's PyTorch reference, for tests/engine/attention_test.cpp.

    torch_attention.py OUT.json NAME:B:H:TQ:TK:D:CAUSAL:PADDED:SCALE:DTYPE...

Debian's PyTorch 1.13 has no torch.nn.functional.scaled_dot_product_attention (2.0 added
it), so the reference is the formula that function's math backend computes, with autograd:
softmax(q k^T * scale + mask) v, the mask -inf where a key is padded (PADDED 1: about one
key in four, key 0 always kept, so that no row is fully masked, where PyTorch gives NaN)
or, CAUSAL 1, above the diagonal of torch.ones(Tq, Tk).tril() (is_causal's top-left
alignment). SCALE 0 means the default 1 / sqrt(d); DTYPE is float32 or float64. For each
case: the inputs drawn from a seed (q, k, v, the mask of 1 = attend / 0 = padding, the
output gradient dout) and the results o, dq, dk, dv, all flattened (exact in JSON).
"""
import json
import math
import os
import sys

import torch


def run_case(seed, B, H, Tq, Tk, d, causal, padded, scale, dtype):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.rand(B, H, t, d, generator=gen, dtype=torch.float64) * 2 - 1 for t in (Tq, Tk, Tk))
    dout = torch.rand(B, H, Tq, d, generator=gen, dtype=torch.float64) * 2 - 1
    mask = (torch.rand(B, Tk, generator=gen, dtype=torch.float64) > 0.25).to(torch.float64)
    mask[:, 0] = 1.0
    if not padded:
        mask.fill_(1.0)
    q, k, v, dout, mask = (t.to(dtype) for t in (q, k, v, dout, mask))
    record = {"q": q, "k": k, "v": v, "dout": dout, "mask": mask}
    for t in (q, k, v):
        t.requires_grad_(True)
    scale = scale if scale != 0 else 1.0 / math.sqrt(d)
    allowed = (mask != 0)[:, None, None, :].expand(B, H, Tq, Tk)
    if causal:
        allowed = allowed & torch.ones(Tq, Tk, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v
    o.backward(dout)
    record.update(o=o, dq=q.grad, dk=k.grad, dv=v.grad)
    return {name: t.detach().flatten().tolist() for name, t in record.items()}


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    results = {}
    for seed, spec in enumerate(specs, start=1):
        name, B, H, Tq, Tk, d, causal, padded, scale, dtype = spec.split(":")
        results[name] = run_case(seed, int(B), int(H), int(Tq), int(Tk), int(d), causal == "1", padded == "1",
                                 float(scale), getattr(torch, dtype))
    with open(out + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
