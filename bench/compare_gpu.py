#!/usr/bin/env python3
"""dpcore's training step against PyTorch's on one GPU (the H200 machine), in one run.

One step = zero grads, forward, NLL loss (mean), backward, SGD (lr 0.01, momentum 0.9), on
a random batch made once, already on the GPU. Both engines are measured the same way, so
the ratio compares like with like:

  timing    W warm-up steps, then S timed steps run back to back in blocks of B, each block
            between two CUDA events on the stream the steps are queued on (torch.cuda.Event
            here, cudaEvent in dpcore_step_bench --block B); the device is idle when a block
            starts; median, p10 and p90 over the blocks of the time per step
  math      "tf32": TF32 tensor cores allowed in the convolutions AND the matrix products on
            both sides (PyTorch's cudnn.conv and cuda.matmul precision "tf32"; dpcore --tf32,
            which lets cuDNN and cuBLAS use TF32); "fp32": TF32 off everywhere on both sides
  tuning    "time" (default): both time their choices once per shape on first use, PyTorch
            with torch.backends.cudnn.benchmark = True (cuDNN's algorithms), dpcore with
            --conv-engine auto --gemm-engine auto (its hand kernels against cuDNN/cuBLAS);
            "heuristic": neither times, PyTorch with cudnn.benchmark = False (cuDNN's
            heuristics), dpcore with --conv-engine cudnn --gemm-engine cublas (the same
            heuristics). PyTorch's benchmark may pick non-deterministic cuDNN algorithms,
            dpcore takes deterministic ones only.
  autocast  only with --autocast: a third math mode, "bf16": the forward and loss under
            torch.autocast("cuda", dtype=torch.bfloat16) on PyTorch's side (the backward
            outside it, as the recipe has it) and dpcore_step_bench --precision bf16 (the
            master weights float32, their 16-bit copy made once a step); TF32 off for
            what stays float32 on both sides.
  memory    the allocator's peak from the end of the warm-up (before the capture) to the
            end, in the same mode on both sides: PyTorch's CUDA graph mode against dpcore's
            (which replays a graph too; if dpcore could not capture, PyTorch eager instead).
            What lives on stays counted: parameters, gradients, momentum, the batch, and
            cuBLAS's and cuDNN's workspaces, which both take from their caching allocators.
            The warm-up's one-time tuning is left out on both sides (cudnn.benchmark tries
            algorithms with workspaces far larger than the step needs).

Per case and math mode it measures

  PyTorch  eager     the step as written (bench/torch_models.py)
           graph     the whole step (micro-batches and optimizer step included) captured once
                     with torch.cuda.CUDAGraph and replayed; SGD keeps no step counter on
                     the host, so it captures as is (it has no `capturable` flag: that is
                     Adam's)
           compile   only with --compile: torch.compile(model) (inductor, default mode),
                     eager optimizer, on the large batches of PyTorch's reference table
                     (COMPILE); each compile costs seconds to minutes, far more than the
                     rest of the run, and at small batches the graph beats it by far;
                     compile time is reported apart
  dpcore   dpcore_step_bench --device cuda --cuda-graph on [--tf32] and the tuning's engines

The ratio is (fastest PyTorch mode) / dpcore in the same math mode: above 1, dpcore is faster.

With --kernels-json (cuda_kernels_bench's --benchmark_out, as scripts/gpu-check's kernel
stage writes it), the run starts with kernel rows: each of issue 24's kernels that
cuda_kernels_bench timed (bench/cuda_transformer_bench.cu: attention fused and explicit,
layer_norm, gelu, softmax, AdamW) beside PyTorch's on the same shape, read from the
benchmark's name (bench/transformer_ops.py), in FP32 (no TF32) and timed as
cuda_kernels_bench times: one warm-up call, then KERNEL_REPEATS calls, each after
overwriting twice the L2 and between two CUDA events, their mean. The anchor for attention
is F.scaled_dot_product_attention (PyTorch picks its backend; the backward is
torch.autograd.grad on a graph made once), then F.layer_norm, F.gelu, torch.softmax and
torch.optim.AdamW(fused=True). The ratio is PyTorch's time over dpcore's.

    python3 bench/compare_gpu.py --bench build/bench/dpcore_step_bench --json gpu.json
    python3 bench/compare_gpu.py --dry-run      # the plan; touches no GPU, imports no torch
    python3 bench/compare_gpu.py --models resnet8 resnet20 resnet50 --json resnet.json   # the ResNets
    python3 bench/compare_gpu.py --autocast --models fashioncnn resnet50 --json bf16.json  # and bfloat16 autocast
    build/bench/cuda_kernels_bench --benchmark_filter='attention|layer_norm|gelu|softmax_|adamw' \
        --benchmark_out=kernels.json --benchmark_out_format=json
    python3 bench/compare_gpu.py --kernels-json kernels.json --models simplenet --json gpu.json
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

from torch_models import build_torch_model, make_step, random_batch, sgd, summarize, write_json
from transformer_ops import BENCHMARK_SUFFIXES, make_op, parse

# (model, batch, accum): simplenet's batch sweep and accumulation, the two conv models, the
# CIFAR ResNets (1x28x28, batch 128 as He et al. train them; batch norm), torchvision's
# ResNet-50 (3x224x224, batch 32, the seeds' image workflow). --models picks the
# models; the default leaves the ResNets out, so that the default run fits the --budget-s
# scripts/gpu-check gives it.
CASES = [
    ("simplenet", 64, 1), ("simplenet", 256, 1), ("simplenet", 1024, 1), ("simplenet", 4096, 1),
    ("simplenet", 256, 4),
    ("fashioncnn", 64, 1), ("fashioncnn", 512, 1),
    ("vggs", 256, 1),
    ("resnet8", 128, 1), ("resnet20", 128, 1),
    ("resnet50", 32, 1),
]
MODELS = list(dict.fromkeys(model for model, _, _ in CASES))
DEFAULT_MODELS = ["simplenet", "fashioncnn", "vggs"]
MATH_MODES = ["tf32", "fp32"]
# --autocast adds "bf16": the forward under autocast in bfloat16 on both sides
# (torch.autocast("cuda", torch.bfloat16); dpcore --precision bf16), TF32 off for what stays float32.
AUTOCAST_MODE = "bf16"
COMPILE = {("simplenet", 4096, 1): ["tf32", "fp32"], ("fashioncnn", 512, 1): ["tf32"], ("vggs", 256, 1): ["tf32"]}
COMPILE_RESERVE_S = 45  # with --compile: no compile starts with less of the --budget-s left
# What each tuning policy means on each side: PyTorch's cudnn.benchmark, dpcore's engines.
TUNING = {"time": (True, ["--conv-engine", "auto", "--gemm-engine", "auto"]),
          "heuristic": (False, ["--conv-engine", "cudnn", "--gemm-engine", "cublas"])}
DPCORE_TIMEOUT_S = 90  # one dpcore_step_bench run, at most (less when less of --budget-s is left)
# --budget-s: scripts/gpu-check's end-to-end stage (80 s) less 15 s for the interpreter, the
# import of torch and the table printed last (its COMPARE_BUDGET_S, which it passes).
DEFAULT_BUDGET_S = 65
# Targets for fastest PyTorch / dpcore (docs/benchmarks.md), and for the memory ratio.
TARGETS = {("simplenet", 64, 1): 4.0, ("simplenet", 4096, 1): 2.0, ("simplenet", 256, 4): 4.0,
           ("fashioncnn", 512, 1): 2.0, ("vggs", 256, 1): 1.0}
MEMORY_CASE, MEMORY_TARGET = ("simplenet", 4096, 1), 0.5  # dpcore peak / PyTorch peak <= 0.5


KERNEL_REPEATS = 20  # as cuda_kernels_bench's kRepeats (bench/cuda_bench_support.h)


def case_name(case):
    model, batch, accum = case
    return f"{model} {accum}x{batch // accum}" if accum > 1 else f"{model} {batch}"


# ---------------------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------------------
def set_math_mode(torch, mode):
    """tf32: TF32 allowed in cuDNN's convolutions and in the matrix products (cuBLAS), as
    dpcore --tf32 allows it in both; fp32: no TF32 anywhere. Uses the fp32_precision
    settings where this PyTorch has them (the allow_tf32 flags are deprecated there, and the
    two must not be mixed), else the allow_tf32 flags."""
    precision = "tf32" if mode == "tf32" else "ieee"
    cudnn_conv = getattr(torch.backends.cudnn, "conv", None)
    if cudnn_conv is not None and hasattr(cudnn_conv, "fp32_precision"):
        cudnn_conv.fp32_precision = precision
        torch.backends.cuda.matmul.fp32_precision = precision
    else:
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"


def timed_steps(torch, run, args, reset_peak):
    """Microseconds per step of each block of args.block steps run back to back between two
    CUDA events on the current stream (where run() queues its work), each block starting on
    an idle device: what dpcore_step_bench does with cudaEvent. reset_peak: the peak memory
    counts from the end of the warm-up."""
    for _ in range(args.warmup):
        run()
    if reset_peak:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(args.steps // args.block):
        torch.cuda.synchronize()
        start.record()
        for _ in range(args.block):
            run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / args.block)
    return times


def torch_setup(torch, case, seed=0):
    model_name, batch, accum = case
    torch.manual_seed(seed)
    model = build_torch_model(model_name).cuda()
    optimizer = sgd(model)
    x, y = random_batch(model_name, batch, "cuda", seed)
    return model, optimizer, x, y


def precision_of(math):
    return "bf16" if math == AUTOCAST_MODE else "fp32"


def math_modes(args):
    return MATH_MODES + ([AUTOCAST_MODE] if args.autocast else [])


def torch_eager(torch, case, args, math):
    model, optimizer, x, y = torch_setup(torch, case)
    times = timed_steps(torch, make_step(model, optimizer, x, y, case[2], precision_of(math)), args, reset_peak=True)
    return {**summarize(times, case[1]), "peak_bytes": torch.cuda.max_memory_allocated()}


def torch_graph(torch, case, args, math):
    model, optimizer, x, y = torch_setup(torch, case)
    step = make_step(model, optimizer, x, y, case[2], precision_of(math))
    # Warm up on a side stream (cuDNN picks algorithms, the optimizer makes its momentum
    # buffers), then capture one whole step; replays reuse x, y and every buffer in place.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # as dpcore_step_bench's peak: the capture and the replays
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()  # zero_grad(set_to_none) inside: backward then writes fresh grads from the graph's pool
    times = timed_steps(torch, graph.replay, args, reset_peak=False)
    return {**summarize(times, case[1]), "peak_bytes": torch.cuda.max_memory_allocated()}


def torch_compile(torch, case, args, math):
    torch._dynamo.reset()  # a fresh compile per case and math mode
    model, optimizer, x, y = torch_setup(torch, case)
    compiled = torch.compile(model)
    step = make_step(compiled, optimizer, x, y, case[2], precision_of(math))
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    times = timed_steps(torch, step, args, reset_peak=False)
    return {**summarize(times, case[1]), "compile_s": compile_s}


TORCH_MODES = {"eager": torch_eager, "graph": torch_graph, "compile": torch_compile}


def torch_modes_for(case, math, args):
    modes = ["eager", "graph"]
    if math in COMPILE.get(case, []) and args.compile:
        modes.append("compile")
    return modes


# ---------------------------------------------------------------------------------------
# dpcore
# ---------------------------------------------------------------------------------------
def dpcore_command(args, case, mode):
    model, batch, accum = case
    cmd = [args.bench, "--device", "cuda", "--model", model, "--batch", str(batch), "--accum", str(accum),
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--block", str(args.block),
           *TUNING[args.tuning][1], "--cuda-graph", "on"]
    if mode == "tf32":
        cmd.append("--tf32")
    if mode == AUTOCAST_MODE:
        cmd += ["--precision", "bf16"]
    return cmd


def run_dpcore(args, case, mode, timeout_s):
    """dpcore_step_bench's JSON line."""
    done = subprocess.run(dpcore_command(args, case, mode), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result.get("cuda_graph"):
        result["note"] = "ran eagerly: the backend did not capture the step"
    return result


# ---------------------------------------------------------------------------------------
# Kernel rows: cuda_kernels_bench's transformer kernels against PyTorch's
# ---------------------------------------------------------------------------------------
def read_kernel_results(path):
    """The transformer entries of cuda_kernels_bench's JSON output, [(name, Case, entry)], and
    a note. A file cut short (the kernel stage killed at its limit) keeps the entries
    written before the cut."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        return [], f"--kernels-json {path}: {e.strerror}"
    note = ""
    try:
        entries = json.loads(text)["benchmarks"]
    except (ValueError, KeyError):
        entries, decoder = [], json.JSONDecoder()
        at = text.find("[", text.find('"benchmarks"')) + 1
        while at > 0:
            at = text.find("{", at)
            if at < 0:
                break
            try:
                entry, at = decoder.raw_decode(text, at)
            except ValueError:
                break
            entries.append(entry)
        note = f"--kernels-json {path}: cut short, {len(entries)} entries read"
    found = [(e["name"], parse(e["name"]), e) for e in entries if "real_time" in e]
    return [(name, case, e) for name, case, e in found if case], note


def time_kernel(torch, run, flush):
    """cuda_kernels_bench's timing of one call (bench/cuda_bench_support.cu): a warm-up
    call, then KERNEL_REPEATS calls each after an L2 flush, between two CUDA events; the
    mean in microseconds."""
    run()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total_ms = 0.0
    for _ in range(KERNEL_REPEATS):
        flush.zero_()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        total_ms += start.elapsed_time(stop)
    return total_ms / KERNEL_REPEATS * 1e3


def dpcore_kernel_us(entry):
    return entry["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[entry["time_unit"]]


def run_kernel_rows(torch, args, doc, left):
    """One row per dpcore kernel of --kernels-json; PyTorch's side timed once per shape
    (attention's fused and explicit rows share it). Stops starting rows as run_all does."""
    results, note = read_kernel_results(args.kernels_json)
    if note:
        doc["kernel_note"] = note
        print(note, flush=True)
    set_math_mode(torch, "fp32")
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * getattr(props, "L2_cache_size", 64 << 20), dtype=torch.uint8, device="cuda")
    pytorch, longest_row_s = {}, 0.0
    for benchmark_name, case, entry in results:
        name = "/".join(p for p in benchmark_name.split("/") if not p.startswith(BENCHMARK_SUFFIXES))
        if left() < longest_row_s:
            doc["left_out"].append(f"kernel {name}")
            continue
        row_start = time.perf_counter()
        if case.torch_key() not in pytorch:
            def measure_torch():
                run, what = make_op(torch, case, "cuda")
                return {"median_us": time_kernel(torch, run, flush), "what": what}
            pytorch[case.torch_key()] = measure(f"pytorch {case.op} {case.shape_text()}", measure_torch)
            torch.cuda.empty_cache()
        theirs = pytorch[case.torch_key()]
        row = {"name": name, "op": case.op, "variant": case.variant, "shape": case.shape_text(),
               "dpcore_us": dpcore_kernel_us(entry), "pytorch": theirs,
               "counters": {k: entry[k] for k in ("TFLOP/s", "GB/s", "frac_copy_bw", "copy_GB/s") if k in entry}}
        if "median_us" in theirs:
            row["ratio"] = theirs["median_us"] / row["dpcore_us"]
        longest_row_s = max(longest_row_s, time.perf_counter() - row_start)
        doc["kernel_rows"].append(row)
        print("kernel " + kernel_table_row(row), flush=True)
        if args.json:
            write_json(args.json, doc)


KERNEL_TABLE_HEADER = f"{'kernel':<52} {'dpcore us':>10} {'rate':>14} {'pytorch us':>10} {'ratio':>7}"


def kernel_table_row(r):
    c = r["counters"]
    rate = f"{c['TFLOP/s']:.2f} TFLOP/s" if "TFLOP/s" in c else f"{c.get('GB/s', 0):.0f} GB/s"
    theirs = f"{r['pytorch']['median_us']:.1f}" if "median_us" in r["pytorch"] else "err"
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
    return f"{r['name']:<52} {r['dpcore_us']:>10.1f} {rate:>14} {theirs:>10} {ratio:>7}"


def print_kernel_table(doc):
    if not doc["kernel_rows"]:
        return
    print(f"kernels, FP32: dpcore (cuda_kernels_bench) against PyTorch, mean of {KERNEL_REPEATS} calls after an L2 "
          "flush; ratio = PyTorch / dpcore")
    print(KERNEL_TABLE_HEADER)
    for r in doc["kernel_rows"]:
        print(kernel_table_row(r))
    whats = {r["op"]: r["pytorch"].get("what") or r["pytorch"].get("error") for r in doc["kernel_rows"]}
    for op, what in whats.items():
        print(f"  PyTorch {op}: {what}")


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------
def measure(label, fn):
    """fn()'s result, or its error: one failed mode must not lose the other numbers."""
    t0 = time.perf_counter()
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - any failure is reported in the table
        result = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    result["wall_s"] = time.perf_counter() - t0
    status = f"{result['median_us']:9.1f} us" if "median_us" in result else result["error"]
    print(f"  {label:<40} {status}", file=sys.stderr, flush=True)
    return result


class OutOfTime(BaseException):  # not an Exception: measure() must not swallow it
    """SIGTERM (scripts/gpu-check's timeout): stop measuring, report what there is."""


def on_sigterm(signum, frame):
    raise OutOfTime()


def tuning_line(args):
    benchmark, engines = TUNING[args.tuning]
    return (f"algorithm tuning '{args.tuning}': PyTorch torch.backends.cudnn.benchmark = {benchmark}, "
            f"dpcore {' '.join(engines)}")


def run_all(args, doc, left):
    """Fills doc["rows"] case by case, so that an interrupted run still has its rows; with
    --json, rewrites the file after every row, so that a killed run leaves them too. A row
    starts only while the longest row so far still fits in what is left of --budget-s
    (left()); the rows it does not start go to doc["left_out"]."""
    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to PyTorch: run this on the GPU machine (or use --dry-run)")
    torch.backends.cudnn.benchmark = TUNING[args.tuning][0]
    doc.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda)
    print(f"{doc['gpu']}, PyTorch {doc['torch']} (CUDA {doc['cuda']}); {tuning_line(args)}", flush=True)
    if args.kernels_json:
        run_kernel_rows(torch, args, doc, left)
    longest_row_s = 0.0
    for case in selected_cases(args):
        for math in math_modes(args):
            if left() < longest_row_s:
                doc["left_out"].append(f"{case_name(case)} {math}")
                continue
            row_start = time.perf_counter()
            set_math_mode(torch, math)
            row = {"case": case_name(case), "model": case[0], "batch": case[1], "accum": case[2], "math": math,
                   "pytorch": {}}
            for name in torch_modes_for(case, math, args):
                if name == "compile" and left() < COMPILE_RESERVE_S:
                    row["pytorch"][name] = {"error": f"skipped: less than {COMPILE_RESERVE_S} s of --budget-s left"}
                    continue
                row["pytorch"][name] = measure(f"{case_name(case)} {math} pytorch {name}",
                                               lambda: TORCH_MODES[name](torch, case, args, math))
            timeout_s = max(1.0, min(DPCORE_TIMEOUT_S, left()))
            row["dpcore"] = measure(f"{case_name(case)} {math} dpcore", lambda: run_dpcore(args, case, math, timeout_s))
            longest_row_s = max(longest_row_s, time.perf_counter() - row_start)
            doc["rows"].append(finish_row(row, case))
            print_row(doc["rows"][-1])
            if args.json:
                write_json(args.json, doc)


