#!/usr/bin/python3
"""Draws how the hand CUDA attention kernel (kernels/cuda/attention.cu) tiles one (batch,
head) of Q, K and V: the forward's block of query rows and the K/V tiles it streams through
shared memory with its online softmax, and the two backward kernels that recompute the
probabilities from the saved log-sum-exp. The tile sizes are read from the kernel's source
(kQueryTile, kKeyTile, kKeysPerBlock, kQueriesStaged in kernels/cuda/attention.cu,
kAttentionMaxHeadDim in kernels/cuda/kernels.h), so the picture follows the code; a
constant that cannot be found is an error naming it and the file.

    /usr/bin/python3 scripts/plot_attention_tiling.py docs/images/attention-tiling.png
"""
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "kernels/cuda/attention.cu"
HEADER = "kernels/cuda/kernels.h"
SHOWN_BLOCKS = 4  # the drawn sequence length: this many of the larger of the two block sizes

QUERY, KEY, STATE, SAVED = "#4c78a8", "#f58518", "#54a24b", "#b279a2"  # colours by role


def constant(path, name):
    """The integer value of `constexpr int name = N;` in the file at path (from the root)."""
    with open(os.path.join(ROOT, path)) as f:
        m = re.search(rf"constexpr\s+int\s+{name}\s*=\s*(\d+)\s*;", f.read())
    if not m:
        sys.exit(f"scripts/plot_attention_tiling.py: no 'constexpr int {name} = N;' in {path}")
    return int(m.group(1))


def tiles():
    return {"query_tile": constant(KERNEL, "kQueryTile"), "key_tile": constant(KERNEL, "kKeyTile"),
            "keys_per_block": constant(KERNEL, "kKeysPerBlock"), "queries_staged": constant(KERNEL, "kQueriesStaged"),
            "max_d": constant(HEADER, "kAttentionMaxHeadDim")}


def rect(ax, x, y, w, h, color, alpha=1.0, hatch=None, edge="black", lw=0.8):
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, alpha=alpha, hatch=hatch, edgecolor=edge, lw=lw))


def grid(ax, T, row_step, col_step):
    """The T x T score matrix of one (batch, head), never stored: dashed tile boundaries."""
    rect(ax, 0, 0, T, T, "white", edge="black", lw=1.0)
    for y in range(row_step, T, row_step):
        ax.plot([0, T], [y, y], color="0.6", lw=0.6, ls="--")
    for x in range(col_step, T, col_step):
        ax.plot([x, x], [0, T], color="0.6", lw=0.6, ls="--")


def strip_left(ax, T, width, step, label, highlight, color):
    """A [T, d] operand indexed by the query (rows), left of the score matrix."""
    x0 = -width - 6
    rect(ax, x0, 0, width, T, "0.93")
    for y in range(step, T, step):
        ax.plot([x0, x0 + width], [y, y], color="0.6", lw=0.6)
    rect(ax, x0, highlight[0], width, highlight[1] - highlight[0], color, alpha=0.85)
    ax.text(x0 - 3, (highlight[0] + highlight[1]) / 2, label, ha="right", va="center", fontsize=9)


def strip_top(ax, T, height, step, labels, highlight, color):
    """[T, d] operands indexed by the key (columns), transposed above the score matrix."""
    for k, label in enumerate(labels):
        y0 = -(k + 1) * (height + 4) - 2
        rect(ax, 0, y0, T, height, "0.93")
        for x in range(step, T, step):
            ax.plot([x, x], [y0, y0 + height], color="0.6", lw=0.6)
        rect(ax, highlight[0], y0, highlight[1] - highlight[0], height, color, alpha=0.85)
        ax.text(-4, y0 + height / 2, label, ha="right", va="center", fontsize=9)


def setup(ax, T, title, d_drawn):
    ax.set_xlim(-d_drawn - 40, T + 100)
    ax.set_ylim(T + 112, -2 * (d_drawn + 4) - 12)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=11, loc="left")


