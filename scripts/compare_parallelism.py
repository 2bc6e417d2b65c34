#!/usr/bin/python3
"""Data parallel, pipeline and pipeline x data parallel on one model and one global batch
(docs/strategies.md, "Data parallel, pipeline or both?"): fashioncnn on Fashion-MNIST,
global batch 64, on this machine's 2 cores. For each way of running it: the time per step
(the median of 30 traced steps of `dpcore train`, ROUNDS rounds alternated, their median),
the memory per device (the model's state each device holds, parameters, gradients and the
momentum buffer; and the most bytes of activations a device held, measured: a pipeline
stage's peak, and for a data-parallel replica the peak of a one-stage pipeline on its share
of the batch), and the bytes each device sends in a step (a ring allreduce of the gradients
sends 2(R-1)/R of them; a stage sends its activations up and their gradients down).

    /usr/bin/python3 scripts/compare_parallelism.py [BUILD_DIR] [--rounds 3]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpcore_runs  # noqa: E402

MODEL, BATCH, STAGES = "fashioncnn", 64, "0-3@cpu:0,4-10@cpu:1"
SPLIT = 4  # the stages' boundary: after layer 3
# name, train flags, devices, replicas, stages
WAYS = [
    ("one device (2 threads)", ["--threads", "2"], 1, 1, 1),
    ("data parallel: ddp, 2 replicas", ["--replicas", "2", "--threads", "1"], 2, 2, 1),
    ("pipeline: 2 stages, 1F1B, 4 micro-batches",
     ["--stages", STAGES, "--schedule", "1f1b", "--micro-batches", "4", "--threads", "1"], 2, 1, 2),
    ("pipeline x data parallel: 2 stages x 2 replicas, 2 micro-batches",
     ["--stages", STAGES, "--schedule", "1f1b", "--micro-batches", "2", "--replicas", "2", "--threads", "1"], 4, 2, 2),
]


def run(args):
    return dpcore_runs.run(args, "compare_parallelism")


def train(dpcore, flags, trace, batch=BATCH):
    out = run([dpcore, "train", "--model", MODEL, "--data", "fashion-mnist", "--device", "cpu", "--batch", str(batch),
               "--steps", "32", "--trace-steps", "30", "--progress", "0", "--trace", trace] + flags)
    m = re.search(r"\(stages ([^)]*)\)", out)
    stage_mib = [float(v.split()[0]) for v in m.group(1).split(", ")] if m else []
    return dpcore_runs.median_step_ms(trace, "compare_parallelism"), stage_mib


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", nargs="?", default="build")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    dpcore = os.path.join(args.build, "bin", "dpcore")
    with tempfile.TemporaryDirectory() as tmp:
        # The layers' parameter and output bytes (dpcore predict's pipeline profile, per micro-batch of 16).
        run([dpcore, "predict", "--model", MODEL, "--batch", str(BATCH), "--stages", STAGES, "--micro-batches", "4",
             "--replicas", "1", "--threads", "1", "--profile-steps", "1", "--json", os.path.join(tmp, "p.json")])
        with open(os.path.join(tmp, "p.json")) as f:
            layers = json.load(f)["layers"]
        params = [l["param_bytes"] for l in layers]
        boundary_per_sample = layers[SPLIT - 1]["output_bytes"] / 16
        whole, stage = sum(params), [sum(params[:SPLIT]), sum(params[SPLIT:])]
        # A data-parallel replica's activations: a one-stage pipeline on its share.
        _, one32 = train(dpcore, ["--stages", "0-10@cpu:0", "--micro-batches", "1", "--schedule", "naive",
                                  "--threads", "1"], os.path.join(tmp, "a.json"), batch=BATCH // 2)
        _, one64 = train(dpcore, ["--stages", "0-10@cpu:0", "--micro-batches", "1", "--schedule", "naive",
                                  "--threads", "2"], os.path.join(tmp, "b.json"))
        times = {w[0]: [] for w in WAYS}
        stage_peaks = {}
        for _ in range(args.rounds):
            for name, flags, _, _, _ in WAYS:
                t, peaks = train(dpcore, flags, os.path.join(tmp, "t.json"))
                times[name].append(t)
                if peaks:
                    stage_peaks[name] = peaks
    mib = 1 << 20
    print("| way (global batch 64) | devices | step ms (median; rounds) | model state per device | "
          "activations per device (peak) | sent per device per step |")
    print("|---|---:|---|---|---|---|")
    for name, _, devices, replicas, stages in WAYS:
        t = times[name]
        if stages == 1:
            state = f"{3 * whole / mib:.2f} MiB"
            acts = f"{(one64 if replicas == 1 else one32)[0]:.1f} MiB"
            sent = "0" if replicas == 1 else f"{2 * (replicas - 1) / replicas * whole / mib:.2f} MiB (allreduce)"
        else:
            state = " / ".join(f"{3 * b / mib:.2f}" for b in stage) + " MiB (stage 0 / 1)"
            acts = " / ".join(f"{v:.1f}" for v in stage_peaks[name]) + " MiB"
            micro = int(flags_of(name, "--micro-batches"))
            rows = BATCH // replicas // micro
            p2p = 2 * micro * rows * boundary_per_sample / mib
            sent = f"{p2p:.2f} MiB (activations and gradients)"
            if replicas > 1:
                sent += " + " + " / ".join(f"{2 * (replicas - 1) / replicas * b / mib:.2f}" for b in stage) + \
                        " MiB (each stage's allreduce)"
        print(f"| {name} | {devices} | {statistics.median(t):.1f} ({', '.join(f'{v:.1f}' for v in t)}) | {state} | "
              f"{acts} | {sent} |")


def flags_of(name, flag):
    for n, flags, *_ in WAYS:
        if n == name:
            return flags[flags.index(flag) + 1]
    raise KeyError(name)


if __name__ == "__main__":
    main()
