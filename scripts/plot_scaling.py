#!/usr/bin/env python3
"""docs/images/scaling.png: the scaling model checked and used (docs/scaling.md).

Left: the check on this machine, measured against predicted step times (RESULTS/check.json
from scripts/check_scaling.py). Middle: ResNet-50 on V100 servers, predicted efficiency
beside the published anchors. Right: fashioncnn and vggs on H200 servers (RESULTS/predict-*.json
from scripts/predict_gpu_presets.sh).
    /usr/bin/python3 scripts/plot_scaling.py [RESULTS [OUT.png]]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

STYLE = {"ddp": ("tab:blue", "-"), "dp": ("tab:red", "--"), "local:8": ("tab:green", "-.")}


def efficiency(path, strategy):
    rows = json.load(open(path))["predictions"]
    return [r["replicas"] for r in rows], [r[strategy]["efficiency"] for r in rows]


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "bench/results/scaling"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/images/scaling.png"
    fig, (check, v100, h200) = plt.subplots(1, 3, figsize=(17, 5.2), gridspec_kw={"width_ratios": [1.25, 1, 1]})

    cases = json.load(open(os.path.join(results, "check.json")))["cases"]
    labels = [f"{c['backend']} {c['mode']}\nR={c['replicas']}" for c in cases]
    x = range(len(cases))
    med = lambda v: sorted(v)[len(v) // 2]
    measured = [med(c["measured_ms"]) for c in cases]
    predicted = [med(c["predicted_ms"]) for c in cases]
    low = [m - min(c["measured_ms"]) for m, c in zip(measured, cases)]
    high = [max(c["measured_ms"]) - m for m, c in zip(measured, cases)]
    check.bar([i - 0.2 for i in x], measured, 0.4, yerr=[low, high], capsize=3, color="tab:gray",
              label="measured (median; bars: range of the rounds)")
    check.bar([i + 0.2 for i in x], predicted, 0.4, color="tab:blue",
              label="predicted (median); label: median of the rounds' errors")
    for i, c in enumerate(cases):
        check.annotate(f"{c['error']:+.0%}", (i + 0.2, predicted[i]), ha="center", va="bottom", fontsize=8)
    check.set_xticks(list(x))
    check.set_xticklabels(labels, fontsize=8)
    check.set_ylabel("step time (ms)")
    check.set_ylim(0, 1.3 * max(max(c["measured_ms"] + c["predicted_ms"]) for c in cases))
    check.set_title("Check on this 2-core machine: fashioncnn,\n64 samples per replica, 1 thread each")
    check.legend(fontsize=8, loc="upper left")

    r50 = os.path.join(results, "predict-resnet50-v100.json")
    for strategy in ("ddp", "dp", "local:8"):
        color, line = STYLE[strategy]
        v100.plot(*efficiency(r50, strategy), line, color=color, marker=".", label=f"predicted, {strategy}")
    v100.plot([16], [0.93], "k*", markersize=12, label="PyTorch DDP benchmark: 93% at 16 GPUs")
    v100.plot([32, 256], [0.90, 0.90], "k-", linewidth=5, alpha=0.35, label="DDP paper: about 90%, 32-256 GPUs")
    v100.set_title("ResNet-50, 32 images per V100\n(v100x8-nvlink-ib100, step 97 ms from the anchor)")

    for model, marker, step in (("fashioncnn", "o", "batch 64, 330 us"), ("vggs", "s", "batch 256, 1480 us")):
        path = os.path.join(results, f"predict-{model}-h200.json")
        for strategy in ("ddp", "local:8"):
            color, line = STYLE[strategy]
            h200.plot(*efficiency(path, strategy), line, color=color, marker=marker, markersize=4,
                      label=f"{model} ({step}), {strategy}")
    h200.set_title("H200 servers (h200x8-nvlink-ib400), one replica's\nstep = PyTorch's graph mode on one H200")
    for ax in (v100, h200):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("replicas (GPUs)")
        ax.set_ylabel("scaling efficiency = step(1) / step(R)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)
    print(out)


if __name__ == "__main__":
    main()
