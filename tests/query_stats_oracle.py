#!/usr/bin/env python3
"""Independent oracle of layer 0's TriAttention query statistics (tests/test_query_stats.cpp).

Reads a Hugging Face checkpoint directory (config.json, model.safetensors with float32 or bf16
tensors) and, for the given token ids, computes layer 0's pre-RoPE queries straight from the
weights, in float64 and without rkv: embedding -> RMSNorm (input_layernorm) -> q_proj (+ bias
when the checkpoint has one) -> per-head RMSNorm q_norm (when it has one). At layer 0 a token's
pre-RoPE query depends on the token alone, so no attention and no RoPE are needed: this checks
that rkv, which reads post-RoPE queries out of its forward pass and un-rotates them, gets back
exactly these. Prints the moments of spec 2.1 as JSON: mean_re, mean_im, abs_mean, each
[q_heads][head_dim / 2], with pair f = (q[f], q[f + head_dim / 2]).

Standard library only, so the test needs nothing but python3.

    python3 tests/query_stats_oracle.py --model DIR --tokens 1,2,3
"""
import argparse
import array
import json
import math
import operator
import os
import struct
import sys


def read_safetensors(path, names):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            if name not in header:
                continue
            t = header[name]
            begin, end = t["data_offsets"]
            f.seek(base + begin)
            raw = f.read(end - begin)
            if t["dtype"] == "F32":
                values = array.array("f")
                values.frombytes(raw)
            elif t["dtype"] == "BF16":
                halves = array.array("H")
                halves.frombytes(raw)
                values = array.array("f")
                values.frombytes(b"".join(struct.pack("<I", h << 16) for h in halves))
            else:
                sys.exit(f"{path}: tensor {name} is {t['dtype']}; the oracle reads F32 and BF16")
            if sys.byteorder != "little":
                values.byteswap()
            out[name] = (list(values), t["shape"])
    return out


def rms_norm(x, w, eps):
    inv = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [wi * (xi * inv) for xi, wi in zip(x, w)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    eps = cfg["rms_norm_eps"]
    p = "model.layers.0."
    names = ["model.embed_tokens.weight", p + "input_layernorm.weight",
             p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias",
             p + "self_attn.q_norm.weight"]
    t = read_safetensors(os.path.join(args.model, "model.safetensors"), names)
    emb = t["model.embed_tokens.weight"][0]
    norm_w = t[p + "input_layernorm.weight"][0]
    wq = t[p + "self_attn.q_proj.weight"][0]
    bias = t.get(p + "self_attn.q_proj.bias", (None,))[0]
    q_norm = t.get(p + "self_attn.q_norm.weight", (None,))[0]
    rows = [wq[r * hidden:(r + 1) * hidden] for r in range(heads * head_dim)]

    tokens = [int(x) for x in args.tokens.split(",") if x]
    F = head_dim // 2
    re = [[0.0] * F for _ in range(heads)]
    im = [[0.0] * F for _ in range(heads)]
    ab = [[0.0] * F for _ in range(heads)]
    cache = {}
    for tok in tokens:
        if tok not in cache:
            x = rms_norm(emb[tok * hidden:(tok + 1) * hidden], norm_w, eps)
            q = [sum(map(operator.mul, row, x)) for row in rows]
            if bias is not None:
                q = [a + b for a, b in zip(q, bias)]
            per_head = [q[h * head_dim:(h + 1) * head_dim] for h in range(heads)]
            if q_norm is not None:
                per_head = [rms_norm(qh, q_norm, eps) for qh in per_head]
            cache[tok] = per_head
        for h, qh in enumerate(cache[tok]):
            for f in range(F):
                a, b = qh[f], qh[f + F]
                re[h][f] += a
                im[h][f] += b
                ab[h][f] += math.hypot(a, b)
    n = len(tokens)
    scale = lambda m: [[v / n for v in row] for row in m]
    json.dump({"mean_re": scale(re), "mean_im": scale(im), "abs_mean": scale(ab),
               "q_norm": q_norm is not None, "bias": bias is not None}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
