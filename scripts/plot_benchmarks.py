#!/usr/bin/python3
"""Draws the benchmark figures of docs/benchmarks.md ("Figures") from the raw results that
scripts/make_benchmark_figures.sh writes, and prints the tables behind them (markdown):

    bench-step-ratio.png   dpcore / PyTorch step time per model and thread count, one panel
                           per PyTorch compare_cpu.py ran (step.json)
    bench-busbw.png        allreduce bus bandwidth against message size per backend
                           (busbw-local.json, busbw-mpi-2.json, busbw-mpi-4.json)
    bench-ddp-hidden.png   DDP's wait for its buckets after backward, and the hidden fraction
                           of the allreduce, against the bucket cap (ddp.jsonl)

    /usr/bin/python3 scripts/plot_benchmarks.py RESULTS_DIR OUT_DIR

A figure whose results are missing is left out, saying so. Bars and points are medians over
the rounds (repetitions); the whiskers span their minimum to maximum.
Needs Debian's python3-matplotlib (run it with /usr/bin/python3).
"""
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def machine_line(results, part):
    """'CPU, N cores, date' from machine.txt, for the figures' titles: the lines of the last
    `--only PART:` section if make_benchmark_figures.sh measured PART again, else the first."""
    sections, current = {None: {}}, None
    path = os.path.join(results, "machine.txt")
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("--only "):
                current = line.split()[1].rstrip(":")
                sections[current] = {}
                continue
            key, _, value = line.partition(": ")
            sections[current][key] = value.strip()
    info = sections.get(part) or sections[None]
    cores = info.get("cores", "?").split()[0]
    return f"{info.get('cpu', '?')}, {cores} cores, {info.get('date', '?')}"


def save(fig, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}", file=sys.stderr)


def spread(values):
    return statistics.median(values), min(values), max(values)


