#!/usr/bin/env python3
"""Draws a post-training run's log.csv (tools/tiny/post_train.py) as one SVG with two panels
(standard library only): above, the validation pass@1 at the trained method and budget and with
a full cache, and the rollouts' mean reward; below, the GRPO loss or the distillation KL.

    python3 tools/tiny/plot_post_training.py runs/post/X/log.csv runs/post/X/curves.svg "title"
"""
import csv
import json
import os
import sys

W, PH, L, R, T, GAP, B = 680, 220, 60, 150, 34, 46, 44
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def panel(out, top, series, ylabel, x_max, lo=None, hi=None):
    """Line series [(label, [(x, y)])] in a panel whose top edge is at `top`."""
    ys = [y for _, pts in series for _, y in pts]
    if not ys:
        return
    lo = min(ys) if lo is None else lo
    hi = max(ys) if hi is None else hi
    if hi - lo < 1e-9:
        hi = lo + 1.0
    x = lambda v: L + (W - L - R) * v / max(1, x_max)  # noqa: E731
    y = lambda v: top + PH * (hi - v) / (hi - lo)  # noqa: E731
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for i in range(6):
        v = x_max * i / 5
        out.append(f'<text x="{x(v):.1f}" y="{top + PH + 16}" text-anchor="middle">{v:.0f}</text>')
    out.append(f'<text x="14" y="{top + PH / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + PH / 2})">{ylabel}</text>')
    out.append(f'<rect x="{L}" y="{top}" width="{W - L - R}" height="{PH}" fill="none" '
               f'stroke="#333"/>')
    for k, (label, pts) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        line = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        if len(pts) < 30:
            for a, b in pts:
                out.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="2.5" fill="{color}"/>')
        out.append(f'<text x="{W - R + 8}" y="{top + 14 + 16 * k}" fill="{color}">{label}</text>')


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: plot_post_training.py LOG.csv OUT.svg [TITLE]")
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no rows")
    title = sys.argv[3] if len(sys.argv) == 4 else "post-training"

    def col(name):
        return [(int(r["iteration"]), float(r[name])) for r in rows if r.get(name)]

    x_max = max(int(r["iteration"]) for r in rows)
    height = T + 2 * PH + GAP + B
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{height}" fill="white"/>',
           f'<text x="{(W - R + L) / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    # distill samples the teacher; the other recipes sample the trained model (run.json, beside
    # the log, names the recipe)
    record = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "run.json")
    recipe = json.load(open(record))["recipe"] if os.path.exists(record) else None
    teacher = recipe == "distill" or (recipe is None and col("kl"))
    reward = "teacher's reward" if teacher else "rollout reward"
    panel(out, T, [("val, trained budget", col("val_method")), ("val, full cache", col("val_full")),
                   (reward, col("reward"))], "pass@1 / reward", x_max, 0.0, 1.0)
    second = col("kl") or col("loss")
    panel(out, T + PH + GAP, [("KL to full cache" if col("kl") else "GRPO loss", second)],
          "KL" if col("kl") else "loss", x_max)
    out.append(f'<text x="{(L + W - R) / 2}" y="{height - 8}" text-anchor="middle">iteration'
               f'</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
