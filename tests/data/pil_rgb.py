#!/usr/bin/python3
"""The reference for tests/data/image_decode_test.cpp: PIL's Image.open(f).convert("RGB"),
torchvision's default ImageFolder loader, for every file named.
    pil_rgb.py OUT_DIR FILE...
writes OUT_DIR/<file name>.rgb ("W H\\n" then the RGB bytes, row by row) or, when PIL cannot
load the file, OUT_DIR/<file name>.error holding PIL's message."""
import os
import sys

from PIL import Image


def main():
    out_dir = sys.argv[1]
    for path in sys.argv[2:]:
        name = os.path.join(out_dir, os.path.basename(path))
        try:
            with open(path, "rb") as f:
                im = Image.open(f).convert("RGB")
        except Exception as e:  # PIL raises several types for bad files; the test only needs to know it did
            with open(name + ".error", "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            continue
        with open(name + ".rgb", "wb") as f:
            f.write(f"{im.width} {im.height}\n".encode())
            f.write(im.tobytes())


if __name__ == "__main__":
    main()
