#!/usr/bin/python3
"""Plots the --sync comparison (scripts/compare_strategies.sh): test accuracy against steps
and against training seconds, one row per scenario (replicas equal, replica 1 slowed 3x),
from the metrics JSONL of each run (records of kind "eval" every 128 steps and "epoch" at
each epoch's end). Also prints the table of docs/strategies.md.

    /usr/bin/python3 scripts/plot_strategies.py RESULTS_DIR OUT.png

Seconds are the runner's training time only (evaluation excluded), summed over epochs.
Needs Debian's python3-matplotlib (run it with /usr/bin/python3).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCENARIOS = [("equal", "4 equal replicas"), ("slowed", "replica 1 slowed 3x")]
# Run name -> (label, colour, line style), in legend order.
RUNS = {
    "full": ("full (synchronous)", "#4c72b0", "-"),
    "full-adaptive": ("full, --split adaptive", "#4c72b0", ":"),
    "local-4": ("local:4", "#55a868", "-"),
    "local-16": ("local:16", "#55a868", "--"),
    "async": ("async", "#c44e52", "-"),
    "async-momentum-0.5": ("async, momentum 0.5", "#c44e52", "--"),
}


def load(path):
    """[(step, cumulative seconds, test accuracy %)] and the final epoch record."""
    points, done_seconds, last = [], 0.0, None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            points.append((r["step"], done_seconds + r["seconds"], 100 * r["test_accuracy"]))
            if r["kind"] == "epoch":
                done_seconds += r["seconds"]
                last = r
    return points, done_seconds, last


LOWEST = 60        # the accuracy axis starts here; a run below it says so in the legend
CONVERGED = 85     # the time axis ends with the slowest run that reached this accuracy


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results, out = sys.argv[1:]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), sharey=True)
    print("| scenario | strategy | final test accuracy | best | training seconds | samples/s (last epoch) |")
    print("|---|---|---|---|---|---|")
    for row, (scenario, title) in enumerate(SCENARIOS):
        time_end = 0
        for name, (label, colour, style) in RUNS.items():
            path = os.path.join(results, f"{scenario}--{name}.jsonl")
            if not os.path.exists(path):
                continue
            points, seconds, last = load(path)
            steps, times, acc = zip(*points)
            if max(acc) >= CONVERGED:
                time_end = max(time_end, times[-1])
            else:
                label += f" (best {max(acc):.0f}%" + (", below the axis)" if max(acc) < LOWEST else ")")
            for col, x in enumerate((steps, times)):
                axes[row][col].plot(x, acc, style, color=colour, label=label, linewidth=1.6, marker=".", markersize=4)
            print(f"| {title} | {label} | {acc[-1]:.2f}% | {max(acc):.2f}% | {seconds:.0f} | "
                  f"{last['samples_per_s']:.0f} |")
        if time_end > 0:
            axes[row][1].set_xlim(0, 1.05 * time_end)  # (a run that never converged runs on past it)
        for col, xlabel in enumerate(("optimizer steps (global batches of 64)", "training seconds (evaluation excluded)")):
            ax = axes[row][col]
            ax.set_title(f"{title}: test accuracy against {'steps' if col == 0 else 'time'}", fontsize=11)
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
            ax.set_ylim(LOWEST, 92)
        axes[row][0].set_ylabel("test accuracy (%)")
        axes[row][1].legend(loc="lower right", fontsize=9)
    fig.suptitle("fashioncnn on Fashion-MNIST, 4 CPU replicas on 2 cores, 3 epochs, batch 64, lr 0.03, momentum 0.9",
                 fontsize=12)
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