def finish_row(row, case):
    timed = {k: v["median_us"] for k, v in row["pytorch"].items() if "median_us" in v}
    if timed:
        row["pytorch_fastest"] = min(timed, key=timed.get)
        row["pytorch_fastest_us"] = timed[row["pytorch_fastest"]]
    if timed and "median_us" in row["dpcore"]:
        row["ratio"] = row["pytorch_fastest_us"] / row["dpcore"]["median_us"]
    row["target"] = TARGETS.get(case)
    return row


def memory_summary(rows):
    """Peak bytes at simplenet 4096, FP32, in the same mode on both sides: PyTorch's graph
    mode against dpcore's graph replay, or PyTorch eager if dpcore ran eagerly."""
    for r in rows:
        if (r["model"], r["batch"], r["accum"]) == MEMORY_CASE and r["math"] == "fp32":
            mode = "graph" if r["dpcore"].get("cuda_graph") else "eager"
            torch_peak = r["pytorch"].get(mode, {}).get("peak_bytes")
            dpcore_peak = r["dpcore"].get("peak_bytes")
            if torch_peak and dpcore_peak:
                return {"case": r["case"], "mode": mode, "pytorch_bytes": torch_peak, "dpcore_bytes": dpcore_peak,
                        "ratio": dpcore_peak / torch_peak, "target": MEMORY_TARGET}
    return {"case": case_name(MEMORY_CASE), "error": "not measured (a run failed or was cut short)"}


