#!/usr/bin/env python3
"""The attention an evicting KV cache leaves, rebuilt from an rkv trace (`rkv generate --trace`,
`rkv eval --trace-dir`; docs/USAGE.md, "Attention masks from a trace") as boolean masks for a
masked forward pass (train.py's Model.forward(ids, masks)).

A trace holds the sequence's token ids and, for every compression and (layer, KV head), the
positions kept and `first_reader`, the first position whose attention read the compacted cache.
A position q attends, in one (layer, KV head), to every earlier position and itself until that
head's first compression with first_reader <= q; from then on to the kept positions of the last
such compression plus the positions from its `step` up to q (those appended since).

    python3 tools/tiny/masks.py TRACE.jsonl      # prints a summary: how much each head sees
"""
import json
import sys

import torch


class Trace:
    """One sequence's trace: header, ids (prompt then generated), prompt length, compressions
    (dicts with layer, head, step, first_reader, kept_positions), finish reason."""

    def __init__(self, path: str):
        self.header, self.ids, self.events, self.end = None, [], [], None
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                kind = r.get("type")
                if kind == "header":
                    if r.get("format") != "rkv-trace" or r.get("version") != 2:
                        raise ValueError(f"{path}: not an rkv-trace version 2")
                    self.header = r
                elif kind == "tokens":
                    if r["start"] != len(self.ids):
                        raise ValueError(f"{path}: tokens are not contiguous at {r['start']}")
                    self.ids.extend(r["ids"])
                elif kind == "compression":
                    if "first_reader" not in r:
                        raise ValueError(f"{path}: a compression without first_reader (a trace "
                                         "written before 2026-11-27 cannot give masks)")
                    self.events.append(r)
                elif kind == "end":
                    self.end = r
        if self.header is None:
            raise ValueError(f"{path}: no header line")
        self.prompt_tokens = self.header["prompt_tokens"]
        self.layers = self.header["layers"]
        self.kv_heads = self.header["kv_heads"]

    @property
    def finish_reason(self):
        return None if self.end is None else self.end["finish_reason"]


def visibility(trace: Trace, length: int = None) -> torch.Tensor:
    """Boolean [layers, kv_heads, length, length]: [l, h, q, k] is True where position q
    attended to position k in layer l, KV head h (length: the trace's tokens by default)."""
    t = len(trace.ids) if length is None else length
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    mask = causal.repeat(trace.layers, trace.kv_heads, 1, 1)
    for e in sorted(trace.events, key=lambda e: e["first_reader"]):  # stable: trace order kept
        q0 = e["first_reader"]
        if q0 >= t:
            continue
        rows = mask[e["layer"], e["head"], q0:]
        rows.zero_()
        kept = torch.tensor(e["kept_positions"], dtype=torch.long)
        rows[:, kept] = True
        step = e["step"]
        # the positions appended since the compression, each row up to itself
        rows[:, step:] |= causal[q0:, step:]
    return mask


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tr = Trace(sys.argv[1])
    m = visibility(tr)
    t = len(tr.ids)
    print(f"{t} tokens ({tr.prompt_tokens} prompt), {len(tr.events)} head compressions, "
          f"finish: {tr.finish_reason}")
    for l in range(tr.layers):
        for h in range(tr.kv_heads):
            seen = m[l, h].sum(1).float()
            print(f"layer {l} head {h}: last position sees {int(seen[-1])} of {t}; "
                  f"mean {float(seen.mean()):.1f}")


if __name__ == "__main__":
    main()
