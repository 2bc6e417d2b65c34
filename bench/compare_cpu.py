#!/usr/bin/python3
"""dpcore's training step against PyTorch's on the CPU, side by side on one machine.

One step = zero grads, forward, NLL loss (mean), backward, SGD (lr 0.01, momentum 0.9), on
a random batch made once before the clock starts. bert-tiny and bert-mini (BertForSequence-
Classification, the torch.nn twin of tests/layers/torch_bert.py on the PyTorch side; 32
sequences of 128 ids, no padding, dropout 0.1) step with AdamW (torch.optim.AdamW's defaults)
on both sides. Both sides run as fresh processes with
the same thread count, alternating (dpcore, PyTorch, dpcore, PyTorch, ...) so that a burst
of load from other work on the machine hits both; each round's ratio compares two runs
next to each other in time, and the table reports the median over the rounds.

    /usr/bin/python3 bench/compare_cpu.py --bench BUILD/bench/dpcore_step_bench \
        --threads 1 2 --rounds 3 --json cpu.json
    /usr/bin/python3 bench/compare_cpu.py --models resnet8 resnet20 --threads 2 --rounds 1
    /usr/bin/python3 bench/compare_cpu.py --models resnet18 resnet50 --image-size 64 --threads 1 2
    /usr/bin/python3 bench/compare_cpu.py --models bert-tiny bert-mini --threads 1 2 --rounds 3
    /usr/bin/python3 bench/compare_cpu.py --models fashioncnn resnet8 --precision bf16 --threads 1 2

Every PyTorch of --torch-python runs in each round beside dpcore, so the table has one
ratio per PyTorch: by default Debian's 1.13 (/usr/bin/python3) and, once
bench/install-torch.sh has made bench/.venv, the current one pinned there. The PyTorch side
is this same file started with --torch-worker by that interpreter, so that it also starts
cold, in its own process. The record names the CPU model and OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE, which move PyTorch's times (bench/machine.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import default_torch_pythons, describe, record
from torch_models import BERT, adamw, build_torch_model, make_step, random_batch, sgd, summarize, write_json

# Steps per run: enough for a stable median, few enough that 3 rounds x 2 engines x
# 2 thread counts stay within minutes on a 2-core machine (vggs is ~20x simplenet). The
# ResNets (1x28x28, batch 128 as He et al. train them): PyTorch takes about 0.2 s a step
# for resnet8 and 0.5 s for resnet20 on 2 threads of the 2-core development machine.
PLAN = {  # model: (batch, warmup, steps)
    "simplenet": (64, 5, 40),
    "fashioncnn": (64, 3, 15),
    "vggs": (64, 2, 6),
    "resnet8": (128, 3, 15),
    "resnet20": (128, 2, 6),
    # torchvision's, batch 32 as the seeds' workflow trains ResNet-50 (--image-size 64 or
    # 224): steps of seconds (64) to a minute (resnet50 at 224) on the development machine.
    "resnet18": (32, 1, 3),
    "resnet50": (32, 1, 2),
    # Batch 32 of 128 tokens: PyTorch 1.13 takes about 3.5 s a step for bert-tiny on 2 threads
    # of the (loaded) development machine, and several times that for bert-mini.
    "bert-tiny": (32, 1, 4),
    "bert-mini": (32, 1, 2),
}


# ---------------------------------------------------------------------------------------
# The PyTorch side (bench/torch_models.py), in a process of its own
# ---------------------------------------------------------------------------------------
def torch_worker(args):
    """Times PyTorch's step in this process; prints one JSON line like dpcore_step_bench."""
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = build_torch_model(args.model)
    x, y = random_batch(args.model, args.batch, "cpu", args.seed, args.image_size)
    step = make_step(model, adamw(model) if args.model in BERT else sgd(model), x, y, args.accum, args.precision)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
    print(json.dumps({"engine": "pytorch", "version": torch.__version__, "model": args.model, "input": list(x.shape[1:]),
                      "batch": args.batch, "accum": args.accum, "precision": args.precision, "threads": torch.get_num_threads(),
                      "steps": args.steps, "warmup": args.warmup, **summarize(times, args.batch)}))