def us(d):
    return f"{d['median_us']:.0f}" if "median_us" in d else "err"


TABLE_HEADER = (f"{'model/batch':<16} {'math':<5} {'eager':>7} {'graph':>7} {'compile':>8} {'fastest':>8} "
                f"{'dpcore':>7} {'ratio':>7} {'target':>7}")


def table_row(r):
    p = r["pytorch"]
    cell = lambda m: us(p[m]) if m in p else "-"
    fastest = f"{r['pytorch_fastest_us']:.0f}" if "pytorch_fastest_us" in r else "err"
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
    target = f">={r['target']:g}x" if r["target"] else ""
    met = "" if "ratio" not in r or not r["target"] else (" ok" if r["ratio"] >= r["target"] else " MISS")
    return (f"{r['case']:<16} {r['math']:<5} {cell('eager'):>7} {cell('graph'):>7} {cell('compile'):>8} "
            f"{fastest:>8} {us(r['dpcore']):>7} {ratio:>7} {target:>7}{met}")


def print_row(r):
    """One row as soon as it is measured, so that a run killed later still shows it."""
    print("row " + table_row(r), flush=True)


def print_table(doc, args):
    print_kernel_table(doc)
    print(f"{doc.get('gpu', '?')}, PyTorch {doc.get('torch', '?')} (CUDA {doc.get('cuda', '?')}); median step in us "
          f"({doc['warmup']} warm-up + {doc['steps']} timed steps, CUDA events per block of {doc['block']})")
    print(tuning_line(args))
    print(TABLE_HEADER)
    for r in doc["rows"]:
        print(table_row(r))
    for r in doc["rows"]:
        for name, d in list(r["pytorch"].items()) + [("dpcore", r["dpcore"])]:
            if "error" in d or "note" in d:
                print(f"  {r['case']} {r['math']} {name}: {d.get('error') or d.get('note')}")
    m = doc["memory"]
    if "ratio" in m:
        met = "ok" if m["ratio"] <= m["target"] else "MISS"
        print(f"peak memory {m['case']} (fp32, {m['mode']} on both sides): PyTorch {m['pytorch_bytes'] / 2**20:.0f} MiB, "
              f"dpcore {m['dpcore_bytes'] / 2**20:.0f} MiB, ratio {m['ratio']:.2f} (target <= {m['target']}) {met}")
    else:
        print(f"peak memory {m['case']}: {m['error']}")


