"""rkv against llama.cpp beyond the shipped goldens: the four architectures of
../shared/golden/arch at other shapes, seeds and a 13-token prompt (files written by
write_gguf.py), and rkv make-model's files in every weight type rkv reads. For each file: the
prompt in one pass, then 31 greedy steps one token at a time, f32 KV cache, as the goldens.

Usage (scripts/llamacpp-crosscheck.sh runs it): crosscheck.py RKV DUMP WORKDIR [--quick]
Prints one markdown table. Exits 1 if a float32 file misses the goldens' bar (32 equal ids and
logits of steps 0-3 within 1e-3), or anything fails to run. Quantized files are reported, not
judged: an 8-bit activation rounding that lands the other side of a half under a 1e-7 float
difference moves their logits by up to about 0.5 (a "flip").
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

import numpy as np

import gguf
from write_gguf import write

TESTS_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "tools")
sys.path.insert(0, TESTS_TOOLS)
from shared_dir import shared_dir  # noqa: E402

P12 = [17, 203, 5, 88, 311, 42, 150, 9, 260, 71, 133, 290]
P13 = [3] + P12

Q3 = dict(n_embd=64, layers=3, vocab=384, heads=4, kv_heads=2, head_dim=32, rope_base=1e6,
          eps=1e-6, experts=8, used=2, eff=32)
GO = dict(n_embd=64, layers=4, vocab=448, heads=8, kv_heads=2, head_dim=16, rope_base=150000.0,
          eps=1e-5, experts=8, used=4, eff=64, window=8, yarn_factor=32.0, yarn_orig=4096,
          ctx=131072, ff=64)
Q35 = dict(n_embd=64, layers=4, vocab=320, heads=4, kv_heads=2, head_dim=64, rope_base=1e7,
           eps=1e-6, ff=128, rope_dims=16, sections=[3, 3, 2, 0], conv=4, state=16, groups=2,
           dt_rank=4, inner=64, interval=4, ctx=262144)
Q35M = dict(Q35, experts=8, used=2, eff=32, shared_ff=48, ff=96)
MX = gguf.GGMLQuantizationType.MXFP4

# name, architecture, shape, seed, prompt, expert type
VARIANTS = [
    ("qwen3moe golden shape, seed 7", "qwen3moe", Q3, 7, P13, None),
    ("qwen3moe 96 wide, 8/2 heads of 64, 16 experts top 4", "qwen3moe",
     dict(Q3, n_embd=96, layers=4, heads=8, head_dim=64, experts=16, used=4, eff=48, vocab=500),
     11, P13, None),
    ("qwen3moe no GQA, heads of 16, 6 experts top 3", "qwen3moe",
     dict(Q3, kv_heads=4, head_dim=16, experts=6, used=3), 12, P13, None),
    ("qwen3moe 6/2 heads of 128, 4 experts top 1", "qwen3moe",
     dict(Q3, heads=6, head_dim=128, experts=4, used=1), 13, P13, None),
    ("gpt-oss golden shape, seed 21", "gpt-oss", GO, 21, P13, None),
    ("gpt-oss window 4, 5 layers", "gpt-oss", dict(GO, window=4, layers=5), 22, P13, None),
    ("gpt-oss window 16, no GQA, heads of 32", "gpt-oss",
     dict(GO, window=16, heads=4, kv_heads=4, head_dim=32), 23, P13, None),
    ("gpt-oss 128 wide, 16/4 heads of 64, YaRN 8 of 2048, base 1e4", "gpt-oss",
     dict(GO, n_embd=128, heads=16, kv_heads=4, head_dim=64, experts=16, used=2, eff=32,
          yarn_factor=8.0, yarn_orig=2048, rope_base=10000.0), 24, P13, None),
    ("gpt-oss golden shape, MXFP4 experts, seed 26", "gpt-oss", GO, 26, P13, MX),
    ("gpt-oss 128 wide, MXFP4 experts", "gpt-oss",
     dict(GO, n_embd=128, heads=16, kv_heads=4, head_dim=64, experts=16, used=2, eff=64,
          yarn_factor=8.0, yarn_orig=2048, rope_base=10000.0), 27, P13, MX),
    ("qwen35 golden shape, seed 31", "qwen35", Q35, 31, P13, None),
    ("qwen35 full attention every 2nd of 6", "qwen35", dict(Q35, interval=2, layers=6), 32, P13,
     None),
    ("qwen35 every 3rd of 6, conv 3", "qwen35", dict(Q35, interval=3, layers=6, conv=3), 33, P13,
     None),
    ("qwen35 1 k-head of 32, 2 v-heads", "qwen35",
     dict(Q35, groups=1, dt_rank=2, state=32, inner=64), 34, P13, None),
    ("qwen35 4 k-heads, 8 v-heads", "qwen35", dict(Q35, groups=4, dt_rank=8, inner=128), 35, P13,
     None),
    ("qwen35 heads of 128, rope 32 dims", "qwen35",
     dict(Q35, n_embd=128, heads=8, head_dim=128, rope_dims=32, sections=[6, 5, 5, 0]), 37, P13,
     None),
    ("qwen35 6/3 heads of 32, rope 8 dims", "qwen35",
     dict(Q35, heads=6, kv_heads=3, head_dim=32, rope_dims=8, sections=[2, 1, 1, 0]), 38, P13,
     None),
    ("qwen35 rope sections 2,2,2,2", "qwen35", dict(Q35, sections=[2, 2, 2, 2]), 39, P13, None),
    ("qwen35 rope on all 64 dims", "qwen35", dict(Q35, rope_dims=64, sections=[11, 11, 10, 0]),
     40, P13, None),
    ("qwen35moe golden shape, seed 41", "qwen35moe", Q35M, 41, P13, None),
    ("qwen35moe 16 experts top 4, every 2nd layer full", "qwen35moe",
     dict(Q35M, experts=16, used=4, eff=24, shared_ff=64, interval=2, groups=1), 42, P13, None),
]

MAKE_SHAPES = ["tiny", "tiny-qwen3", "tiny-llama-256", "tiny-qwen3moe", "tiny-gpt-oss",
               "tiny-qwen35"]
MAKE_TYPES = ["q8_0", "q4_0", "q5_0", "q4_k", "q6_k", "q4_k_m", "mxfp4", "bf16", "f16"]


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd[:3]) + ": " + r.stderr.strip()[-400:])
    return r.stdout


def oracle(dump, path, prompt):
    """llama.cpp on the GGUF file: 32 greedy ids, their margins, the logits of steps 0-3."""
    return json.loads(run([dump, path, ",".join(map(str, prompt)), "32"]))


def compare(rkv, model, prompt, ref, extra=()):
    """rkv on `model` (the GGUF file, or a checkpoint directory of the same model) against
    llama.cpp's `ref` for the same prompt: (equal ids, steps rkv ran, max |logit difference| over
    steps 0-3, llama.cpp's top-2 margin where the first id differs)."""
    ids = ",".join(map(str, prompt))
    out = run([rkv, "generate", "-m", model, "--prompt-ids", ids, "-n", "32", "--temperature", "0",
               "--kv-dtype", "f32", "--print-ids", *extra])
    got = json.loads(out.strip().splitlines()[-1])
    lids = ",".join(map(str, prompt + ref["greedy_ids"][:3]))
    lg = json.loads(run([rkv, "logits", "-m", model, "--ids", lids, "--last", "4", "--kv-dtype",
                         "f32", *extra]))
    dl = float(np.abs(np.array(lg["logits"]) - np.array(ref["logits"])).max())
    # rkv stops at an end-of-sequence id (make-model's files have one); llama.cpp does not.
    n = min(len(got), 32)
    first = next((i for i in range(n) if got[i] != ref["greedy_ids"][i]), None)
    same = n if first is None else first
    margin = ref["margins"][first] if first is not None else None
    return same, n, dl, margin


