#!/usr/bin/python3
"""Checks `dpcore predict --stages` against measured pipelined steps on this machine
(docs/scaling.md, "Pipelines"). For each case, ROUNDS rounds of: the prediction (a fresh
profile each time) and the measured step (`dpcore train --trace`, the median of 30 traced
steps on the real Fashion-MNIST), alternated so that the machine's drift reaches both;
then the medians and the error, as a Markdown table.

    /usr/bin/python3 scripts/check_pipeline_prediction.py [BUILD_DIR] [--rounds 3]

Every case gives each stage a core of its own (2 stages on 2 cores), as the model
assumes; one kernel thread per stage.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpcore_runs  # noqa: E402

MLP = "flatten linear(300) relu linear(800) relu linear(300) relu linear(800) relu linear(10)"
CASES = [  # model, stages, schedule, micro-batches, batch
    ("fashioncnn", "0-3@cpu:0,4-10@cpu:1", "gpipe", 8, 64),
    ("fashioncnn", "0-3@cpu:0,4-10@cpu:1", "1f1b", 8, 64),
    ("fashioncnn", "0-3@cpu:0,4-10@cpu:1", "1f1b", 4, 64),
    (MLP, "0-4@cpu:0,5-10@cpu:1", "gpipe", 8, 256),
    (MLP, "0-4@cpu:0,5-10@cpu:1", "1f1b", 4, 256),
]


def run(args):
    return dpcore_runs.run(args, "check_pipeline_prediction")


def predicted(dpcore, case, path):
    model, stages, schedule, m, batch = case
    run([dpcore, "predict", "--model", model, "--batch", str(batch), "--stages", stages, "--schedule", schedule,
         "--micro-batches", str(m), "--replicas", "1", "--threads", "1", "--profile-steps", "9", "--json", path])
    with open(path) as f:
        return json.load(f)["predictions"][0]["step_s"] * 1e3


def measured(dpcore, case, path):
    model, stages, schedule, m, batch = case
    run([dpcore, "train", "--model", model, "--data", "fashion-mnist", "--device", "cpu", "--batch", str(batch),
         "--stages", stages, "--schedule", schedule, "--micro-batches", str(m), "--threads", "1", "--steps", "32",
         "--trace-steps", "30", "--progress", "0", "--trace", path])
    return dpcore_runs.median_step_ms(path, "check_pipeline_prediction")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", nargs="?", default="build")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    dpcore = os.path.join(args.build, "bin", "dpcore")
    print("| model | stages | schedule | M | batch | predicted ms (rounds) | measured ms (rounds) | error |")
    print("|---|---|---|---:|---:|---|---|---:|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            pred, meas = [], []
            for _ in range(args.rounds):
                pred.append(predicted(dpcore, case, os.path.join(tmp, "p.json")))
                meas.append(measured(dpcore, case, os.path.join(tmp, "t.json")))
            mp, mm = statistics.median(pred), statistics.median(meas)
            error = mp / mm - 1
            worst = max(worst, abs(error))
            model = "mlp" if case[0] == MLP else case[0]
            print(f"| {model} | {case[1]} | {case[2]} | {case[3]} | {case[4]} | {mp:.1f} "
                  f"({', '.join(f'{v:.1f}' for v in pred)}) | {mm:.1f} ({', '.join(f'{v:.1f}' for v in meas)}) | "
                  f"{100 * error:+.0f}% |", flush=True)
    print(f"\nLargest error {100 * worst:.0f}% over {len(CASES)} cases")


if __name__ == "__main__":
    main()