# ---------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------
def run_json(cmd, env):
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def environment(policy):
    """The environment both sides run in: the same OpenMP wait policy for both (PyTorch
    1.13 and dpcore both use libgomp), and no thread count from the outside."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy.upper()
    return env


def compare(args, model, threads):
    """One row: the rounds of dpcore and every PyTorch, and per PyTorch (in --torch-python's
    order) its median samples/s and the median, min and max of the rounds' ratios."""
    batch, warmup, steps = PLAN[model]
    steps = args.steps or steps
    common = ["--model", model, "--batch", str(batch), "--threads", str(threads),
              "--warmup", str(warmup), "--steps", str(steps), "--image-size", str(args.image_size),
              "--precision", args.precision]
    optimizer = ["--optimizer", "adamw"] if model in BERT else []
    commands = [[args.bench, "--device", "cpu"] + common + optimizer]
    commands += [[python, os.path.abspath(__file__), "--torch-worker"] + common for python in args.torch_python]
    env = environment(args.omp_wait_policy)
    rounds = []
    for r in range(args.rounds):
        # Rotate which engine goes first, so none always runs on a warmer machine.
        shift = r % len(commands)
        ran = [None] * len(commands)
        for k in list(range(shift, len(commands))) + list(range(shift)):
            ran[k] = run_json(commands[k], env)
        d, torches = ran[0], ran[1:]
        if any(t["input"] != d["input"] for t in torches):
            sys.exit(f"{model}: dpcore's input {d['input']} differs from PyTorch's {[t['input'] for t in torches]}")
        rounds.append({"dpcore": d, "pytorch": torches,
                       "ratios": [d["samples_per_s"] / t["samples_per_s"] for t in torches]})
        print(f"  {model} b{batch} t{threads} round {r + 1}: dpcore {d['median_us'] / 1e3:8.2f} ms, " +
              ", ".join(f"pytorch {t['version']} {t['median_us'] / 1e3:8.2f} ms" for t in torches), file=sys.stderr)
    pytorch = []
    for k in range(len(args.torch_python)):
        ratios = [x["ratios"][k] for x in rounds]
        pytorch.append({"version": rounds[0]["pytorch"][k]["version"], "python": args.torch_python[k],
                        "samples_per_s": statistics.median(x["pytorch"][k]["samples_per_s"] for x in rounds),
                        "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)})
    return {"model": model, "input": rounds[0]["dpcore"]["input"], "batch": batch, "threads": threads,
            "precision": args.precision,
            "steps": steps, "warmup": warmup,
            "dpcore_samples_per_s": statistics.median(x["dpcore"]["samples_per_s"] for x in rounds),
            "pytorch": pytorch, "rounds": rounds}


def print_table(rows):
    print(f"{'model':<11} {'input':>9} {'batch':>5} {'thr':>3} {'PyTorch':>12} {'PyTorch samples/s':>18} {'dpcore samples/s':>17} "
          f"{'dpcore/PyTorch':>15} {'(min-max)':>12}")
    for r in rows:
        for t in r["pytorch"]:
            print(f"{r['model']:<11} {'x'.join(map(str, r['input'])):>9} {r['batch']:>5} {r['threads']:>3} {t['version']:>12} {t['samples_per_s']:>18.0f} "
                  f"{r['dpcore_samples_per_s']:>17.0f} {t['ratio']:>14.2f}x "
                  f"{t['ratio_min']:>5.2f}-{t['ratio_max']:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/bench/dpcore_step_bench", help="path of dpcore_step_bench")
    p.add_argument("--models", nargs="+", default=["simplenet", "fashioncnn"], choices=sorted(PLAN),
                   help="models to compare (vggs and the ResNets are optional: slower steps)")
    p.add_argument("--image-size", type=int, default=0,
                   help="the ResNets: square images of this size (0: the model's own; the others take only theirs)")
    p.add_argument("--threads", nargs="+", type=int, default=[1], help="thread counts, e.g. 1 2")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: both sides autocast the forward to bfloat16 (dpcore_step_bench --precision bf16, "
                        "torch.autocast('cpu', torch.bfloat16)), the master weights float32")
    p.add_argument("--rounds", type=int, default=3, help="interleaved runs of each engine")
    p.add_argument("--steps", type=int, default=0, help="timed steps per run (0: the per-model default)")
    p.add_argument("--torch-python", nargs="+", default=default_torch_pythons(), metavar="PYTHON",
                   help="the interpreters whose PyTorch to compare with (default: %(default)s)")
    p.add_argument("--omp-wait-policy", choices=["passive", "active", "default"], default="passive",
                   help="OMP_WAIT_POLICY for both engines (see docs/benchmarks.md for why passive)")
    p.add_argument("--json", help="also write the results here")
    # The PyTorch worker (internal).
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--accum", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        args.threads = args.threads[0]
        return torch_worker(args)
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"--bench {args.bench}: not an executable (build the dpcore_step_bench target)")

    machine = record(args.torch_python)
    print(describe(machine), file=sys.stderr)
    load_before = os.getloadavg()
    rows = [compare(args, m, t) for t in args.threads for m in args.models]
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; "
          f"OMP_WAIT_POLICY={args.omp_wait_policy}; {describe(machine)}")
    print_table(rows)
    if args.json:
        write_json(args.json, {"load_before": load_before, "load_after": load_after, **machine,
                               "omp_wait_policy": args.omp_wait_policy, "results": rows})


if __name__ == "__main__":
    main()
