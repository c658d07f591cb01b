#!/usr/bin/env python3
"""Loss and accuracy of a training checkpoint per kind of chain-of-thought token: what the model
has learned so far, lookup by lookup (tools/tiny/README.md has a run's history).

    /usr/bin/python3 tools/tiny/token_kinds.py models/rkv-tiny-reasoner.state.pt --min 20 --max 22

Kinds (task.py): `e=a` copies a statement's first token from the prompt (a lookup by the name);
` e-9` its second token (a lookup by the token before); ` a` reads the operand (a copy within
the line); the digit after ` a` is that variable's value (a lookup of the binding `2:a`); `3:e`
binds the result of the line's arithmetic; everything else is format and copies. Teacher
forcing on 12 programs of a fixed seed, next-token accuracy by argmax.
"""
import argparse
import collections
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402
import tokenizer  # noqa: E402
import train  # noqa: E402


def kind(prev: str, tok: str) -> str:
    if "=" in tok and not tok.startswith(" ") and tok[-1] in tokenizer.NAMES:
        return "statement `e=a`"
    if tok.startswith(" ") and len(tok) > 2 and tok[-2] in tokenizer.OPS:
        return "statement ` e-9`"
    if tok.startswith(" ") and tok[1:] in tokenizer.VARIABLES:
        return "operand ` a`"
    if prev.startswith(" ") and prev[1:] in tokenizer.VARIABLES and tok.isdigit():
        return "value after ` a`"
    if len(tok) > 2 and tok[0].isdigit() and tok[1] == ":":
        return "result `3:e`"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state", help="a .state.pt written by train.py")
    ap.add_argument("--min", type=int, default=task.MIN_COMPUTED, help="fewest statements")
    ap.add_argument("--max", type=int, default=task.MAX_COMPUTED, help="most statements")
    train.add_shape_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = train.Model(train.Config(args))
    model.load_state_dict(torch.load(args.state)["model"])
    model.eval()
    rng = random.Random(99)
    stats = collections.defaultdict(lambda: [0, 0.0, 0])  # count, loss sum, correct
    with torch.no_grad():
        for _ in range(12):
            p = task.make_problem(rng, args.min, args.max)
            prompt = tokenizer.encode(p["problem"])
            ids = prompt + tokenizer.encode(p["solution"]) + [tokenizer.EOS_ID]
            logp = F.log_softmax(model(torch.tensor([ids]))[0], -1)
            for j in range(len(prompt) - 1, len(ids) - 1):
                s = stats[kind(tokenizer.decode([ids[j]]), tokenizer.decode([ids[j + 1]]))]
                s[0] += 1
                s[1] -= logp[j, ids[j + 1]].item()
                s[2] += int(logp[j].argmax().item() == ids[j + 1])
    print("| kind | tokens | loss | accuracy |\n|---|---:|---:|---:|")
    for name, (n, loss, correct) in sorted(stats.items()):
        print(f"| {name} | {n} | {loss / n:.3f} | {correct / n:.2f} |")


if __name__ == "__main__":
    main()
