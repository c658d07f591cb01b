#!/usr/bin/env python3
"""Draws the training loss curve of train_log.csv as an SVG (standard library only).

    python3 tools/tiny/plot_loss.py models/rkv-tiny-reasoner/train_log.csv \
        models/rkv-tiny-reasoner/loss.svg
"""
import csv
import math
import sys

W, H, L, R, T, B = 640, 360, 60, 20, 30, 50


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: plot_loss.py TRAIN_LOG.csv OUT.svg")
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no rows")
    steps = [int(r["step"]) for r in rows]
    losses = [float(r["loss"]) for r in rows]
    lo, hi = math.log10(min(losses)), math.log10(max(losses))
    lo, hi = math.floor(lo), math.ceil(hi)
    x = lambda s: L + (W - L - R) * s / steps[-1]  # noqa: E731
    y = lambda v: T + (H - T - B) * (hi - math.log10(v)) / (hi - lo)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">'
           f'rkv-tiny-reasoner: training loss (chain-of-thought tokens)</text>']
    for e in range(lo, hi + 1):
        v = 10 ** e
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for i in range(6):
        s = steps[-1] * i / 5
        out.append(f'<text x="{x(s):.1f}" y="{H - B + 18}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">step '
               f'(16 sequences each)</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2})">cross-entropy (log scale)</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" '
               f'stroke="#333"/>')
    pts = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(steps, losses))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
