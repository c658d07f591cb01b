"""An independent encoder for the Qwen2/Qwen2.5/Qwen3 byte-level BPE vocabulary, written from the
algorithm that ../shared/golden/tokenizer/README.md describes for transformers' slow
Qwen2Tokenizer (no code of rkv or of transformers): NFC-normalise, split out the added tokens
(leftmost, longest first), split each other piece with the pre-tokenizer regex, map each piece's
UTF-8 bytes through GPT-2's bytes_to_unicode table and apply the merges by rank. Encode only.
Needs Debian's python3-regex (for \\p{L} and \\p{N}).
"""
import json
import os
import unicodedata

import regex

PRETOKENIZE = regex.compile(
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Qwen2SlowTokenizer:
    def __init__(self, directory):
        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as f:
            lines = [l for l in f.read().split("\n") if l and not l.startswith("#version")]
        self.ranks = {tuple(l.split()): i for i, l in enumerate(lines)}
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        self.added = {v["content"]: int(k) for k, v in config["added_tokens_decoder"].items()}
        self.added_longest_first = sorted(self.added, key=len, reverse=True)
        self.byte_char = bytes_to_unicode()
        self.memo = {}

    def bpe(self, word):
        if word in self.memo:
            return self.memo[word]
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1),
                       key=lambda i: self.ranks.get((parts[i], parts[i + 1]), float("inf")))
            pair = (parts[best], parts[best + 1])
            if pair not in self.ranks:
                break
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        self.memo[word] = parts
        return parts

    def pieces(self, text):
        """(piece, is_added) in order."""
        out, start, i = [], 0, 0
        while i < len(text):
            hit = next((t for t in self.added_longest_first if text.startswith(t, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                out.append((text[start:i], False))
            out.append((hit, True))
            i += len(hit)
            start = i
        if start < len(text):
            out.append((text[start:], False))
        return out

    def encode(self, text):
        ids = []
        for piece, is_added in self.pieces(unicodedata.normalize("NFC", text)):
            if is_added:
                ids.append(self.added[piece])
                continue
            for word in PRETOKENIZE.findall(piece):
                mapped = "".join(self.byte_char[b] for b in word.encode("utf-8"))
                ids.extend(self.vocab[t] for t in self.bpe(mapped))
        return ids
