#!/usr/bin/env python3
"""docs/scaling.md's check of `dpcore predict` against measured steps on this machine.

From what scripts/measure_scaling.sh wrote into RESULTS (default bench/results/scaling):
  1. fits alpha (latency per ring step) and beta (bandwidth) of the ring model,
         t(n) = 2(R-1) alpha + 2(R-1)/R * n / beta,
     to comm_bench's allreduce times of 4 KiB to 16 MiB, for each backend (local ring, MPI)
     and replica count R separately: on 2 cores the links' speed depends on how many
     threads share the cores, which the one-link model does not know;
  2. predicts each measured step of R replicas with `dpcore predict --profile` on a cluster
     of one node with those links and the machine's cores. The machine's speed drifts by
     10-30% over minutes (a shared virtual machine), so the profile is that round's, its
     times scaled to the one-replica steps measured right before and right after the R
     replicas (their geometric mean), and its
     busy slowdown the median of all rounds' (a ratio of two noisy timings);
  3. prints the table of measured against predicted and writes it to RESULTS/check.json:
     the error of a case is the median of its rounds' errors, shown beside the medians of
     the measured and predicted times.
    /usr/bin/python3 scripts/check_scaling.py [RESULTS [DPCORE]]   (default DPCORE: build/bin/dpcore)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

SIZES = {"4KiB": 4 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20, "64MiB": 64 << 20}
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def allreduce_points(path, world=None):
    """(world, bytes, seconds) of each allreduce in a comm_bench JSON report."""
    points = []
    for b in json.load(open(path))["benchmarks"]:
        parts = b["name"].split("/")
        size = next(p for p in parts if p in SIZES)
        w = world or int(next(p for p in parts if p.startswith("world:")).split(":")[1])
        points.append((w, SIZES[size], b["real_time"] * UNIT[b["time_unit"]]))
    return points


def fit_ring(points):
    """Least squares in relative error (each point weighted by 1/t) of the ring model."""
    # Normal equations of two unknowns, a = alpha and c = 1/beta.
    s = [[0.0, 0.0], [0.0, 0.0]]
    r = [0.0, 0.0]
    for w, n, t in points:
        row = (2 * (w - 1) / t, 2 * (w - 1) / w * n / t)
        for i in range(2):
            r[i] += row[i]  # the target t/t = 1
            for j in range(2):
                s[i][j] += row[i] * row[j]
    det = s[0][0] * s[1][1] - s[0][1] * s[1][0]
    a = (r[0] * s[1][1] - s[0][1] * r[1]) / det
    c = (s[0][0] * r[1] - s[1][0] * r[0]) / det
    return a, 1.0 / c


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "bench/results/scaling"
    dpcore = sys.argv[2] if len(sys.argv) > 2 else "build/bin/dpcore"
    cores = os.cpu_count()
    links = {}
    local = allreduce_points(os.path.join(results, "comm-local.json"))
    for world in sorted({w for w, _, _ in local}):
        links[("local", world)] = fit_ring([p for p in local if p[0] == world and p[1] <= 16 << 20])
    for world in (2, 3, 4):
        path = os.path.join(results, f"comm-mpi-{world}.json")
        if os.path.exists(path):
            links[("mpi", world)] = fit_ring([p for p in allreduce_points(path, world) if p[1] <= 16 << 20])

    steps = [json.loads(line) for line in open(os.path.join(results, "steps.jsonl"))]
    profiles = {s["round"]: json.load(open(os.path.join(results, f"profile-{s['round']}.json"))) for s in steps}
    busy = statistics.median(p["busy_slowdown"] for p in profiles.values())
    # Each step of R replicas sits between a one-replica step just before and one just after
    # (their "baseline" says so): its prediction starts from their geometric mean.
    rows = {}
    for i, s in enumerate(steps):
        backend, mode, r, rnd = s["backend"], s["mode"], s["replicas"], s["round"]
        if r == 1:
            continue
        case = f"{backend}-{mode}-{r}"
        before, after = steps[i - 1], steps[i + 1] if i + 1 < len(steps) else {}
        assert before.get("baseline") == f"before {case}", f"no one-replica step before {s}"
        assert after.get("baseline") == f"after {case}", f"no one-replica step after {s}"
        one_us = (before["median_us"] * after["median_us"]) ** 0.5
        profile = dict(profiles[rnd])
        scale = one_us * 1e-6 / (profile["forward_s"] + profile["backward_s"] + profile["optimizer_s"])
        for k in ("forward_s", "backward_s", "optimizer_s"):
            profile[k] *= scale
        profile["grad_ready_s"] = [t * scale for t in profile["grad_ready_s"]]
        profile["busy_slowdown"] = busy
        alpha, beta = links[(backend, r)]
        cluster = f"{r},{alpha * 1e6:.3f},{beta / 1e9:.4f},{alpha * 1e6:.3f},{beta / 1e9:.4f},{cores}"
        with tempfile.NamedTemporaryFile("w", suffix=".json") as prof, tempfile.NamedTemporaryFile(suffix=".json") as out:
            json.dump(profile, prof)
            prof.flush()
            subprocess.run([dpcore, "predict", "--model", s["model"], "--batch", str(s["batch"] // r),
                            "--profile", prof.name, "--cluster", cluster, "--replicas", str(r),
                            "--strategies", mode, "--algorithm", "ring", "--json", out.name],
                           check=True, stdout=subprocess.DEVNULL)
            predicted = json.load(open(out.name))["predictions"][0][mode]
        key = (backend, mode, r)
        row = rows.setdefault(key, {"measured": [], "predicted": [], "exposed": [], "one": [], "link": (alpha, beta)})
        row["one"].append(one_us / 1e3)
        row["measured"].append(s["median_us"] / 1e3)
        row["predicted"].append(predicted["step_s"] * 1e3)
        row["exposed"].append(predicted["exposed_comm_s"] * 1e3)

    table = []
    print(f"busy slowdown (median of {len(profiles)} rounds): {busy:.3f}")
    print("| backend | mode | replicas | one replica ms (before and after) | measured ms | predicted ms | error (median of rounds) | exposed ms (predicted) | alpha us | beta GB/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (backend, mode, r), row in sorted(rows.items(), key=lambda kv: (kv[0][0] != "local", kv[0][1], kv[0][2])):
        m, p = statistics.median(row["measured"]), statistics.median(row["predicted"])
        e = statistics.median(row["exposed"])
        alpha, beta = row["link"]
        error = statistics.median((pr - me) / me for pr, me in zip(row["predicted"], row["measured"]))
        link = (f"{alpha * 1e6:.0f}", f"{beta / 1e9:.2f}")
        ones = ", ".join(f"{v:.1f}" for v in row["one"])
        print(f"| {backend} | {mode} | {r} | {ones} | {m:.1f} ({', '.join(f'{v:.1f}' for v in row['measured'])}) | {p:.1f} "
              f"({', '.join(f'{v:.1f}' for v in row['predicted'])}) | "
              f"{error:+.0%} | {e:.2f} | {link[0]} | {link[1]} |")
        table.append({"backend": backend, "mode": mode, "replicas": r, "one_replica_ms": row["one"], "measured_ms": row["measured"],
                      "predicted_ms": row["predicted"], "error": error, "alpha_s": alpha, "beta_bytes_per_s": beta})
    worst = max(abs(t["error"]) for t in table)
    print(f"\nlargest error {worst:.0%} over {len(table)} cases")
    with open(os.path.join(results, "check.json.tmp"), "w") as f:
        json.dump({"cores": cores, "busy_slowdown": busy, "cases": table, "largest_error": worst}, f, indent=1)
    os.replace(os.path.join(results, "check.json.tmp"), os.path.join(results, "check.json"))


if __name__ == "__main__":
    main()
