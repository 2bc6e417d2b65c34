#!/usr/bin/python3
"""Draws one training step from dpcore traces (`dpcore train --trace`), one panel per trace,
one row per lane (replicas, their communication threads, main, loader), spans coloured by
what they do. Nested spans are drawn over their parents, so a replica's row shows its
forward layers, backward nodes and waits rather than the step around them.

    /usr/bin/python3 scripts/plot_timeline.py --out docs/images/step-dp-vs-ddp.png \\
        --trace="--mode dp=/tmp/dp.json" --trace="--mode ddp=/tmp/ddp.json" --step median

The traces of docs/images/step-dp-vs-ddp.png come from scripts/make_timelines.sh.
Needs Debian's python3-matplotlib (run it with /usr/bin/python3).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

# Span category -> (colour, legend label). Categories not listed are drawn grey.
COLOURS = {
    "forward": ("#4c72b0", "forward"),
    "loss": ("#64b5cd", "loss"),
    "backward": ("#dd8452", "backward"),
    "comm": ("#55a868", "collective (allreduce, broadcast)"),
    "wait": ("#c44e52", "waiting"),
    "optimizer": ("#8172b3", "optimizer step"),
    "injected": ("#da8bc3", "injected slowdown (--inject slow)"),
    "scatter": ("#937860", "scatter / gather"),
    "gather": ("#937860", "scatter / gather"),
    "replicate": ("#937860", "scatter / gather"),
    "data": ("#8c8c8c", "loading data"),
    "step": ("#e5e5e5", "step, micro-batch"),
}


def load(path):
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_timeline: {path}: not a readable trace ({e})")
    names, order = {}, {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e["name"] == "thread_sort_index":
            order[e["tid"]] = e["args"]["sort_index"]
    spans = [e for e in events if e.get("ph") == "X"]
    return names, order, spans


def step_window(spans, names, step, path):
    steps = [s for s in spans if names.get(s["tid"]) == "main" and s["name"].startswith("step ")]
    if not steps:
        sys.exit(f"plot_timeline: {path}: no 'step N' span on the main lane")
    if step == "median":  # the step of median duration: a typical one, not the luckiest or the unluckiest
        chosen = [sorted(steps, key=lambda s: s["dur"])[(len(steps) - 1) // 2]]
    else:
        chosen = [s for s in steps if s["name"] == f"step {step}"] if step else steps[:1]
    if not chosen:
        have = ", ".join(s["name"] for s in steps)
        sys.exit(f"plot_timeline: {path}: no span 'step {step}' (the trace has {have})")
    s = chosen[0]
    return s["name"], s["ts"], s["ts"] + s["dur"]


def depth_of(spans):
    """Nesting depth of each span within its lane (spans of one lane nest properly)."""
    depth = {}
    by_lane = {}
    for i, s in enumerate(spans):
        by_lane.setdefault(s["tid"], []).append(i)
    for ids in by_lane.values():
        ids.sort(key=lambda i: (spans[i]["ts"], -spans[i]["dur"]))
        open_ends = []
        for i in ids:
            start = spans[i]["ts"]
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            depth[i] = len(open_ends)
            open_ends.append(start + spans[i]["dur"])
    return depth


def draw(ax, label, path, step):
    names, order, spans = load(path)
    step_name, begin, end = step_window(spans, names, step, path)
    lanes = sorted(names, key=lambda t: order.get(t, 1 << 30))
    row = {tid: i for i, tid in enumerate(lanes)}
    depth = depth_of(spans)
    for i in sorted(range(len(spans)), key=lambda i: depth[i]):
        s = spans[i]
        if s["tid"] not in row or s["ts"] + s["dur"] < begin or s["ts"] > end:
            continue
        x0, x1 = max(s["ts"], begin), min(s["ts"] + s["dur"], end)
        colour = COLOURS.get(s["cat"], ("#bbbbbb", "other"))[0]
        ax.barh(row[s["tid"]], (x1 - x0) / 1000.0, left=(x0 - begin) / 1000.0, height=0.8, color=colour,
                edgecolor="none")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([names[t] for t in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_title(f"{label}: {step_name}, {(end - begin) / 1000.0:.1f} ms", loc="left", fontsize=11)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return (end - begin) / 1000.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", action="append", required=True, metavar="LABEL=FILE[@STEP]",
                   help="a trace and its panel's title; one panel per --trace, top to bottom; @STEP draws that "
                   "step (a number or 'median') of this trace instead of --step's")
    p.add_argument("--step", default="", help="the step to draw: its number, or 'median' for the step of median "
                   "duration in each trace (default: the first recorded)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default="", help="a title above the panels")
    args = p.parse_args()
    panels = []
    for t in args.trace:
        label, sep, path = t.rpartition("=")
        if not sep or not label:
            sys.exit(f"plot_timeline: --trace '{t}': expected LABEL=FILE[@STEP]")
        path, at, step = path.partition("@")  # FILE@STEP: this panel's step, instead of --step's
        panels.append((label, path, step if at else args.step))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.2 * len(panels)), squeeze=False)
    longest = max(draw(ax, label, path, step) for ax, (label, path, step) in zip(axes[:, 0], panels))
    for ax in axes[:, 0]:
        ax.set_xlim(0, longest)  # one scale for every panel, so that lengths compare
    axes[-1, 0].set_xlabel("milliseconds since the step began")
    seen, handles = set(), []
    for colour, name in COLOURS.values():
        if name not in seen:
            seen.add(name)
            handles.append(mpatches.Patch(color=colour, label=name))
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False, fontsize=9)
    if args.title:
        fig.suptitle(args.title, fontsize=12)
    fig.tight_layout(rect=(0, 0.07, 1, 0.97 if args.title else 1))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
