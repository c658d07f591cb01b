#!/usr/bin/env python3
"""How recent the entries a method keeps are, from an `rkv generate --trace` file (standard
library). For every compression of layer 0: the share of the last W positions (16, 32, 64) that
each KV head kept; then, at the last compression, the ages of the kept generated entries.

    build/rkv generate -m models/rkv-tiny-reasoner --chat -f problem.txt --temp 0 -n 600 \\
        --kv-method triattention --kv-budget 224 --kv-buffer 16 --trace trace.jsonl
    python3 tools/tiny/recency.py trace.jsonl
"""
import json
import statistics
import sys


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: recency.py TRACE.jsonl")
    events = [json.loads(line) for line in open(sys.argv[1])]
    header = next(e for e in events if "prompt_tokens" in e)
    prompt = header["prompt_tokens"]
    comps = [e for e in events if e.get("type") == "compression" and e["layer"] == 0]
    if not comps:
        sys.exit("no compression in the trace")
    print(f"method {header['method']}, prompt {prompt} tokens, "
          f"{len(comps)} compressions of layer 0 (one line per KV head)")
    for w in (16, 32, 64):
        shares = [sum(p in set(e["kept_positions"]) for p in range(e["step"] - w, e["step"])) / w
                  for e in comps]
        print(f"share of the last {w} positions kept: mean {statistics.mean(shares):.2f}, "
              f"min {min(shares):.2f}")
    last = comps[-1]
    gen = sorted(p for p in last["kept_positions"] if p >= prompt)
    ages = [last["step"] - gen[int(q * (len(gen) - 1))] for q in (1, 0.75, 0.5, 0.25, 0)]
    print(f"last compression (step {last['step']}, head {last['head']}): {len(gen)} generated "
          f"entries kept; their ages (min, quartiles, max): {ages}")


if __name__ == "__main__":
    main()
