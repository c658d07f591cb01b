#!/usr/bin/env python3
"""Tables and a plot of the ablations tools/tiny/ablate.sh runs (standard library only).

    python3 tools/tiny/ablation_table.py runs/tiny/ablate [--plot docs/results/tiny_ablation.svg]

The directory holds <method>/<variant>/summary.json (an `rkv eval` run) and flags.txt (the
changed setting). For every method: pass@1 of each variant at each budget, and its difference
from the method's preset ("default") in points; then the mean generated tokens. The plot draws
every variant's pass@1 at each budget beside the preset's.
"""
import argparse
import json
import os

METHODS = ["rkv", "gkv", "skipkv"]


def load(root: str) -> dict:
    """{method: [(variant, flags, {budget: row})]}: the preset first, then by name."""
    out = {}
    for method in METHODS:
        mdir = os.path.join(root, method)
        if not os.path.isdir(mdir):
            continue
        runs = []
        for variant in sorted(os.listdir(mdir)):
            summary = os.path.join(mdir, variant, "summary.json")
            if not os.path.exists(summary):
                continue
            with open(summary) as f:
                s = json.load(f)
            flags_path = os.path.join(mdir, variant, "flags.txt")
            flags = open(flags_path).read().strip() if os.path.exists(flags_path) else ""
            rows = {r["budget"]: r for r in s["results"] if r["method"] == method}
            runs.append((variant, flags, rows))
        runs.sort(key=lambda r: r[0] != "default")  # the preset first
        out[method] = runs
    return out


def tables(data: dict) -> str:
    lines = []
    for method, runs in data.items():
        budgets = sorted({b for _, _, rows in runs for b in rows})
        default = next((rows for v, _, rows in runs if v == "default"), {})
        lines.append(f"#### {method}\n")
        lines.append("| variant | setting | " + " | ".join(f"pass@1 at {b}" for b in budgets) +
                     " | " + " | ".join(f"tokens at {b}" for b in budgets) + " |")
        lines.append("|---|---|" + "---:|" * (2 * len(budgets)))
        for variant, flags, rows in runs:
            cells = []
            for b in budgets:
                r = rows.get(b)
                if r is None:
                    cells.append("")
                    continue
                cell = f"{r['pass_at_1']:.3f}"
                if variant != "default" and b in default:
                    cell += f" ({100 * (r['pass_at_1'] - default[b]['pass_at_1']):+.1f})"
                cells.append(cell)
            for b in budgets:
                r = rows.get(b)
                cells.append(f"{r['mean_generated_tokens']:.0f}" if r else "")
            setting = f"`{flags}`" if flags else "preset"
            lines.append(f"| {variant} | {setting} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(data: dict, path: str, problems: str = "200 held-out problems") -> None:
    """A dot plot: one row per variant, pass@1 on x, one marker per budget."""
    width, left, right, row_h, top = 760, 190, 30, 18, 40
    budgets = sorted({b for runs in data.values() for _, _, rows in runs for b in rows})
    colors = ["#d95f02", "#1b9e77", "#7570b3", "#e7298a"]
    n_rows = sum(len(runs) + 2 for runs in data.values())
    height = top + n_rows * row_h + 30
    x = lambda v: left + v * (width - left - right)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">pass@1 of each '
           f'ablation (greedy, {problems}); dashed: the preset</text>']
    for i, b in enumerate(budgets):
        cx = left + i * 130
        out.append(f'<circle cx="{cx}" cy="30" r="4" fill="{colors[i % len(colors)]}"/>'
                   f'<text x="{cx + 8}" y="34">budget {b}</text>')
    y = top
    for method, runs in data.items():
        y += row_h
        out.append(f'<text x="8" y="{y}" font-weight="bold">{method}</text>')
        default = next((rows for v, _, rows in runs if v == "default"), {})
        y0 = y + 4
        for variant, flags, rows in runs:
            y += row_h
            label = "preset" if variant == "default" else (flags.replace("--kv-", "") or variant)
            out.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{label}</text>')
            out.append(f'<line x1="{x(0)}" x2="{x(1)}" y1="{y}" y2="{y}" stroke="#eee"/>')
            for i, b in enumerate(budgets):
                if b in rows:
                    out.append(f'<circle cx="{x(rows[b]["pass_at_1"]):.1f}" cy="{y}" r="4" '
                               f'fill="{colors[i % len(colors)]}" fill-opacity="0.85"/>')
        for i, b in enumerate(budgets):
            if b in default:
                xv = x(default[b]["pass_at_1"])
                out.append(f'<line x1="{xv:.1f}" x2="{xv:.1f}" y1="{y0}" y2="{y + 6}" '
                           f'stroke="{colors[i % len(colors)]}" stroke-dasharray="3,3"/>')
        y += row_h
    for t in range(0, 11, 2):
        xv = x(t / 10)
        out.append(f'<line x1="{xv}" x2="{xv}" y1="{top}" y2="{y}" stroke="#ccc" stroke-width="0.5"/>'
                   f'<text x="{xv}" y="{y + 14}" text-anchor="middle">{t / 10:.1f}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="the directory tools/tiny/ablate.sh wrote (runs/tiny/ablate)")
    ap.add_argument("--plot", help="also write the dot plot to this SVG file")
    ap.add_argument("--problems", default="200 held-out problems",
                    help="what the runs evaluated, for the plot's title")
    a = ap.parse_args()
    data = load(a.root)
    if not data:
        raise SystemExit(f"{a.root}: no ablation runs (run tools/tiny/ablate.sh)")
    print(tables(data))
    if a.plot:
        plot(data, a.plot, a.problems)


if __name__ == "__main__":
    main()
