#!/usr/bin/python3
"""Writes Fashion-MNIST or CIFAR-10 as an ImageFolder of PNGs, so that `dpcore train --data
imagefolder:DIR` (docs/image-folders.md) runs on real images on any machine:
    scripts/make_imagefolder.py fashion-mnist OUT [--from DIR] [--per-class N]
    scripts/make_imagefolder.py cifar10 OUT --from DIR [--per-class N]
OUT/train/<class>/<index>.png and OUT/test/<class>/<index>.png, <index> the image's position
in its file (zero-padded, so the names sort in file order). The class folders are named
"<label>_<name>" ("0_T-shirt_top"), so that torchvision's sorted class_to_idx gives every
class its original label. Fashion-MNIST comes from Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist) unless --from names a folder of its IDX files (raw or .gz);
CIFAR-10 from the binary version's data_batch_1.bin .. data_batch_5.bin and test_batch.bin.
--per-class N keeps the first N images of each class in each split (a small set for tests).
Nothing is half-written: the folder is made under a temporary name beside OUT and renamed to
OUT when complete; an existing OUT is refused. Needs Debian's Python and PIL (python3-pil)."""
import argparse
import gzip
import os
import shutil
import struct
import sys
import tempfile

from PIL import Image

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                         "Ankle_boot"]
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def fail(message):
    sys.exit(f"make_imagefolder.py: {message}")


def read_maybe_gzip(folder, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    fail(f"neither {stem} nor {stem}.gz is in {folder} (install Debian's dataset-fashion-mnist or give --from DIR)")


def fashion_mnist(folder, split):
    """(make_image, label) pairs of one split: make_image() is the PIL image (made only for
    the images kept)."""
    prefix = "train" if split == "train" else "t10k"
    images = read_maybe_gzip(folder, prefix + "-images-idx3-ubyte")
    labels = read_maybe_gzip(folder, prefix + "-labels-idx1-ubyte")
    magic, n, h, w = struct.unpack(">IIII", images[:16])
    if magic != 0x803 or struct.unpack(">II", labels[:8]) != (0x801, n) or len(images) != 16 + n * h * w:
        fail(f"{folder}: the {prefix} IDX files are not a matching images/labels pair")
    for i in range(n):
        yield (lambda i=i: Image.frombytes("L", (w, h), images[16 + i * h * w: 16 + (i + 1) * h * w])), labels[8 + i]


def cifar10(folder, split):
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if split == "train" else ["test_batch.bin"]
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            fail(f"{path} not found (expected CIFAR-10's binary version in {folder})")
        with open(path, "rb") as f:
            data = f.read()
        if len(data) % 3073:
            fail(f"{path}: {len(data)} bytes is not a multiple of the 3073-byte record")
        for r in range(len(data) // 3073):
            rec = data[r * 3073: (r + 1) * 3073]
            planes = lambda rec=rec: [Image.frombytes("L", (32, 32), rec[1 + c * 1024: 1 + (c + 1) * 1024]) for c in range(3)]
            yield (lambda planes=planes: Image.merge("RGB", planes())), rec[0]


def write_split(samples, classes, folder, per_class):
    counts = [0] * len(classes)
    for index, (make_image, label) in enumerate(samples):
        if label >= len(classes):
            fail(f"label {label} of image {index} is not one of the {len(classes)} classes")
        if per_class is not None and counts[label] >= per_class:
            continue
        counts[label] += 1
        class_folder = os.path.join(folder, f"{label}_{classes[label]}")
        os.makedirs(class_folder, exist_ok=True)
        make_image().save(os.path.join(class_folder, f"{index:05d}.png"))
    return sum(counts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=["fashion-mnist", "cifar10"])
    parser.add_argument("out")
    parser.add_argument("--from", dest="source", help="the folder of the dataset's files")
    parser.add_argument("--per-class", type=int, help="at most this many images of each class per split")
    args = parser.parse_args()
    if args.per_class is not None and args.per_class < 1:
        fail(f"--per-class {args.per_class}: must be at least 1")
    if os.path.exists(args.out):
        fail(f"{args.out} exists already; give a new folder")
    if args.dataset == "cifar10" and not args.source:
        fail("cifar10 needs --from DIR, the folder of its binary batches")
    source = args.source or FASHION_MNIST_DIR
    read, classes = (fashion_mnist, FASHION_MNIST_CLASSES) if args.dataset == "fashion-mnist" else (cifar10, CIFAR10_CLASSES)
    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    temp = tempfile.mkdtemp(prefix=os.path.basename(args.out) + ".tmp-", dir=parent)
    try:
        written = {split: write_split(read(source, split), classes, os.path.join(temp, split), args.per_class)
                   for split in ("train", "test")}
        os.rename(temp, args.out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    print(f"wrote {args.out}: {written['train']} train and {written['test']} test images of {len(classes)} classes")


if __name__ == "__main__":
    main()
