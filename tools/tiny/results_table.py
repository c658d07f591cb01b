#!/usr/bin/env python3
"""Prints the Markdown tables of docs/RESULTS.md from `rkv eval` summaries (standard library).

    python3 tools/tiny/results_table.py runs/tiny/greedy runs/tiny/sampled

Each argument is an eval output directory (its summary.json). For every run: pass@1 by method
(rows) and budget (columns), then the mean generated length in tokens the same way. fullkv has
no budget: its one value stands in every column.
"""
import json
import os
import sys

ORDER = ["fullkv", "random", "streamingllm", "h2o", "snapkv", "rkv", "gkv", "skipkv",
         "triattention"]


def load(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def table(summary: dict, key: str, fmt) -> str:
    rows = summary["results"]
    budgets = sorted({r["budget"] for r in rows if r["budget"] is not None})
    fullkv = next((r for r in rows if r["method"] == "fullkv"), None)
    ref = fullkv["mean_generated_tokens"] if fullkv else None
    head = "| method | " + " | ".join(
        f"{b}" + (f" ({100 * b / ref:.0f}%)" if ref else "") for b in budgets) + " |"
    lines = [head, "|---|" + "---:|" * len(budgets)]
    methods = sorted({r["method"] for r in rows},
                     key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER))
    for m in methods:
        cells = []
        for b in budgets:
            r = next((r for r in rows if r["method"] == m and (r["budget"] == b or m == "fullkv")),
                     None)
            cells.append(fmt(r[key]) if r else "")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: results_table.py RUN_DIR [RUN_DIR ...]")
    for run_dir in sys.argv[1:]:
        s = load(run_dir)
        print(f"### {run_dir}: {s['problems']} problems x {s['samples_per_problem']} samples\n")
        print("pass@1 (budget in tokens, and as a share of the mean fullkv length):\n")
        print(table(s, "pass_at_1", lambda v: f"{v:.3f}"))
        print("\nmean generated tokens:\n")
        print(table(s, "mean_generated_tokens", lambda v: f"{v:.0f}"))
        print()


if __name__ == "__main__":
    main()
