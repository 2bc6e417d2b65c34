"""A model's weights as PyTorch saves them after .bfloat16() and .half(), for
tests/layers/half_weights_test.cpp.

    torch_half_weights.py IN.safetensors OUT_BF16.safetensors OUT_F16.safetensors

Reads IN (float32 weights written by dpcore), converts every floating tensor with
torch's .to(torch.bfloat16) / .to(torch.float16) as model.bfloat16() / model.half() do
(int64 counters such as num_batches_tracked stay int64), and writes each result with
scripts/make_fixtures.py's safetensors writer (the reference writer's layout, BF16 and F16
dtype names), atomically.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from make_fixtures import load_safetensors, save_safetensors  # noqa: E402


def main():
    source, out_bf16, out_f16 = sys.argv[1:4]
    state = load_safetensors(source)
    for dtype, out in ((torch.bfloat16, out_bf16), (torch.float16, out_f16)):
        save_safetensors({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}, out, {})


if __name__ == "__main__":
    main()
