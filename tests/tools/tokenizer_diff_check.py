"""rkv's Qwen2/Qwen3 tokenizer against an independent encoder (qwen2_slow_tokenizer.py) on random
texts. The encoder must first reproduce every case of ../shared/golden/tokenizer (transformers'
slow Qwen2Tokenizer's ids); then rkv tokenize --jsonl must give its ids on N texts drawn from
pieces of the kinds the goldens cover (LaTeX, runs of spaces and newlines, CRLF, tabs, unusual
white space, accents composed and decomposed, many scripts, emoji sequences, code, digits,
contractions, added tokens and near-misses of them) and random code points.

Usage: tokenizer_diff_check.py --rkv RKV [--shared DIR] [--texts N] [--seed S]
Exits 77 (a skip for ctest) when ../shared is absent, 1 on any difference.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_dir import shared_dir  # noqa: E402
try:
    from qwen2_slow_tokenizer import Qwen2SlowTokenizer
except ImportError as e:  # python3-regex: scripts/setup.sh installs it
    sys.exit(f"tokenizer_diff_check: {e} (Debian's python3-regex; scripts/setup.sh installs it)")

PIECES = [
    "the", " The", "Hello", " world", "WAIT", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'m", "'d",
    "'t", "n't", "'x", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0",
    "\u2009", "\u3000", "\u200b", "\u2028", "\x0b", "\x0c", "\x85", "0", "12", "345", "2024",
    "3.14", "-7", "1e-5", "½", "²", "٣", "७", "①", "Ⅻ", ".", ",", "!", "?", "...", "—", "–", '"',
    "“", "”", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "|", "#", "$", "%", "^", "&", "*",
    "_", "=", "+", "~", "`", "@", ";", ":", "\\frac{1}{2}", "\\boxed{42}", "$x^2$",
    "\\begin{align}", "&=", "\\\\", "café", "cafe\u0301", "naïve", "Ångström", "A\u030a", "ﬁ",
    "ǅ", "αβγ", " Δx", "Привет", " мир", "中文", "你好，世界", "日本語", "カタカナ", "ひらがな",
    "한국어", "مرحبا", " العربية", "नमस्ते", "हिन्दी", "ไทย", "עברית", "😀", "👍🏽", "👨‍👩‍👧‍👦",
    "🏳️‍🌈", "❤️", "🇫🇷", "✅", "∑", "∫", "→", "≤", "∞", "\u0301", "\u200d", "\ufe0f",
    "def f(x):", "    return x", "if (a && b) {", "}", "//comment", "#include <stdio.h>",
    "https://example.com/a?b=c", '{"k": [1, 2]}', "<div>", "</div>", "<think>", "</think>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|im_start", "im_end|>", "<think",
    "think>",
]


def random_text(rng):
    text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14)))
    if rng.random() < 0.25:
        ranges = [(0x20, 0x7E), (0xA0, 0x2FFF), (0x3000, 0x9FFF), (0x1F300, 0x1FAFF)]
        for _ in range(rng.randint(1, 6)):
            lo, hi = rng.choice(ranges)
            text += chr(rng.randint(lo, hi))
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rkv", required=True)
    ap.add_argument("--shared", default=shared_dir())
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    directory = os.path.join(a.shared, "golden", "tokenizer", "qwen3_0.6b")
    if not os.path.isdir(directory):
        print(f"SKIP: {directory} is absent (../shared is not beside the repository)")
        sys.exit(77)
    oracle = Qwen2SlowTokenizer(directory)
    with open(os.path.join(directory, "golden_tokenizer.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    wrong = [c["text"] for c in cases if oracle.encode(c["text"]) != c["ids"]]
    if wrong:
        sys.exit(f"the independent encoder misses {len(wrong)} golden cases, e.g. {wrong[0]!r}")
    rng = random.Random(a.seed)
    texts = [random_text(rng) for _ in range(a.texts)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "texts.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t) + "\n")
        r = subprocess.run([a.rkv, "tokenize", "--tokenizer", directory, "--jsonl", path],
                           capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"rkv tokenize failed: {r.stderr.strip()}")
    got = [json.loads(l) for l in r.stdout.splitlines()]
    if len(got) != len(texts):
        sys.exit(f"rkv printed {len(got)} lines for {len(texts)} texts")
    bad = [(t, g) for t, g in zip(texts, got) if g != oracle.encode(t)]
    for t, g in bad[:5]:
        print(f"DIFFERS: {t!r}\n  rkv     {g}\n  encoder {oracle.encode(t)}")
    print(f"{len(cases)} golden cases reproduced by the encoder; {len(texts)} random texts, "
          f"{len(bad)} different")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
