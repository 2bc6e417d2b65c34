#!/usr/bin/python3
"""The reference for tests/data/image_transforms_test.cpp: torchvision 0.14's transforms on PIL
images.
    torchvision_transforms.py CASES.json OUT_DIR
CASES.json is a list of cases, each {"name": ..., "op": ..., ...}; an image operand "input" is
an image file (opened as PIL's convert("RGB")) or a .rgb file ("W H\\n" then the RGB bytes).
    resize        "size": n or [h, w]          transforms.Resize(size)
    center_crop   "size": [h, w]               transforms.CenterCrop(size)
    resized_crop  "box": [top, left, h, w], "size": [h, w]   F.resized_crop (bilinear)
    hflip                                      F.hflip
    tensor        "mean", "std"                ToTensor() then Normalize(mean, std)
write OUT_DIR/<name>.rgb (as above), or OUT_DIR/<name>.f32 (the float32 CHW values) for tensor.
    crop_params   "h", "w", "scale", "ratio", "uniforms", "randints"
runs RandomResizedCrop.get_params on an h x w image with torch.empty(1).uniform_ and
torch.randint patched to return the given values in turn (as float64 and int64 tensors), and
prints, one JSON object per line, {"name", "box": [i, j, h, w], "uniform_ranges", "randint_highs",
"uniforms_used", "randints_used"}."""
import json
import os
import sys
from unittest import mock

import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import functional as F


def load(path):
    if path.endswith(".rgb"):
        with open(path, "rb") as f:
            w, h = map(int, f.readline().split())
            return Image.frombytes("RGB", (w, h), f.read())
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def write_rgb(path, im):
    with open(path, "wb") as f:
        f.write(f"{im.width} {im.height}\n".encode())
        f.write(im.tobytes())


def crop_params(case):
    uniforms, randints = iter(case["uniforms"]), iter(case["randints"])
    seen = {"uniform_ranges": [], "randint_highs": [], "uniforms_used": 0, "randints_used": 0}

    class Uniform:
        def uniform_(self, lo, hi):
            seen["uniform_ranges"].append([float(lo), float(hi)])
            seen["uniforms_used"] += 1
            return torch.tensor([next(uniforms)], dtype=torch.float64)

    def randint(low, high, size):
        seen["randint_highs"].append(int(high))
        seen["randints_used"] += 1
        assert low == 0 and size == (1,), (low, size)
        return torch.tensor([next(randints)], dtype=torch.int64)

    image = Image.new("RGB", (case["w"], case["h"]))
    with mock.patch.object(torch, "empty", lambda *size, **kw: Uniform()), mock.patch.object(torch, "randint", randint):
        box = transforms.RandomResizedCrop.get_params(image, case["scale"], case["ratio"])
    print(json.dumps({"name": case["name"], "box": list(box), **seen}))


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    out_dir = sys.argv[2]
    for case in cases:
        op, name = case["op"], case["name"]
        if op == "crop_params":
            crop_params(case)
            continue
        im = load(case["input"])
        if op == "resize":
            out = transforms.Resize(case["size"])(im)
        elif op == "center_crop":
            out = transforms.CenterCrop(case["size"])(im)
        elif op == "resized_crop":
            out = F.resized_crop(im, *case["box"], case["size"])
        elif op == "hflip":
            out = F.hflip(im)
        elif op == "tensor":
            t = transforms.Normalize(case["mean"], case["std"])(transforms.ToTensor()(im))
            with open(os.path.join(out_dir, name + ".f32"), "wb") as f:
                f.write(t.contiguous().numpy().astype("<f4").tobytes())
            continue
        else:
            raise ValueError(f"unknown op {op}")
        write_rgb(os.path.join(out_dir, name + ".rgb"), out)


if __name__ == "__main__":
    main()
