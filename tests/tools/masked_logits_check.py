#!/usr/bin/env python3
"""G-KV post-training's masks checked against the engine (issue 38): rkv generates with KV
compression, writing a trace (`--trace`) and its logits (`--logits-out`); the training code's
masked forward pass (tools/tiny/train.py's Model with tools/tiny/masks.py's masks, PyTorch,
float32) rebuilds every generated position's logits from the token ids and the trace alone, and
they must match rkv's. Also replays a full-cache sample under compression (`--replay-ids`) and
checks that: rkv's replayed logits match the masked pass on the replay's trace. For gkv, the
retention loss's torch copy of gkv's score (tools/tiny/retention.py), computed from the same pass's
queries and keys, must rank every candidate rkv kept at each recorded compression in its top
budget - window.

A control shows the masks matter: the same positions with plain causal attention must be far
off once the first compression has evicted anything.

    /usr/bin/python3 tests/tools/masked_logits_check.py --rkv build/rkv \
        --model models/rkv-tiny-reasoner --dataset data/chains_test.jsonl --problems 2

Exits 1 on a mismatch, naming the method, the problem and the position.
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "tiny"))
try:
    import numpy as np
    import torch
except ImportError as e:
    sys.exit(f"masked_logits_check: {e}: install Debian's python3-torch and python3-numpy "
             "(scripts/setup.sh does)")
import masks  # noqa: E402
from post_train import run  # noqa: E402
import retention  # noqa: E402
import train  # noqa: E402

# float32 on both sides, different summation orders: rkv's logits of an exported checkpoint match
# PyTorch's to about 1e-6 of their scale with a full cache (tools/tiny/README.md).
TOLERANCE = 1e-5
# the control: causal attention instead of the masks must move some logit by more than this
CONTROL_MIN = 0.5


def compare(model, trace_path, logits_path, what, control=True, gkv_budget=None):
    tr = masks.Trace(trace_path)
    got = np.load(logits_path)
    P = tr.prompt_tokens
    # rows: positions P-1, P, ...: each row's position has its token in the trace
    n = min(got.shape[0], len(tr.ids) - P + 1)
    t = P - 1 + n
    ids = torch.tensor([tr.ids[:t]])
    mask = masks.visibility(tr, t)
    with torch.no_grad():
        logits, qk = model.forward_with_qk(ids, [mask[l][None] for l in range(tr.layers)])
        ours = logits[0, P - 1:t].numpy()
        agreement = None
        if gkv_budget is not None:
            r = retention.sample_loss(qk, 0, mask, tr.events, tr.ids[:t],
                                      retention.Settings(gkv_budget),
                                      model.c.heads // model.c.kv_heads)
            agreement = (r["agreed"], r["kept"])
        causal = model(ids)[0, P - 1:t].numpy() if control else None
    diff = np.abs(ours - got[:n]).max(axis=1)
    scale = max(1.0, float(np.abs(got[:n]).max()))
    worst = int(diff.argmax())
    ok = diff[worst] <= TOLERANCE * scale
    msg = (f"{what}: {n} positions, {len(tr.events)} head compressions, largest difference "
           f"{diff[worst]:.2e} at position {P - 1 + worst} (logits up to {scale:.1f})")
    if control:
        first = min((e["first_reader"] for e in tr.events), default=t)
        if first >= t:
            ok = False
            msg += "; no compression happened, so nothing was checked"
        else:
            off = float(np.abs(causal - got[:n]).max())
            msg += f"; causal attention instead: off by {off:.2f}"
            if off < CONTROL_MIN:
                ok = False
                msg += f" (the control needs > {CONTROL_MIN}: the masks did not matter)"
    if agreement is not None:
        msg += (f"; gkv's score in torch keeps {agreement[0]} of rkv's {agreement[1]} kept "
                "candidates")
        if agreement[1] == 0 or agreement[0] != agreement[1]:
            ok = False
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    return ok, tr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rkv", required=True, help="the rkv binary")
    ap.add_argument("--model", required=True, help="a tiny model directory (float32 Llama)")
    ap.add_argument("--dataset", required=True, help="jsonl with a `problem` field")
    ap.add_argument("--problems", type=int, default=2, help="problems to check (default 2)")
    ap.add_argument("--methods", default="gkv:96,rkv:160,h2o:96,snapkv:96",
                    help="method:budget pairs (default gkv:96,rkv:160,h2o:96,snapkv:96)")
    ap.add_argument("--buffer", type=int, default=16, help="--kv-buffer (default 16)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = train.from_exported(args.model)
    model.eval()
    with open(args.dataset) as f:
        problems = [json.loads(line)["problem"] for line in f][: args.problems]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(problems):
            base = [args.rkv, "generate", "-m", args.model, "-p", text, "--print-ids",
                    "-n", "1024", "--kv-dtype", "f32"]
            # a full-cache sample, then every method on it and on its own greedy output
            full_ids = json.loads(run(base + ["--temp", "1", "--top-p", "1", "--seed",
                                              str(100 + i)], "a full-cache sample")
                                  .strip().splitlines()[-1])
            for spec in args.methods.split(","):
                method, budget = spec.split(":")
                kv = ["--kv-method", method, "--kv-budget", budget, "--kv-buffer",
                      str(args.buffer)]
                trace, logits = os.path.join(tmp, "t.jsonl"), os.path.join(tmp, "l.npy")
                run(base + kv + ["--temp", "0", "--trace", trace, "--logits-out", logits],
                    "a compressed generation")
                gkv = int(budget) if method == "gkv" else None
                good, _ = compare(model, trace, logits, f"problem {i} {method} {budget}",
                                  gkv_budget=gkv)
                ok = ok and good
                run(base + kv + ["--replay-ids", ",".join(map(str, full_ids)), "--trace", trace,
                                 "--logits-out", logits], "a replay")
                good, tr = compare(model, trace, logits,
                                   f"problem {i} {method} {budget}, replay of a full-cache "
                                   "sample", gkv_budget=gkv)
                if tr.ids[tr.prompt_tokens:] != full_ids[: len(tr.ids) - tr.prompt_tokens]:
                    good = False
                    print("FAIL the replay's trace does not hold the replayed ids", flush=True)
                ok = ok and good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