def forward_panel(ax, t, T):
    qt, kt, d = t["query_tile"], t["key_tile"], t["max_d"]
    strip_h, strip_w = d / 2, d / 2  # the head dimension d drawn at half the sequence's scale
    setup(ax, T, "forward: attention_forward_kernel", strip_w)
    grid(ax, T, qt, kt)
    rows, step = (qt, 2 * qt), 3
    cols = (step * kt, (step + 1) * kt)
    rect(ax, 0, rows[0], cols[0], qt, QUERY, alpha=0.18)  # key tiles already folded in
    ax.text(cols[0] / 2, rows[0] + qt / 2, "done", ha="center", va="center", fontsize=8, color="0.35")
    rect(ax, cols[0], rows[0], kt, qt, KEY, alpha=0.9, hatch="//")
    ax.annotate("", xy=(T - 4, rows[0] + qt / 2), xytext=(cols[1] + 4, rows[0] + qt / 2),
                arrowprops=dict(arrowstyle="->", lw=1.4))
    ax.text(cols[1] + 8, rows[0] - 3, "next key tiles", fontsize=8, va="bottom")
    strip_left(ax, T, strip_w, qt, "Q", rows, QUERY)
    strip_top(ax, T, strip_h, kt, ["K", "V"], cols, KEY)
    # The running state of the block's rows, and what it writes.
    x = T + 12
    for label, w in [("m", 8), ("l", 8), ("acc", strip_w)]:
        rect(ax, x, rows[0], w, qt, STATE, alpha=0.8)
        ax.text(x + w / 2, rows[0] - 3, label, ha="center", va="bottom", fontsize=9)
        x += w + 10
    # At the end, the same rows of O and lse.
    y = rows[1] + 30
    ax.annotate("", xy=(T + 12 + strip_w / 2, y - 12), xytext=(T + 12 + strip_w / 2, rows[1] + 2),
                arrowprops=dict(arrowstyle="->", lw=1.0))
    rect(ax, T + 12, y, strip_w, qt, SAVED, alpha=0.8)
    ax.text(T + 12 + strip_w / 2, y - 3, "O", ha="center", va="bottom", fontsize=9)
    rect(ax, T + 22 + strip_w, y, 8, qt, SAVED, alpha=0.8)
    ax.text(T + 26 + strip_w, y - 3, "lse", ha="center", va="bottom", fontsize=9)
    ax.text(0, T + 10, "\n".join([
        f"a block: {qt} query rows of one (batch, head),",
        f"  a thread per row, its q and acc [d <= {d}] in registers",
        f"K, V stream through shared memory, {kt} keys a tile",
        f"hatched: one step's {qt} x {kt} scores s = q k^T * scale",
        "online softmax, per row:",
        "  m' = max(m, max s);  r = e^(m - m')",
        "  l = r l + sum e^(s - m');  acc = r acc + sum e^(s - m') v",
        "end: O = acc / l, lse = m + log l (a float a row, saved)",
        "no T x T matrix is ever stored"]), fontsize=8.5, va="top", family="monospace")


def dq_panel(ax, t, T):
    qt, kt, d = t["query_tile"], t["key_tile"], t["max_d"]
    strip_h, strip_w = d / 2, d / 2
    setup(ax, T, "backward 1: attention_backward_dq_kernel", strip_w)
    grid(ax, T, qt, kt)
    rows, step = (2 * qt, 3 * qt), 5
    cols = (step * kt, (step + 1) * kt)
    rect(ax, 0, rows[0], cols[0], qt, QUERY, alpha=0.18)
    ax.text(cols[0] / 2, rows[0] + qt / 2, "done", ha="center", va="center", fontsize=8, color="0.35")
    rect(ax, cols[0], rows[0], kt, qt, KEY, alpha=0.9, hatch="//")
    ax.annotate("", xy=(T - 4, rows[0] + qt / 2), xytext=(cols[1] + 4, rows[0] + qt / 2),
                arrowprops=dict(arrowstyle="->", lw=1.4))
    strip_left(ax, T, strip_w, qt, "Q, dO", rows, QUERY)
    strip_top(ax, T, strip_h, kt, ["K", "V"], cols, KEY)
    x = T + 12
    for label, w in [("lse", 8), ("D", 8), ("dQ", strip_w)]:
        rect(ax, x, rows[0], w, qt, SAVED if label != "dQ" else STATE, alpha=0.8)
        ax.text(x + w / 2, rows[0] - 3, label, ha="center", va="bottom", fontsize=9)
        x += w + 12
    ax.text(0, T + 10, "\n".join([
        "first D = rowsum(dO * O) (attention_row_dot_kernel)",
        f"then the forward's grid: {qt} query rows a block,",
        f"  the same {kt}-key tiles of K, V in shared memory",
        "P recomputed from the saved lse:",
        "  p = e^(q k^T * scale - lse)",
        "  dS = p (dO v^T - D);  dQ += dS k  (x scale at the end)",
        "each dQ row summed by one thread, in key order:",
        "  no atomics, the same bits every run"]), fontsize=8.5, va="top", family="monospace")