def selected_cases(args):
    return [case for case in CASES if case[0] in args.models]


def print_plan(args):
    cases = selected_cases(args)
    print(f"plan: {len(cases)} cases x {len(math_modes(args))} math modes ({', '.join(math_modes(args))}), "
          f"{args.warmup} warm-up + {args.steps} timed steps each, CUDA events per block of {args.block}")
    print(f"  models: {', '.join(args.models)}")
    print(f"  {tuning_line(args)}")
    runs = 0
    for case in cases:
        modes = {math: torch_modes_for(case, math, args) for math in math_modes(args)}
        runs += sum(len(m) + 1 for m in modes.values())
        listed = "; ".join(f"{math}: {', '.join(m)}" for math, m in modes.items())
        print(f"  {case_name(case):<16} pytorch {listed:<48} target: "
              f"{'>= %gx' % TARGETS[case] if case in TARGETS else '-'}")
    print(f"  {runs} measurements; dpcore runs as, e.g.:")
    print("    " + " ".join(dpcore_command(args, cases[0], "tf32")))
    print(f"  peak memory: {case_name(MEMORY_CASE)} fp32, graph mode on both sides, dpcore / PyTorch <= {MEMORY_TARGET}")
    if args.compile:
        print(f"  torch.compile on: none starts with less than {COMPILE_RESERVE_S} s of --budget-s "
              f"({args.budget_s:g} s) left")
    else:
        print("  torch.compile left out (--compile adds it)")
    if args.kernels_json:
        print(f"  first, kernel rows: each transformer kernel of --kernels-json {args.kernels_json} "
              f"(cuda_kernels_bench's JSON, read when the run starts) against PyTorch's on its shape, FP32, mean of "
              f"{KERNEL_REPEATS} calls after an L2 flush: attention (F.scaled_dot_product_attention), layer_norm, gelu, "
              "softmax, AdamW (fused)")
    else:
        print("  no kernel rows (--kernels-json adds them)")
    print(f"  budget: no row starts once less of --budget-s ({args.budget_s:g} s) is left than the longest row "
          "so far took; the rows left out are listed, and the exit status is 0")
    print("  SIGTERM prints the rows measured so far")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/bench/dpcore_step_bench", help="path of dpcore_step_bench (CUDA build)")
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=MODELS,
                   help="models whose cases to measure (default: %(default)s; the ResNets on request)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps per measurement")
    p.add_argument("--steps", type=int, default=100, help="timed steps per measurement (a multiple of --block)")
    p.add_argument("--block", type=int, default=10, help="timed steps run back to back between two CUDA events")
    p.add_argument("--tuning", choices=sorted(TUNING), default="time",
                   help="algorithm choice on both sides: 'time' (cudnn.benchmark on, dpcore engines auto) or "
                        "'heuristic' (cudnn.benchmark off, dpcore cudnn/cublas)")
    p.add_argument("--compile", action="store_true", help="also measure torch.compile (slow: seconds per compile)")
    p.add_argument("--autocast", action="store_true",
                   help="also the bf16 math mode: autocast in bfloat16 on both sides (dpcore --precision bf16)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help="wall-clock seconds for the whole run (default %(default)s, what scripts/gpu-check's stage "
                        "leaves): no row starts once less is left than the longest row so far took, and with "
                        f"--compile no torch.compile starts with less than {COMPILE_RESERVE_S} s left")
    p.add_argument("--kernels-json", help="cuda_kernels_bench's JSON output (--benchmark_out): first measure its "
                   "transformer kernels against PyTorch's on the same shapes")
    p.add_argument("--json", help="also write the results here (rewritten after every row)")
    p.add_argument("--dry-run", action="store_true", help="print the plan only; touches no GPU")
    args = p.parse_args()
    if args.block < 1 or args.steps < args.block or args.steps % args.block:
        p.error(f"--steps {args.steps} must be a positive multiple of --block {args.block}")
    if not args.budget_s > 0:
        p.error(f"--budget-s {args.budget_s:g}: expected a positive number of seconds")
    if args.dry_run:
        return print_plan(args)
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"--bench {args.bench}: not an executable (build the dpcore_step_bench target with CUDA)")
    t0 = time.perf_counter()
    doc = {"warmup": args.warmup, "steps": args.steps, "block": args.block, "tuning": args.tuning,
           "cudnn_benchmark": TUNING[args.tuning][0], "budget_s": args.budget_s, "rows": [], "kernel_rows": [],
           "left_out": []}
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        run_all(args, doc, lambda: args.budget_s - (time.perf_counter() - t0))
    except OutOfTime:
        doc["interrupted"] = True
        print(f"interrupted by SIGTERM after {time.perf_counter() - t0:.0f} s: partial results", flush=True)
    doc["memory"] = memory_summary(doc["rows"])
    doc["total_s"] = time.perf_counter() - t0
    print_table(doc, args)
    if doc["left_out"]:
        print(f"left out ({len(doc['left_out'])} rows, --budget-s {args.budget_s:g} s spent): "
              f"{', '.join(doc['left_out'])}")
    print(f"total {doc['total_s']:.0f} s", flush=True)
    if args.json:
        write_json(args.json, doc)


if __name__ == "__main__":
    main()
