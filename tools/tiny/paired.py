#!/usr/bin/env python3
"""Paired comparison of two greedy `rkv eval` runs on the same problems (docs/RESULTS.md, "Paired").

Usage: python3 tools/tiny/paired.py RUN_A/samples.jsonl RUN_B/samples.jsonl

Per (method, budget): pass@1 of each run, B - A in points, the problems only one run solves, and
McNemar's exact two-sided p-value on those; then the largest move."""
import json, sys, math
from collections import defaultdict

def load(path):
    out = defaultdict(dict)
    for line in open(path):
        r = json.loads(line)
        out[(r["method"], r["budget"])][r["example_index"]] = bool(r["correct"])
    return out

def mcnemar(b, c):
    n = b + c
    if n == 0: return 1.0
    k = min(b, c)
    p = sum(math.comb(n, i) for i in range(0, k + 1)) / 2 ** n
    return min(1.0, 2 * p)

a, b = load(sys.argv[1]), load(sys.argv[2])
order = ["fullkv", "random", "streamingllm", "h2o", "snapkv", "rkv", "gkv", "skipkv"]
keys = sorted(set(a) & set(b), key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1]))
print("| method | budget | A | B | B - A (points) | solved by A only | by B only | McNemar p |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
worst = 0
for k in keys:
    ids = sorted(set(a[k]) & set(b[k]))
    pa = sum(a[k][i] for i in ids) / len(ids); pb = sum(b[k][i] for i in ids) / len(ids)
    bo = sum(a[k][i] and not b[k][i] for i in ids); co = sum(b[k][i] and not a[k][i] for i in ids)
    d = 100 * (pb - pa); worst = max(worst, abs(d))
    print(f"| {k[0]} | {k[1]} | {pa:.3f} | {pb:.3f} | {d:+.1f} | {bo} | {co} | {mcnemar(bo, co):.2f} |")
print(f"\nlargest move: {worst:.1f} points over {len(keys)} entries")
