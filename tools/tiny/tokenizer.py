#!/usr/bin/env python3
"""The tiny model's tokenizer: a byte-level BPE in Hugging Face tokenizer.json form.

The vocabulary is the 256 byte tokens (id = byte value, in the GPT-2 byte-to-unicode spelling),
then tokens built by merges: the task's keywords, each variable with a space before it (` e`),
each value binding (`3:e`), each statement token (`e=a`, ` e-9`, ` e+c`; task.py), then
<|endoftext|>. The pre-tokenizer isolates bindings, statement tokens, letter runs (with at most
one space before them), single digits, single whitespace and single marks, so the arithmetic's
digits and operators are tokens of their own. `encode` here is the same algorithm rkv runs;
tests compare the two on the held-out set.

`FACTORS` describes the binding, statement and spaced-variable tokens by their parts (space,
first unit, mark, last unit); train.py builds those tokens' embeddings from shared per-part
vectors, so what it learns about `e` in one token carries to every token with an `e` in it.

`python3 tokenizer.py --out DIR` writes DIR/tokenizer.json and DIR/tokenizer_config.json (with
CHAT_TEMPLATE, the chat template: the messages' contents joined by newlines).
"""
import argparse
import json
import os
import re

from task import ANSWER_NAME, NAMES, OPS

# Words merged into single tokens, in merge-priority order.
KEYWORDS = ["verify", "ok", ANSWER_NAME, "answer", "Final", "boxed"]
EOS = "<|endoftext|>"
# The chat template (tokenizer_config.json's chat_template, rendered by rkv as transformers would):
# the prompt the model was trained on is the program text itself, without markup, so a chat
# renders the messages' contents joined by newlines and adds no generation prompt.
CHAT_TEMPLATE = (
    "{#- rkv-tiny: the prompt is the program text itself (tools/tiny/task.py); turns are joined by "
    "newlines, without markup or a generation prompt -#}"
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('chat message role \"' + message['role'] + "
    "'\" is not supported (use system, user or assistant)') }}"
    "{%- endif %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- message['content'] }}"
    "{%- endfor %}")
DIGITS = "0123456789"
VARIABLES = list(NAMES) + [ANSWER_NAME]
UNITS = VARIABLES + list(DIGITS)  # what the parts of a factored token are
MARKS = [":", "="] + list(OPS)
# Bindings, statement tokens, letter runs with an optional space, single digits, single
# whitespace, single marks.
SPLIT_PATTERN = r"\p{N}:\p{L}+| ?\p{L}+[-+=][\p{L}\p{N}]| ?\p{L}+|\p{N}|\s|[^\s\p{L}\p{N}]"
_PY_SPLIT = re.compile(r"[0-9]:[A-Za-z]+| ?[A-Za-z]+[-+=][A-Za-z0-9]| ?[A-Za-z]+|[0-9]|\s|"
                       r"[^\sA-Za-z0-9]")  # ASCII equivalent of the above


def bytes_to_unicode() -> dict:
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()


def build():
    """(vocab: token -> id, merges: list of (a, b), factors: id -> (space, first, mark, last))."""
    vocab = {BYTE_CHAR[b]: b for b in range(256)}
    merges = []
    factors = {}

    def merge(a: str, b: str) -> str:
        if a + b not in vocab:
            merges.append((a, b))
            vocab[a + b] = len(vocab)
        return a + b

    for word in KEYWORDS:
        current = word[0]
        for ch in word[1:]:
            current = merge(current, ch)
    sp = BYTE_CHAR[ord(" ")]
    for name in VARIABLES:  # ` e`: a variable read in the chain of thought
        factors[vocab[merge(sp, name)]] = (True, name, None, None)
    for d in DIGITS:  # `3:e`: a value binding
        merge(d, ":")
        for name in VARIABLES:
            factors[vocab[merge(d + ":", name)]] = (False, d, ":", name)
    for name in VARIABLES:  # `e=a`: a statement's name and first operand
        merge(name, "=")
        for y in NAMES:
            factors[vocab[merge(name + "=", y)]] = (False, name, "=", y)
    for name in VARIABLES:  # ` e-9`, ` e+c`: the statement's operation and second operand
        for op in OPS:
            merge(sp + name, op)
            for z in list(NAMES) + list(DIGITS):
                factors[vocab[merge(sp + name + op, z)]] = (True, name, op, z)
    for unit in UNITS:  # single letters, digits and `ans` are the parts themselves
        factors[vocab[unit]] = (False, unit, None, None)
    return vocab, merges, factors


VOCAB, MERGES, FACTORS = build()
EOS_ID = len(VOCAB)
VOCAB_SIZE = EOS_ID + 1
_RANKS = {pair: i for i, pair in enumerate(MERGES)}


def _bpe(chars: list) -> list:
    parts = list(chars)
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            rank = _RANKS.get((parts[i], parts[i + 1]))
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def encode(text: str) -> list:
    ids = []
    for piece in _PY_SPLIT.findall(text):
        chars = [BYTE_CHAR[b] for b in piece.encode("utf-8")]
        ids.extend(VOCAB[p] for p in _bpe(chars))
    return ids


_ID_TO_TOKEN = {i: t for t, i in VOCAB.items()}
_CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def decode(ids: list) -> str:
    out = bytearray()
    for i in ids:
        if i == EOS_ID:
            continue
        out.extend(_CHAR_BYTE[c] for c in _ID_TO_TOKEN[i])
    return out.decode("utf-8", errors="replace")


def tokenizer_json() -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": EOS_ID, "content": EOS, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": VOCAB, "merges": [f"{a} {b}" for a, b in MERGES]},
    }


def write(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False, indent=1)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "bos_token": None,
              "pad_token": EOS, "model_max_length": 2048, "add_bos_token": False,
              "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write tokenizer.json into")
    write(parser.parse_args().out)
