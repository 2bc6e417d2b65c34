#!/usr/bin/python3
"""Draws a pipelined training step from dpcore traces (`dpcore train --stages ... --trace`),
one panel per trace: a row per stage, each micro-batch's forward and backward a box
numbered by the micro-batch, and beside it the measured bubble against the formula
(P-1)/(M+P-1) of a pipeline of P equal stages and M micro-batches, and against a
simulation of the same orders from the stage times the trace measured.

The measured bubble is the share of the pipeline's part of the step (from the first
micro-batch span's start to the last one's end, over every stage) that the stages spent
outside their forward and backward spans: waiting for a micro-batch from a neighbour, or
for the pipeline to fill and drain. Of the traced steps, the one of median duration is
drawn; the bubble is given for it and as the median over all traced steps.

    /usr/bin/python3 scripts/plot_pipeline.py --out docs/images/pipeline-bubbles.png \\
        --trace="GPipe=/tmp/gpipe.json" --trace="1F1B=/tmp/1f1b.json"

The traces of docs/images/pipeline-bubbles.png come from scripts/make_pipeline_picture.sh.
Needs Debian's python3-matplotlib (run it with /usr/bin/python3).
"""
import argparse
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpcore_runs  # noqa: E402

FORWARD, BACKWARD = "#4c72b0", "#dd8452"
OP = re.compile(r"micro-batch (\d+) (forward|backward)$")
STAGE = re.compile(r"stage (\d+)$")


def load(path):
    names, spans = dpcore_runs.load(path, "plot_pipeline")
    stages = {}  # stage number -> tid
    for tid, name in names.items():
        m = STAGE.match(name)
        if m:
            stages[int(m.group(1))] = tid
    if not stages:
        sys.exit(f"plot_pipeline: {path}: no 'stage N' lane: record a run with --stages or --pipeline")
    steps = dpcore_runs.steps(names, spans)
    if not steps:
        sys.exit(f"plot_pipeline: {path}: no 'step N' span on the main lane")
    return stages, spans, steps


def step_ops(stages, spans, step):
    """Per stage, its micro-batch spans inside `step`: (start, end, micro-batch, forward?)."""
    begin, end = step["ts"], step["ts"] + step["dur"]
    lane_of = {tid: s for s, tid in stages.items()}
    ops = {s: [] for s in stages}
    for e in spans:
        m = OP.match(e["name"])
        if m and e["tid"] in lane_of and begin <= e["ts"] and e["ts"] + e["dur"] <= end:
            ops[lane_of[e["tid"]]].append((e["ts"], e["ts"] + e["dur"], int(m.group(1)), m.group(2) == "forward"))
    return ops


def bubble(ops):
    """The share of [first start, last end] the stages spent outside their spans."""
    all_ops = [op for stage in ops.values() for op in stage]
    first, last = min(op[0] for op in all_ops), max(op[1] for op in all_ops)
    busy = sum(op[1] - op[0] for op in all_ops)
    return 1 - busy / (len(ops) * (last - first)), first, last


def simulated_bubble(ops):
    """The bubble of the same orders with every stage on a core of its own: each stage's op
    starts when the stage is free and its input has come (forward m after stage s-1's
    forward m, backward m after stage s+1's backward m), every forward and backward taking
    its stage's median measured time. What the schedule costs with these stage times, not
    counting the transfers nor the cores the stages shared."""
    P = len(ops)
    order = {s: [(op[2], op[3]) for op in sorted(stage)] for s, stage in ops.items()}
    cost = {}
    for s, stage in ops.items():
        for forward in (True, False):
            cost[s, forward] = statistics.median(op[1] - op[0] for op in stage if op[3] == forward)
    done, free, next_op = {}, {s: 0.0 for s in ops}, {s: 0 for s in ops}
    while any(next_op[s] < len(order[s]) for s in ops):
        progressed = False
        for s in ops:
            if next_op[s] == len(order[s]):
                continue
            m, forward = order[s][next_op[s]]
            peer = s - 1 if forward else s + 1
            if 0 <= peer < P and (peer, m, forward) not in done:
                continue  # its input has not come yet
            start = max(free[s], done.get((peer, m, forward), 0.0))
            free[s] = done[s, m, forward] = start + cost[s, forward]
            next_op[s] += 1
            progressed = True
        if not progressed:
            sys.exit("plot_pipeline: the stages' orders wait on each other (not a pipeline schedule)")
    busy = sum(cost[s, forward] for s in ops for _, forward in order[s])
    return 1 - busy / (P * max(free.values()))


def draw(ax, label, path):
    stages, spans, steps = load(path)
    per_step = [step_ops(stages, spans, s) for s in steps]
    bubbles = [bubble(ops)[0] for ops in per_step if all(ops.values())]
    if not bubbles:
        sys.exit(f"plot_pipeline: {path}: no step whose every stage ran micro-batches")
    median_step = sorted(steps, key=lambda s: s["dur"])[(len(steps) - 1) // 2]
    ops = step_ops(stages, spans, median_step)
    measured, first, last = bubble(ops)
    P = len(stages)
    M = len({op[2] for stage in ops.values() for op in stage})
    formula = (P - 1) / (M + P - 1)
    simulated = simulated_bubble(ops)
    for s, stage_ops in ops.items():
        for start, end, m, forward in stage_ops:
            x0, width = (start - first) / 1000.0, (end - start) / 1000.0
            ax.barh(s, width, left=x0, height=0.8, color=FORWARD if forward else BACKWARD, edgecolor="white",
                    linewidth=0.5)
            ax.text(x0 + width / 2, s, str(m), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(P))
    ax.set_yticklabels([f"stage {s}" for s in range(P)])
    ax.set_ylim(P - 0.5, -0.5)
    ax.set_title(f"{label}: {median_step['name']} (of median duration), pipeline {(last - first) / 1000.0:.1f} ms\n"
                 f"bubble: measured {100 * measured:.0f}% (median of {len(bubbles)} steps "
                 f"{100 * statistics.median(bubbles):.0f}%); formula (P-1)/(M+P-1) = {100 * formula:.0f}%; "
                 f"simulated from the measured stage times, a core per stage: {100 * simulated:.0f}%",
                 loc="left", fontsize=10)
    print(f"{label}: {path}: P {P}, M {M}, {median_step['name']}: bubble measured {measured:.3f} "
          f"(median of {len(bubbles)} steps {statistics.median(bubbles):.3f}), formula {formula:.3f}, "
          f"simulated {simulated:.3f}")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return (last - first) / 1000.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", action="append", required=True, metavar="LABEL=FILE",
                   help="a trace and its panel's title; one panel per --trace, top to bottom")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default="", help="a title above the panels")
    args = p.parse_args()
    panels = []
    for t in args.trace:
        label, sep, path = t.rpartition("=")
        if not sep or not label:
            sys.exit(f"plot_pipeline: --trace '{t}': expected LABEL=FILE")
        panels.append((label, path))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 2.7 * len(panels) + 0.6), squeeze=False)
    longest = max(draw(ax, label, path) for ax, (label, path) in zip(axes[:, 0], panels))
    for ax in axes[:, 0]:
        ax.set_xlim(0, longest)  # one scale for every panel, so that lengths compare
    axes[-1, 0].set_xlabel("milliseconds since the step's first micro-batch began")
    handles = [mpatches.Patch(color=FORWARD, label="forward of micro-batch m"),
               mpatches.Patch(color=BACKWARD, label="backward of micro-batch m"),
               mpatches.Patch(facecolor="white", edgecolor="#999999", label="blank: waiting (the bubble)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    if args.title:
        fig.suptitle(args.title, fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95 if args.title else 1))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
