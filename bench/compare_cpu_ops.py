#!/usr/bin/python3
"""Issue 24's CPU kernels against PyTorch's on the same shapes and threads, side by side.

Each round runs cpu_kernels_bench's transformer cases (bench/cpu_transformer_bench.cpp) as
one process, then each PyTorch of --torch-python as a process of its own (this file with
--torch-worker), on the cases dpcore ran: the shapes and thread counts come from
dpcore's benchmark names (bench/transformer_ops.py), so they cannot differ. The order
rotates every round. Each side reports the mean time per call over at least --min-time
seconds after a warm-up call (Google Benchmark's real or manual time; time.perf_counter
here). Per case and round it forms

  fused / explicit   attention only: the fused op's time over the explicit path's (below 1:
                     the fused op is faster; the explicit path is our
                     batched_matmul + softmax + batched_matmul), measured back to back
  frac_copy_bw       memory-bound kernels: dpcore's GB/s over a parallel memcpy of the same
                     bytes timed in the same iterations (cpu_kernels_bench's counter)
  PyTorch / dpcore   PyTorch's time over dpcore's (above 1: dpcore is faster), per PyTorch

and prints the median over the rounds with the min-max. PyTorch's attention is
F.scaled_dot_product_attention where it has one (2.x), else the explicit formula (1.13);
its backward passes are torch.autograd.grad on a graph made once; AdamW is its fused
implementation where it has one for the CPU, else its default.

    /usr/bin/python3 bench/compare_cpu_ops.py --bench build/bench/cpu_kernels_bench --rounds 3 --json ops.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import default_torch_pythons, describe, record
from transformer_ops import parse
from torch_models import write_json

# cpu_kernels_bench's transformer cases (all of bench/cpu_transformer_bench.cpp).
FILTER = "BM_(Attention|LayerNorm|Gelu|Softmax|AdamW)"


def torch_worker(args):
    """Times PyTorch on the cases of --cases (dpcore's benchmark names); one JSON line."""
    import torch

    from transformer_ops import make_op

    results = {}
    for name in json.loads(args.cases):
        case = parse(name)
        torch.set_num_threads(case.threads)
        run, what = make_op(torch, case, "cpu")
        run()
        calls, start = 0, time.perf_counter()
        while calls < 3 or time.perf_counter() - start < args.min_time:
            run()
            calls += 1
        results[name] = {"us": (time.perf_counter() - start) / calls * 1e6, "calls": calls, "what": what}
    print(json.dumps({"version": torch.__version__, "results": results}))


def run_json(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd[:3])} ...\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def run_dpcore(args):
    """{benchmark name: its JSON entry} of one cpu_kernels_bench run."""
    doc = run_json([args.bench, f"--benchmark_filter={args.filter}", "--benchmark_format=json",
                    f"--benchmark_min_time={args.min_time}"])
    return {b["name"]: b for b in doc["benchmarks"] if b.get("run_type", "iteration") == "iteration"}


def microseconds(entry):
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[entry["time_unit"]]
    return entry["real_time"] * scale


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def explicit_name(fused_name):
    return fused_name.replace("/fused:1/", "/fused:0/")


def summarize(rounds, torch_versions):
    """Per dpcore case: its median time, its counters, and the ratios of module docstring."""
    rows = []
    for name, first in rounds[0]["dpcore"].items():
        case = parse(name)
        row = {"name": name, "op": case.op, "shape": case.shape_text(), "variant": case.variant,
               "threads": case.threads, "label": first.get("label", ""),
               "dpcore_us": spread([microseconds(r["dpcore"][name]) for r in rounds])}
        for counter in ("GFLOP/s", "GB/s", "frac_copy_bw"):
            if counter in first:
                row[counter] = spread([r["dpcore"][name][counter] for r in rounds])
        if case.variant == "fused" and explicit_name(name) in rounds[0]["dpcore"]:
            row["fused_over_explicit"] = spread([microseconds(r["dpcore"][name]) /
                                                 microseconds(r["dpcore"][explicit_name(name)]) for r in rounds])
        row["pytorch"] = []
        for k, version in enumerate(torch_versions):
            theirs = [r["pytorch"][k]["results"][name] for r in rounds]
            row["pytorch"].append({"version": version, "what": theirs[0]["what"],
                                   "us": spread([t["us"] for t in theirs]),
                                   "ratio": spread([t["us"] / microseconds(r["dpcore"][name])
                                                    for t, r in zip(theirs, rounds)])})
        rows.append(row)
    return rows


