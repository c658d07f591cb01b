#!/usr/bin/env python3
"""Records tests/data/method_outputs.json: the greedy token ids every compression method
generates on the two shipped tiny models, at three budgets each, through `rkv generate`.

tests/test_method_outputs.cpp (suite MethodOutputs) re-runs every entry through rkv::Engine
(alone, and all of a model's entries batched in one engine) and through `rkv generate`, and
requires the same ids. Re-record only when a change of output is intended, and say why in the
commit:

    cmake --build --preset release --target rkv
    python3 scripts/record_method_outputs.py            # writes tests/data/method_outputs.json

Standard library only. RKV_ARG_* variables are removed from the environment of the runs, so
that no flag comes from the environment.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The plan: per model, its held-out set, the problems (the first ones of the set), the budgets
# (each compresses during the ~460-515-token chain) and the buffer.
MODELS = [
    {
        "key": "reasoner",
        "model": "models/rkv-tiny-reasoner",
        "dataset": "data/chains_test.jsonl",
        "problems": 2,
        "budgets": [64, 128, 256],
        # triattention keeps the prompt (71-77 tokens) under its budget: 64 cannot hold it.
        "method_budgets": {"triattention": [128, 192, 256]},
        "buffer": 32,
    },
    {
        "key": "redundant",
        "model": "models/rkv-tiny-redundant",
        "dataset": "data/redundant_test.jsonl",
        "problems": 2,
        "budgets": [96, 192, 320],
        "buffer": 16,
    },
]
METHODS = ["streamingllm", "h2o", "snapkv", "rkv", "gkv", "skipkv", "random", "triattention"]
MAX_NEW_TOKENS = 600  # past every full-cache chain (450-508 tokens); runs that loop stop here

# A few settings beyond method x budget, on the first model's first problem at its middle
# budget: SkipKV with the shipped steering vector (added inside the forward pass), and R-KV and
# H2O on a bf16 cache (compression reads keys converted to float32; H2O accumulates attention).
# (No newline-trigger entry: `rkv generate --prompt-ids --print-ids` loads no tokenizer for it
# at efda74c and refuses the trigger.)
VARIANTS = [
    {"tag": "steering", "method": "skipkv", "params": {},
     "steering": "models/rkv-tiny-reasoner/steering.safetensors"},
    {"tag": "bf16", "method": "rkv", "params": {}, "kv_dtype": "bf16"},
    {"tag": "bf16", "method": "h2o", "params": {}, "kv_dtype": "bf16"},
]

STDERR_LINE = re.compile(
    r"generated tokens: (\d+),.*stop: (\w+),.*?(\d+) entries per head, (\w+), (\d+) compressions")


def run(cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKV_ARG_")}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return p.stdout, p.stderr


def problems(dataset, n):
    out = []
    with open(ROOT / dataset) as f:
        for line in f:
            if len(out) == n:
                break
            out.append(json.loads(line))
    return out


def cli_args(method, params, kv_dtype, steering):
    # Flags of `rkv generate` beyond -m and --prompt-ids; parameter names are
    # compression_param_table()'s, whose flags are --kv-<name>.
    args = ["--print-ids", "--temp", "0", "-n", str(MAX_NEW_TOKENS), "--kv-method", method]
    for name, value in params.items():
        args += ["--kv-" + name.replace("_", "-"), str(value)]
    if kv_dtype:
        args += ["--kv-dtype", kv_dtype]
    if steering:
        args += ["--steering", steering]
    return args


def record(rkv, m, problem, prompt_ids, method, params, tag=None, kv_dtype=None, steering=None):
    args = cli_args(method, params, kv_dtype, steering)
    out, err = run([rkv, "generate", "-m", m["model"],
                    "--prompt-ids", ",".join(map(str, prompt_ids))] + args)
    ids = json.loads(out.strip().splitlines()[-1])
    stats = STDERR_LINE.search(err)
    if not stats:
        sys.exit(f"no statistics line in the output of {method}:\n{err}")
    generated, stop, capacity, method_seen, compressions = stats.groups()
    assert int(generated) == len(ids) and method_seen == method
    name = f"{m['key']}/{problem['id']}/{method}"
    if "budget" in params:
        name += f"/b{params['budget']}"
    if tag:
        name += "/" + tag
    entry = {
        "name": name,
        "model": m["model"],
        "dataset": m["dataset"],
        "problem_id": problem["id"],
        "prompt_ids": prompt_ids,
        "method": method,
        "params": {k: str(v) for k, v in params.items()},
        "kv_dtype": kv_dtype,
        "steering": steering,
        "max_new_tokens": MAX_NEW_TOKENS,
        "temperature": 0,
        "cli": args,
        "stop_reason": stop,
        "cache_capacity": int(capacity),
        "compressions": int(compressions),
        "ids": ids,
    }
    print(f"{name}: {len(ids)} tokens, {stop}, {compressions} compressions", file=sys.stderr)
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rkv", default=str(ROOT / "build/rkv"), help="the rkv program")
    ap.add_argument("--out", default=str(ROOT / "tests/data/method_outputs.json"))
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "src",
                            "include", "tools"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    entries = []
    for m in MODELS:
        for i, problem in enumerate(problems(m["dataset"], m["problems"])):
            # The prompt as `rkv eval --preset chains|redundant` builds it: the problem text
            # alone, through the model's chat template (which adds nothing) and its tokenizer.
            out, _ = run([a.rkv, "tokenize", "--tokenizer", m["model"], "--text",
                          problem["problem"]])
            prompt_ids = json.loads(out)
            entries.append(record(a.rkv, m, problem, prompt_ids, "fullkv", {}))
            for method in METHODS:
                for budget in m.get("method_budgets", {}).get(method, m["budgets"]):
                    entries.append(record(a.rkv, m, problem, prompt_ids, method,
                                          {"budget": budget, "buffer": m["buffer"]}))
            if m is MODELS[0] and i == 0:
                budget = m["budgets"][1]
                for v in VARIANTS:
                    params = {"budget": budget, "buffer": m["buffer"], **v["params"]}
                    entries.append(record(a.rkv, m, problem, prompt_ids, v["method"], params,
                                          v["tag"], v.get("kv_dtype"), v.get("steering")))
    doc = {
        "description": "Greedy token ids of every KV compression method on the shipped tiny "
                       "models, pinned by tests/test_method_outputs.cpp (suite MethodOutputs). "
                       "Each entry is one `rkv generate -m MODEL --prompt-ids PROMPT_IDS` run "
                       "with the flags in `cli`; `params` are CompressionParams::set names over "
                       "the method's defaults; `compressions` and `stop_reason` are what that "
                       "run reported.",
        "recorded_at": commit + (" (with uncommitted changes in src/include/tools)" if dirty
                                 else ""),
        "recorded_with": "python3 scripts/record_method_outputs.py",
        "entries": entries,
    }
    # One entry per line: diffs of a re-recording stay readable.
    with open(a.out, "w") as f:
        f.write("{\n")
        for key in ("description", "recorded_at", "recorded_with"):
            f.write(f" {json.dumps(key)}: {json.dumps(doc[key])},\n")
        f.write(' "entries": [\n')
        f.write(",\n".join("  " + json.dumps(e, separators=(",", ":")) for e in entries))
        f.write("\n ]\n}\n")
    print(f"wrote {len(entries)} entries to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
