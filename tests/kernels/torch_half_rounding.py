"""PyTorch's float32 -> bfloat16 and float16 conversion, for tests/kernels/half_types_test.cpp.

    torch_half_rounding.py IN.bin OUT.bin

IN.bin holds float32 values as little-endian uint32 bit patterns; OUT.bin gets, for the
same values, torch.tensor(x, dtype=torch.float32).to(torch.bfloat16)'s bit patterns, then
.to(torch.float16)'s, both as little-endian uint16. OUT.bin appears atomically.
"""
import os
import sys

import torch


def main():
    source, out = sys.argv[1], sys.argv[2]
    with open(source, "rb") as f:
        raw = bytearray(f.read())
    x = torch.frombuffer(raw, dtype=torch.int32).view(torch.float32)
    halves = [x.to(dtype).view(torch.int16).numpy().astype("<i2").tobytes() for dtype in (torch.bfloat16, torch.float16)]
    with open(out + ".tmp", "wb") as f:
        for h in halves:
            f.write(h)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