def dkdv_panel(ax, t, T):
    kb, qs, d = t["keys_per_block"], t["queries_staged"], t["max_d"]
    strip_h, strip_w = d / 2, d / 2
    setup(ax, T, "backward 2: attention_backward_dkdv_kernel", strip_w)
    grid(ax, T, qs, kb)
    cols, step = (kb, 2 * kb), 3
    rows = (step * qs, (step + 1) * qs)
    rect(ax, cols[0], 0, kb, rows[0], KEY, alpha=0.18)
    ax.text(cols[0] + kb / 2, rows[0] / 2, "done", ha="center", va="center", fontsize=8, color="0.35")
    rect(ax, cols[0], rows[0], kb, qs, QUERY, alpha=0.9, hatch="\\\\")
    ax.annotate("", xy=(cols[0] + kb / 2, T - 4), xytext=(cols[0] + kb / 2, rows[1] + 4),
                arrowprops=dict(arrowstyle="->", lw=1.4))
    strip_left(ax, T, strip_w, qs, "Q, dO", rows, QUERY)
    strip_top(ax, T, strip_h, kb, ["K", "V"], cols, KEY)
    x = T + 12
    for label, w in [("lse", 8), ("D", 8)]:
        rect(ax, x, rows[0], w, qs, SAVED, alpha=0.8)
        ax.text(x + w / 2, rows[0] - 3, label, ha="center", va="bottom", fontsize=9)
        x += w + 12
    for k, label in enumerate(["dK", "dV"]):
        y0 = -(k + 1) * (strip_h + 4) - 2
        rect(ax, T + 12, y0, kb, strip_h, STATE, alpha=0.8)
        ax.text(T + 16 + kb, y0 + strip_h / 2, label, ha="left", va="center", fontsize=9)
    ax.text(0, T + 10, "\n".join([
        f"a block: {kb} keys of one (batch, head), a thread",
        "  per key, its k, v and the dK, dV sums in registers",
        f"Q, dO, lse, D stream through shared memory,",
        f"  {qs} queries a tile",
        "P recomputed again:",
        "  p = e^(q k^T * scale - lse);  dS = p (dO v^T - D)",
        "  dV += p dO;  dK += dS q  (x scale at the end)",
        "each dK, dV row summed by one thread, in query order"]), fontsize=8.5, va="top", family="monospace")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/plot_attention_tiling.py OUT.png")
    t = tiles()
    T = SHOWN_BLOCKS * max(t["query_tile"], t["keys_per_block"])
    fig, axes = plt.subplots(1, 3, figsize=(18, 7.6))
    forward_panel(axes[0], t, T)
    dq_panel(axes[1], t, T)
    dkdv_panel(axes[2], t, T)
    fig.suptitle(f"scaled_dot_product_attention on CUDA, one (batch, head), T = {T} drawn (tile sizes from {KERNEL}); "
                 f"the grid is (tiles of T) x (B * H) blocks", fontsize=12)
    legend = [patches.Patch(color=QUERY, alpha=0.85, label="the block's query rows / staged query tile"),
              patches.Patch(color=KEY, alpha=0.85, label="the block's keys / staged key tile"),
              patches.Patch(facecolor=KEY, hatch="//", label="one step's scores, in registers"),
              patches.Patch(color=STATE, alpha=0.8, label="running sums, written at the end"),
              patches.Patch(color=SAVED, alpha=0.8,
                            label="saved by the forward (O, lse) or the backward's first pass (D)")]
    fig.legend(handles=legend, loc="lower center", ncol=5, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(sys.argv[1], dpi=110)
    print(f"wrote {sys.argv[1]} (tiles {t})")


if __name__ == "__main__":
    main()
