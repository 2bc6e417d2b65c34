#!/usr/bin/python3
"""The reference for tests/data/image_folder_test.cpp: what torchvision 0.14's
datasets.ImageFolder lists in a folder, without decoding anything.
    torchvision_folder.py DIR
prints one JSON object: {"classes": [...], "class_to_idx": {...}, "samples": [[path, index], ...]}."""
import json
import sys

from torchvision.datasets import ImageFolder


def main():
    folder = ImageFolder(sys.argv[1])
    print(json.dumps({"classes": folder.classes, "class_to_idx": folder.class_to_idx, "samples": folder.samples}))


if __name__ == "__main__":
    main()
