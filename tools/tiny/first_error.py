#!/usr/bin/env python3
"""Where each wrong chain of an `rkv eval` run first leaves the reference chain (standard library).

    python3 tools/tiny/first_error.py runs/tiny-redundant/greedy/samples.jsonl [--family redundant]

For every wrong sample of a compressed method, the first line of its output that differs from
the chain task.py writes for that problem, classified by what the reference line needed:
statement (its statement tokens differ: the statement copied from the prompt was lost), value
(the statement is right, a value read or the arithmetic is wrong), redundant (a line inside a
`verify` thought), structure (a thought boundary: `verify`, `ok` or a blank line), ans (the
question's line). Prints a Markdown table by method and budget. The held-out set must be task.py's
seed 7 (data/<family>_test.jsonl).
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402

ORDER = ["random", "streamingllm", "h2o", "snapkv", "rkv", "gkv", "skipkv"]
KINDS = ["statement", "value", "redundant", "structure", "ans", "other"]


def first_error(output: str, reference: str) -> str:
    got, want = output.split("\n"), reference.split("\n")
    for j, (x, y) in enumerate(zip(got, want)):
        if x == y:
            continue
        if y.startswith(task.ANSWER_NAME + "="):
            return "ans"
        if j > 0 and want[j - 1] == "verify":
            return "redundant"
        if y in ("verify", "ok", ""):
            return "structure"
        return "statement" if x.split(" ")[:2] != y.split(" ")[:2] else "value"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", help="an eval run's samples.jsonl")
    ap.add_argument("--family", default="redundant", choices=sorted(task.FAMILIES))
    args = ap.parse_args()
    refs = task.problems(7, 200, args.family)
    counts = collections.defaultdict(collections.Counter)
    with open(args.samples) as f:
        for line in f:
            r = json.loads(line)
            if r["method"] == "fullkv" or r["correct"]:
                continue
            kind = first_error(r["output"], refs[r["example_index"]]["solution"])
            counts[(r["method"], r["budget"])][kind] += 1
    budgets = sorted({b for _, b in counts})
    methods = sorted({m for m, _ in counts},
                     key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER))
    print("| method | budget | wrong | " + " | ".join(KINDS) + " |")
    print("|---|---:|---:|" + "---:|" * len(KINDS))
    for m in methods:
        for b in budgets:
            c = counts[(m, b)]
            print(f"| {m} | {b} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in KINDS)
                  + " |")


if __name__ == "__main__":
    main()