def cell(s, fmt="{:.2f}"):
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def print_table(rows, versions):
    print("| case | threads | dpcore ms | rate | fused / explicit | of copy bw | " +
          " | ".join(f"PyTorch {v} / dpcore" for v in versions) + " |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(versions))
    for r in rows:
        rate = (f"{r['GFLOP/s']['median']:.1f} GFLOP/s" if "GFLOP/s" in r else
                f"{r['GB/s']['median']:.1f} GB/s" if "GB/s" in r else "")
        variant = f" {r['variant']}" if r["variant"] else ""
        print(f"| {r['op']}{variant} {r['shape']} | {r['threads']} | {r['dpcore_us']['median'] / 1e3:.3f} | {rate} | "
              f"{cell(r['fused_over_explicit']) if 'fused_over_explicit' in r else ''} | "
              f"{cell(r['frac_copy_bw']) if 'frac_copy_bw' in r else ''} | " +
              " | ".join(cell(p["ratio"]) for p in r["pytorch"]) + " |")
    whats = {(p["version"], r["op"]): p["what"] for r in rows for p in r["pytorch"]}
    for (version, op), what in sorted(whats.items()):
        print(f"  PyTorch {version} {op}: {what}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/bench/cpu_kernels_bench", help="path of cpu_kernels_bench")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.5, help="seconds each case runs for, on both sides")
    p.add_argument("--filter", default=FILTER, help="cpu_kernels_bench's --benchmark_filter (default: %(default)s)")
    p.add_argument("--torch-python", nargs="+", default=default_torch_pythons(),
                   help="interpreters whose PyTorch to compare with (default: %(default)s)")
    p.add_argument("--json", help="also write rounds and rows here")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: expected at least 1")
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"--bench {args.bench}: not an executable (build the cpu_kernels_bench target, -DDPCORE_BENCH=ON)")
    machine = record(args.torch_python)
    print(describe(machine), file=sys.stderr)
    load_before = os.getloadavg()[0]
    rounds, names = [], None
    for r in range(args.rounds):
        # dpcore first in the first round (PyTorch runs the cases it names), then rotated.
        sides = ["dpcore"] + list(range(len(args.torch_python)))
        shift = r % len(sides)
        ran = {}
        for side in sides[shift:] + sides[:shift]:
            if side == "dpcore":
                ran["dpcore"] = run_dpcore(args)
                names = names or [n for n in ran["dpcore"] if parse(n)]
            else:
                ran[side] = run_json([args.torch_python[side], os.path.abspath(__file__), "--torch-worker",
                                      "--min-time", str(args.min_time), "--cases", json.dumps(names)])
        rounds.append({"dpcore": ran["dpcore"], "pytorch": [ran[k] for k in range(len(args.torch_python))]})
        print(f"  round {r + 1} of {args.rounds} done", file=sys.stderr)
    versions = [t["version"] for t in rounds[0]["pytorch"]]
    rows = summarize(rounds, versions)
    print(f"{describe(machine)}; {args.rounds} rounds, --min-time {args.min_time:g} s; "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print_table(rows, versions)
    if args.json:
        write_json(args.json, {"machine": machine, "rounds": rounds, "rows": rows, "min_time": args.min_time,
                               "load_before": load_before, "load_after": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
