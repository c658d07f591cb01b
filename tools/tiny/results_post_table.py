#!/usr/bin/env python3
"""Prints the post-training tables of docs/RESULTS.md (standard library): for each method, greedy
pass@1 by budget (columns) for every model (rows), from `rkv eval` summaries, the first run being
the base model. The full-cache accuracy of each model is its own row.

    python3 tools/tiny/results_post_table.py runs/post-results/rkv-tiny-reasoner \
        runs/post-results/rkv-tiny-reasoner-gkv96 ...
"""
import json
import os
import sys

ORDER = ["random", "streamingllm", "h2o", "snapkv", "rkv", "gkv", "skipkv", "triattention"]


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = []
    for d in sys.argv[1:]:
        with open(os.path.join(d, "summary.json")) as f:
            runs.append((os.path.basename(d.rstrip("/")), json.load(f)["results"]))
    budgets = sorted({r["budget"] for _, rows in runs for r in rows if r["budget"] is not None})
    print("full cache:\n")
    print("| model | pass@1 | mean generated tokens |\n|---|---:|---:|")
    for name, rows in runs:
        r = next((r for r in rows if r["method"] == "fullkv"), None)
        if r:
            print(f"| {name} | {r['pass_at_1']:.3f} | {r['mean_generated_tokens']:.0f} |")
    for method in ORDER:
        if not any(r["method"] == method for _, rows in runs for r in rows):
            continue
        print(f"\n{method}:\n")
        print("| model | " + " | ".join(str(b) for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for name, rows in runs:
            cells = []
            for b in budgets:
                r = next((r for r in rows if r["method"] == method and r["budget"] == b), None)
                cells.append(f"{r['pass_at_1']:.3f}" if r else "")
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