# --------------------------------------------------------------------------- step ratio
def step_ratio(results, out_dir):
    """One panel per PyTorch that compare_cpu.py ran (Debian's 1.13, the current one of
    bench/.venv): dpcore's step time over that PyTorch's, per model and thread count."""
    data = read_json(os.path.join(results, "step.json"))
    if "pytorch" not in data:
        sys.exit(f"{results}/step.json: written by compare_cpu.py before it compared several PyTorch builds "
                 "(no 'pytorch' list): measure it again (scripts/make_benchmark_figures.sh --only step)")
    rows = data["results"]
    torches = [t["version"] for t in data["pytorch"]]
    models = list(dict.fromkeys(r["model"] for r in rows))
    threads = sorted({r["threads"] for r in rows})
    blas = ", ".join(f"{k}={v if v is not None else 'unset'}" for k, v in data["openblas_env"].items())
    print(f"{data['cpu']}, {data['cpus']} CPUs, {blas}")
    print()
    print("| model | batch | threads | PyTorch | PyTorch ms/step | dpcore ms/step | step time dpcore / PyTorch (min-max) | "
          "dpcore speed-up |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    fig, axes = plt.subplots(1, len(torches), figsize=(6 * len(torches) + 1, 4.8), sharey=True, squeeze=False)
    width = 0.8 / len(threads)
    for v, (ax, version) in enumerate(zip(axes[0], torches)):
        for k, t in enumerate(threads):
            for i, m in enumerate(models):
                r = next((r for r in rows if r["model"] == m and r["threads"] == t), None)
                if r is None:
                    continue
                # Per round: dpcore's median step over this PyTorch's, runs next to each other in time.
                med, lo, hi = spread([rnd["dpcore"]["median_us"] / rnd["pytorch"][v]["median_us"] for rnd in r["rounds"]])
                x = i + (k - (len(threads) - 1) / 2) * width
                ax.bar(x, med, width * 0.92, color=COLOURS[k], label=f"{t} thread{'s' if t > 1 else ''}" if i == 0 else None)
                ax.errorbar(x, med, yerr=[[med - lo], [hi - med]], color="black", capsize=3, linewidth=1)
                ax.text(x, hi + 0.02, f"{med:.2f}", ha="center", va="bottom", fontsize=8)
                d_ms = statistics.median(rnd["dpcore"]["median_us"] for rnd in r["rounds"]) / 1e3
                t_ms = statistics.median(rnd["pytorch"][v]["median_us"] for rnd in r["rounds"]) / 1e3
                print(f"| {m} | {r['batch']} | {t} | {version} | {t_ms:.1f} | {d_ms:.1f} | **{med:.2f}** ({lo:.2f}-{hi:.2f}) | "
                      f"{1 / med:.2f}x |")
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.text(0.01, 1.01, f"PyTorch {version} = 1.0", ha="left", va="bottom", fontsize=9,
                transform=ax.get_yaxis_transform())
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([f"{m}\n(batch {next(r['batch'] for r in rows if r['model'] == m)})" for m in models])
        ax.set_title(f"against PyTorch {version}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("step time, dpcore / PyTorch\n(lower is faster for dpcore)")
    axes[0][0].set_ylim(0, max(1.15, axes[0][0].get_ylim()[1]))
    axes[0][0].legend(loc="upper left", fontsize=9)
    lb, la = data["load_before"], data["load_after"]
    fig.suptitle(f"CPU training step, dpcore / PyTorch, median of {len(rows[0]['rounds'])} alternating rounds "
                 f"(whiskers: min-max)\n{machine_line(results, 'step')}, {blas}, "
                 f"load {lb[0]:.1f} before, {la[0]:.1f} after", fontsize=10)
    save(fig, out_dir, "bench-step-ratio.png")
    print()


# --------------------------------------------------------------------------- bus bandwidth
NAME = re.compile(r"^allreduce/(\w+)/(cpu|cuda)/(?:world:(\d+)/)?(\d+)(KiB|MiB)")


def busbw_series(path, backend_label):
    """{world: {bytes: [busbw GB/s per repetition]}} from a Google Benchmark JSON file."""
    series = {}
    for b in read_json(path)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        m = NAME.match(b["name"])
        if not m:
            continue
        world = int(m.group(3) or re.match(r"(\d+)", b.get("label", "0")).group(1))
        size = int(m.group(4)) << (10 if m.group(5) == "KiB" else 20)
        series.setdefault((backend_label, world), {}).setdefault(size, []).append(b["busbw"] / 1e9)
    return series


def size_label(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def busbw(results, out_dir):
    series = {}
    for name, label in [("busbw-local.json", "local"), ("busbw-mpi-2.json", "mpi"), ("busbw-mpi-4.json", "mpi")]:
        path = os.path.join(results, name)
        if os.path.exists(path):
            series.update(busbw_series(path, label))
    if not series:
        print("no busbw-*.json: bench-busbw.png left out", file=sys.stderr)
        return
    sizes = sorted({s for v in series.values() for s in v})
    print("| backend | " + " | ".join(size_label(s) for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    fig, ax = plt.subplots(figsize=(9, 5))
    markers = {"local": "o", "mpi": "s"}
    for k, ((backend, world), points) in enumerate(sorted(series.items())):
        xs = sorted(points)
        stats = [spread(points[x]) for x in xs]
        what = "replicas (threads)" if backend == "local" else "processes"
        label = f"{backend}, {world} {what}" + (", oversubscribed" if backend == "mpi" and world > 2 else "")
        ax.errorbar(xs, [s[0] for s in stats], yerr=[[s[0] - s[1] for s in stats], [s[2] - s[0] for s in stats]],
                    marker=markers.get(backend, "^"), color=COLOURS[k], capsize=3, linewidth=1.6, label=label,
                    linestyle="-" if world == 2 else "--")
        cells = {x: f"{s[0]:.2f}" for x, s in zip(xs, stats)}
        print(f"| {label} | " + " | ".join(cells.get(s, "") for s in sizes) + " |")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(v))))
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes, float32 buffer per rank)")
    ax.set_ylabel("bus bandwidth (GB/s)\nalgbw x 2(n-1)/n")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    reps = max(len(v) for p in series.values() for v in p.values())
    ax.set_title(f"allreduce on CPU tensors, median of {reps} repetitions (whiskers: min-max)\n"
                 f"{machine_line(results, 'busbw')}; no GPU: nccl not measured", fontsize=10)
    save(fig, out_dir, "bench-busbw.png")
    print()


# --------------------------------------------------------------------------- ddp overlap
def ddp_hidden(results, out_dir):
    """What the replica whose backward ended last still waits for its buckets (exposed_last_ms:
    communication only; replica 0's exposed_ms also holds waiting for the other replica's
    backward), and the hidden fraction against the same wait with one bucket (the largest cap)
    in the same round: with one bucket nothing can overlap, so that wait is the whole
    allreduce as DDP runs it. (The bench's own "alone", one allreduce on threads started for
    it, took either 0.2-0.6 ms or 4 ms on the loaded 2-core machine, too unsteady to divide by.)"""
    with open(os.path.join(results, "ddp.jsonl")) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in runs))
    one_bucket = {(r["model"], r["round"]): r["exposed_last_ms"] for r in runs if r["buckets"] == 1}
    for r in runs:
        ref = one_bucket.get((r["model"], r["round"]))
        r["hidden_vs_one"] = 100 * (1 - r["exposed_last_ms"] / ref) if ref else float("nan")
    print("| model | bucket cap | buckets | waited after the last backward, ms (min-max) | hidden | "
          "replica 0 waited, ms | ddp ms/step |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    for k, m in enumerate(models):
        grad = next(r for r in runs if r["model"] == m)["gradient_bytes"] / 2**20
        caps = sorted({r["bucket_mb"] for r in runs if r["model"] == m})
        by_cap = {cap: [r for r in runs if r["model"] == m and r["bucket_mb"] == cap] for cap in caps}
        label = f"{m} (gradient {grad:.2f} MiB)"
        for ax, key in zip(axes, ("exposed_last_ms", "hidden_vs_one")):
            stats = [spread([r[key] for r in by_cap[cap]]) for cap in caps]
            ax.errorbar(caps, [s[0] for s in stats], yerr=[[s[0] - s[1] for s in stats], [s[2] - s[0] for s in stats]],
                        marker="o", color=COLOURS[k], capsize=3, linewidth=1.6, label=label)
            ax.axvline(grad, color=COLOURS[k], linewidth=0.8, linestyle=":")
        for cap in caps:
            these = by_cap[cap]
            med = lambda key: statistics.median(r[key] for r in these)  # noqa: E731
            w, h = spread([r["exposed_last_ms"] for r in these]), spread([r["hidden_vs_one"] for r in these])
            print(f"| {m} | {cap:g} MiB | {med('buckets'):.0f} | {w[0]:.3f} ({w[1]:.3f}-{w[2]:.3f}) | "
                  f"**{h[0]:.0f}%** ({h[1]:.0f} to {h[2]:.0f}%) | {med('exposed_ms'):.2f} | {med('ddp_ms'):.1f} |")
    titles = ["time the replica whose backward ended last still waited\nfor its buckets (communication only)",
              "allreduce hidden behind backward\n1 - that wait / the same wait with one bucket (same round)"]
    ylabels = ["waited after backward (ms per step)", "hidden (%)"]
    # Tick labels: the cap as a fraction of a MiB, then the bucket count of each model.
    caps = sorted({r["bucket_mb"] for r in runs})
    buckets = lambda m, cap: ", ".join(sorted({str(r["buckets"]) for r in runs if r["model"] == m and r["bucket_mb"] == cap}))  # noqa: E731
    ticks = [(f"1/{round(1 / c)}" if c < 1 else f"{c:g}") + "\n" + " / ".join(buckets(m, c) for m in models) for c in caps]
    for ax, title, ylabel in zip(axes, titles, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xticks(caps)
        ax.set_xticklabels(ticks, fontsize=9)
        ax.minorticks_off()
        ax.set_xlabel(f"bucket cap (MiB; every bucket, the first too)\nbelow: buckets of {' / '.join(models)}; "
                      "dotted: the whole gradient", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[1].axhline(0, color="black", linewidth=0.8)
    axes[0].legend(fontsize=9, loc="upper left")
    rounds = max(r["round"] for r in runs)
    fig.suptitle(f"DDP, {runs[0]['replicas']} CPU replicas (threads of one process), batch {runs[0]['batch']}, "
                 f"local ring, median of {rounds} rounds (whiskers: min-max)\n{machine_line(results, 'ddp')}", fontsize=10)
    save(fig, out_dir, "bench-ddp-hidden.png")
    print()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results, out_dir = sys.argv[1:]
    for name, draw in [("step.json", step_ratio), ("busbw-local.json", busbw), ("ddp.jsonl", ddp_hidden)]:
        if os.path.exists(os.path.join(results, name)) or draw is busbw:
            draw(results, out_dir)
        else:
            print(f"no {name} in {results}: its figure is left out", file=sys.stderr)


if __name__ == "__main__":
    main()