def main():
    rkv, dump, work = sys.argv[1], sys.argv[2], sys.argv[3]
    quick = "--quick" in sys.argv
    os.makedirs(work, exist_ok=True)
    failed = False
    print("| file | greedy ids equal | max \\|logit - llama.cpp's\\|, steps 0-3 | verdict |")
    print("|---|---|---:|---|")

    def report(name, f32_file, fn):
        nonlocal failed
        try:
            same, n, dl, margin = fn()
        except RuntimeError as e:
            failed = True
            print(f"| {name} | - | - | error: {e} |", flush=True)
            return
        ok = same == n and dl <= 1e-3
        if ok:
            verdict = "match"
        elif f32_file:
            verdict = "**fails the goldens' bar**"
            failed = True
        else:
            verdict = "differs" + (f" (first id differs where llama.cpp's top-2 margin is "
                                   f"{margin:.2g})" if margin is not None else "")
        ids = f"{same}/{n}" + ("" if n == 32 else " (rkv stopped at end of sequence)")
        print(f"| {name} | {ids} | {dl:.2g} | {verdict} |", flush=True)

    references = {}

    def against(model, gguf, prompt, extra=()):
        """A check of rkv on `model` against llama.cpp on `gguf` (run once per file and prompt)."""
        def check():
            key = (gguf, tuple(prompt))
            if key not in references:
                references[key] = oracle(dump, gguf, prompt)
            return compare(rkv, model, prompt, references[key], extra)
        return check

    variants = VARIANTS[::4] if quick else VARIANTS
    for i, (name, arch, shape, seed, prompt, expert_type) in enumerate(variants):
        path = os.path.join(work, f"variant{i}.gguf")
        write(path, arch, shape, seed, expert_type=expert_type)
        # The same model as the Hugging Face checkpoint llama.cpp's converter would have read
        # (tests/tools/gguf_to_hf.py), for rkv's safetensors loader.
        hf = os.path.join(work, f"variant{i}-hf")
        run([sys.executable, os.path.join(TESTS_TOOLS, "gguf_to_hf.py"), path, hf])
        # Every variant's weights outside the MXFP4 experts are f32: the goldens' bar applies.
        report(name, True, against(path, path, prompt))
        report(name + " (safetensors)", True, against(hf, path, prompt))
    shapes = MAKE_SHAPES[:2] if quick else MAKE_SHAPES
    for shape in shapes:
        for dtype in MAKE_TYPES:
            if dtype == "mxfp4" and shape not in ("tiny-qwen3moe", "tiny-gpt-oss", "tiny-qwen35"):
                continue
            path = os.path.join(work, f"{shape}-{dtype}.gguf")
            run([rkv, "make-model", "--shape", shape, "--format", "gguf", "--dtype", dtype, "-s",
                 "1", "-o", path])
            # 16-bit weights (and the 16-bit matrices beside MXFP4 experts) in llama.cpp's
            # arithmetic: activations rounded to the weights' type first.
            extra = ("--matmul-precision", "llamacpp") if dtype in ("bf16", "f16", "mxfp4") else ()
            label = f"make-model {shape}, {dtype}" + (", llamacpp precision" if extra else "")
            report(label, False, against(path, path, P13, extra))
    # llama.cpp's GGUF goldens' model (a real trained one) with other prompts: BOS and 1 to 30
    # random ids, every file; in llamacpp precision but for f32 (the q8_0 and q4_0 files keep
    # ffn_down in f16, whose activations llama.cpp rounds to f16).
    stories = os.path.join(shared_dir(), "golden", "gguf")
    if os.path.isdir(stories):
        rng = np.random.default_rng(3)
        for dtype in ("f32", "f16", "bf16", "q8_0", "q4_0"):
            for k in range(2 if quick else 6):
                prompt = [1] + [int(x) for x in rng.integers(3, 512, int(rng.integers(1, 31)))]
                path = os.path.join(stories, f"stories260K-{dtype}.gguf")
                extra = () if dtype == "f32" else ("--matmul-precision", "llamacpp")
                label = f"stories260K {dtype}, prompt {k + 1} ({len(prompt)} ids)"
                report(label, dtype == "f32", against(path, path, prompt, extra))
    else:
        print(f"| stories260K | - | - | skipped: {stories} is absent |")
    # The GGUF vocabularies: llama.cpp's llama_tokenize against rkv tokenize --jsonl on random
    # texts (tests/tools/tokenizer_diff_check.py's), NFC-normalised for the qwen2 pre-tokenizer
    # (rkv applies Qwen2's NFC normaliser, llama.cpp does not: docs/USAGE.md).
    tokenize_oracle = os.path.join(work, "tokenize")
    if os.path.exists(tokenize_oracle):
        from tokenizer_diff_check import random_text  # needs python3-regex
        vocabularies = [("make-model tiny (qwen2 pre-tokenizer)", "tiny", True),
                        ("make-model tiny-llama-256 (llama-bpe)", "tiny-llama-256", False)]
        if os.path.isdir(stories):
            vocabularies.append(("stories260K (SentencePiece)", None, False))
        rng = random.Random(1)
        for label, shape, nfc in vocabularies:
            if shape is None:
                path = os.path.join(stories, "stories260K-f32.gguf")
            else:
                path = os.path.join(work, f"vocab-{shape}.gguf")
                run([rkv, "make-model", "--shape", shape, "--format", "gguf", "--dtype", "q8_0",
                     "-o", path])
            texts = [random_text(rng) for _ in range(200 if quick else 1000)]
            texts = [unicodedata.normalize("NFC", t) if nfc else t for t in texts]
            escaped = "\n".join(t.replace("\\", "\\\\").replace("\n", "\\n")
                                 .replace("\t", "\\t").replace("\r", "\\r") for t in texts)
            want = run([tokenize_oracle, path], stdin=escaped + "\n").splitlines()
            lines = os.path.join(work, "texts.jsonl")
            with open(lines, "w", encoding="utf-8") as f:
                for t in texts:
                    f.write(json.dumps(t) + "\n")
            got = run([rkv, "tokenize", "--tokenizer", path, "--jsonl", lines]).splitlines()
            bad = sum(json.loads(a) != json.loads(b) for a, b in zip(got, want)) + abs(
                len(got) - len(want))
            failed = failed or bad > 0
            verdict = "match" if bad == 0 else "**differs**"
            print(f"| tokenizer, {label}: {len(texts)} random texts"
                  f"{' (NFC)' if nfc else ''} | {len(texts) - bad}/{len(texts)} | - | {verdict} |",
                  flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
