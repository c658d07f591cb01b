#!/usr/bin/env python3
"""Where a forward pass's time goes on the GPU, from an ncu CSV of kernel durations.

    ncu --metrics gpu__time_duration.sum --csv ... rkv bench-decode ... > ncu.csv
    python3 tools/gpu/ncu_summary.py ncu.csv

Each pass begins with the embedding kernel, so the launches between two embeddings are one pass.
Prints every pass's kernel count and summed duration, then the last whole pass's kernels grouped
by name and grid, largest first. ncu runs the kernels one at a time, so the sum leaves out the
gaps between launches and any overlap of one kernel with the next.
"""
import csv
import io
import re
import sys


def launches(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        sys.exit(f"ncu_summary: {path} has no CSV table (did ncu run?)")
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    out = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[header:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row["Metric Unit"]
        if unit not in scale:
            sys.exit(f"ncu_summary: unknown unit {unit!r}")
        value = float(row["Metric Value"].replace(",", "")) * scale[unit]
        out.append((row["Kernel Name"], row["Grid Size"], value))
    return out


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"rkv::cuda::\(anonymous namespace\)::|rkv::<unnamed>::", "", name)
    return re.sub(r"\(.*", "", name)[:64]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    seq = launches(sys.argv[1])
    starts = [i for i, (name, _, _) in enumerate(seq) if "embed_kernel" in name]
    if len(starts) < 2:
        sys.exit(f"ncu_summary: fewer than two passes in {len(seq)} launches")
    for a, b in zip(starts, starts[1:]):
        print(f"pass at launch {a}: {b - a} kernels, {sum(v for _, _, v in seq[a:b]):.1f} us")
    a, b = starts[-2], starts[-1]
    groups = {}
    for name, grid, us in seq[a:b]:
        key = f"{short(name)} {grid}"
        count, total = groups.get(key, (0, 0.0))
        groups[key] = (count + 1, total + us)
    total = sum(t for _, t in groups.values())
    print(f"\nthe last whole pass: {b - a} kernels, {total:.1f} us")
    print("| kernel, grid | launches | us | us each | share |")
    print("|---|---:|---:|---:|---:|")
    for key, (count, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {key} | {count} | {t:.1f} | {t / count:.2f} | {100 * t / total:.1f}% |")


if __name__ == "__main__":
    main()
