#!/usr/bin/python3
"""The image-folder loader against torchvision's, side by side (issue 28, item 6).

Both sides read the same folder (torchvision's ImageFolder layout; scripts/make_imagefolder.py
writes Fashion-MNIST as one) with the same transforms, the same batch size and the same
number of workers, and deliver shuffled batches of float tensors:

  dpcore   dpcore_loader_bench --transform SPEC --workers N (bench/loader_bench.cpp): the
           loader `dpcore train --data imagefolder:DIR --workers N` uses, its --workers
           threads decoding (libpng / libjpeg-turbo) and transforming each batch's files;
  PyTorch  torchvision.datasets.ImageFolder + torch.utils.data.DataLoader(num_workers=N),
           the transforms of the same spec built from torchvision.transforms (Debian's
           torchvision 0.14 with PyTorch 1.13: the one whose pixels dpcore's transforms match).

Each side runs in a fresh process; W warm-up batches (the DataLoader's worker processes
start there), then K batches timed, images per second over those. The runs alternate
(dpcore, PyTorch, dpcore, ...) and the table gives the medians and the median ratio.

    /usr/bin/python3 scripts/make_imagefolder.py fashion-mnist /tmp/fashion-png --per-class 1000
    /usr/bin/python3 bench/compare_loader.py --data /tmp/fashion-png/train --workers 1 2 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_TRANSFORM = "RandomResizedCrop(64),RandomHorizontalFlip(),ToTensor()"
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))  # dpcore's Normalize(imagenet)


def torchvision_transform(spec):
    """dpcore's --transform text as torchvision.transforms: the spec's calls are Python calls
    of the same names and arguments (Normalize(imagenet) names ImageNet's statistics)."""
    import torchvision.transforms as T

    def normalize(mean, std=None):
        return T.Normalize(*IMAGENET) if mean == "imagenet" else T.Normalize(mean, std)

    names = {"RandomResizedCrop": T.RandomResizedCrop, "RandomHorizontalFlip": T.RandomHorizontalFlip,
             "Resize": T.Resize, "CenterCrop": T.CenterCrop, "ToTensor": T.ToTensor, "Normalize": normalize,
             "imagenet": "imagenet"}
    steps = eval("[" + spec + "]", {"__builtins__": {}}, names)  # noqa: S307 (the benchmark's own flag)
    return T.Compose(steps)


def torch_worker(args):
    import torch
    import torchvision

    data = torchvision.datasets.ImageFolder(args.data, transform=torchvision_transform(args.transform))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers[0],
                                         persistent_workers=True)
    batches = iter(loader)

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    for _ in range(args.warmup):
        next_batch()
    start, images, shape = time.perf_counter(), 0, None
    for _ in range(args.batches):
        x, _ = next_batch()
        images += x.shape[0]
        shape = list(x.shape[1:])
    seconds = time.perf_counter() - start
    print(json.dumps({"engine": "pytorch", "torch": torch.__version__, "torchvision": torchvision.__version__,
                      "workers": args.workers[0], "batch": args.batch, "batches": args.batches, "images": images,
                      "sample": shape, "seconds": seconds, "images_per_s": images / seconds}))


def run_json(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/bench/dpcore_loader_bench")
    p.add_argument("--data", required=True, help="an image folder (class sub-folders)")
    p.add_argument("--transform", default=DEFAULT_TRANSFORM, help="dpcore's --transform syntax (%(default)s)")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args)

    common = ["--data", args.data, "--transform", args.transform, "--batch", str(args.batch), "--batches",
              str(args.batches), "--warmup", str(args.warmup)]
    rows = []
    for workers in args.workers:
        commands = [[args.bench, *common, "--workers", str(workers)],
                    ["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker", *common, "--workers", str(workers)]]
        rounds = []
        for r in range(args.rounds):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            ran = [None, None]
            for k in order:
                ran[k] = run_json(commands[k])
            rounds.append(ran)
            print(f"  workers {workers} round {r + 1}: dpcore {ran[0]['images_per_s']:8.0f} images/s, "
                  f"torchvision {ran[1]['images_per_s']:8.0f} images/s", file=sys.stderr)
        if rounds[0][0]["sample"] != rounds[0][1]["sample"]:
            sys.exit(f"the two sides' samples differ: {rounds[0][0]['sample']} against {rounds[0][1]['sample']}")
        rows.append({"workers": workers, "sample": rounds[0][0]["sample"],
                     "dpcore_images_per_s": statistics.median(x[0]["images_per_s"] for x in rounds),
                     "torchvision_images_per_s": statistics.median(x[1]["images_per_s"] for x in rounds),
                     "ratio": statistics.median(x[0]["images_per_s"] / x[1]["images_per_s"] for x in rounds),
                     "rounds": rounds})
    print(f"{args.data}, transform {args.transform}, batch {args.batch}, {args.batches} batches timed, "
          f"torchvision {rows[0]['rounds'][0][1]['torchvision']}")
    print(f"{'workers':>7} {'sample':>10} {'dpcore images/s':>16} {'torchvision images/s':>21} {'dpcore/torchvision':>19}")
    for r in rows:
        print(f"{r['workers']:>7} {'x'.join(map(str, r['sample'])):>10} {r['dpcore_images_per_s']:>16.0f} "
              f"{r['torchvision_images_per_s']:>21.0f} {r['ratio']:>18.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"data": args.data, "transform": args.transform, "batch": args.batch, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
