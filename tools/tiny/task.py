#!/usr/bin/env python3
"""The tiny reasoning model's task: programs of digit assignments and their chains of thought.

A problem is a short program over single-letter variables (a-z, in that order) whose values are
digits 0-9, with arithmetic modulo 10. Four constants come first, one per line (`2:a`, "a is 2"),
then 20-22 computed statements, one per line, each written as two tokens that both carry the
statement's name: `e=a e-9` ("e is a, minus 9"; or `f=b f+c`). The first operand is any earlier
variable; the second an earlier variable or a digit 1-9; the operation + or -. The last line,
`ans=g ans+m`, is the question: g is computed in the first third of the program, so the answer
needs a value written near the start of the chain.

The chain of thought executes every statement on its own line: the statement, each operand
variable and its value, the arithmetic and the result bound to the name
(`e=a e-9 a2,2-9=3:e`). After every second statement it re-verifies the first of the two, the
repetitive self-checking of reasoning models: a thought `verify`, the line again, `ok`. Thoughts
are separated by a blank line, as in the outputs SkipKV calibrates on (ALGORITHMS.md 5): a pair
of derivations is an execution thought, a `verify` block a reflection. The chain ends with the
`ans` line and `Final answer: \\boxed{N}`. Mean generated length is about 490 tokens.

The layout is chosen for what a 2M-parameter transformer learns quickly (tools/tiny/README.md):
every lookup across the context is a match of the current token against one earlier token. The
tokenizer makes `e=a`, ` e-9` and `3:e` single tokens, so e's statement is found from the name
e alone, and a's value from the token ` a` alone, never from a neighbour of the matched token.

Everything is deterministic in the seed. `python3 task.py --count 200 --seed 7 --out test.jsonl`
writes a held-out set; training draws from other seeds (train.py).
"""
import argparse
import json
import random
import string

NAMES = string.ascii_lowercase
ANSWER_NAME = "ans"
OPS = "+-"
NUM_CONSTANTS = 4
MIN_COMPUTED, MAX_COMPUTED = 20, 22
CHECK_EVERY = 2


def derivation(name: str, y: str, op: str, z: str, values: dict) -> tuple:
    """(statement as written in the program, chain-of-thought line, value) of `name = y op z`."""
    yv = values[y]
    zv = values[z] if z in values else int(z)
    v = (yv + zv) % 10 if op == "+" else (yv - zv) % 10
    statement = f"{name}={y} {name}{op}{z}"
    looked_up = f" {y}{yv}" + (f" {z}{zv}" if z in values else "")
    return statement, f"{statement}{looked_up},{yv}{op}{zv}={v}:{name}", v


def make_problem(rng: random.Random, min_computed: int = MIN_COMPUTED,
                 max_computed: int = MAX_COMPUTED) -> dict:
    """One problem: {"problem": program + question, "answer": digit, "solution": chain}.
    Training's curriculum draws shorter programs first (fewer computed statements)."""
    n_computed = rng.randint(min_computed, max_computed)
    # Names in a fixed order (a, b, ..., z): the next statement's name is the successor of the
    # last one.
    names = NAMES[: NUM_CONSTANTS + n_computed]
    values = {}
    program = []
    for name in names[:NUM_CONSTANTS]:
        values[name] = rng.randint(0, 9)
        program.append(f"{values[name]}:{name}")
    thoughts = []  # blocks of derivation lines and verification blocks, "\n\n" between them
    block = []
    lines = []  # the derivation line of each computed statement
    for i, name in enumerate(names[NUM_CONSTANTS:]):
        earlier = names[: NUM_CONSTANTS + i]
        y = rng.choice(earlier)
        z = rng.choice(earlier) if rng.random() < 0.5 else str(rng.randint(1, 9))
        statement, line, values[name] = derivation(name, y, rng.choice(OPS), z, values)
        program.append(statement)
        lines.append(line)
        block.append(line)
        if (i + 1) % CHECK_EVERY == 0:
            thoughts.append("\n".join(block))
            block = []
            thoughts.append(f"verify\n{lines[i + 1 - CHECK_EVERY]}\nok")
    first_third = names[NUM_CONSTANTS : NUM_CONSTANTS + n_computed // 3]
    u, w = rng.choice(first_third), rng.choice(names)
    statement, line, answer = derivation(ANSWER_NAME, u, rng.choice(OPS), w, values)
    program.append(statement)
    block.append(line)
    block.append(f"Final answer: \\boxed{{{answer}}}")
    thoughts.append("\n".join(block))
    return {"problem": "\n".join(program) + "\n", "answer": str(answer),
            "solution": "\n\n".join(thoughts)}


# ---- The second family, `redundant` (issue #19): a chain of thought with redundant thoughts ----
# Same programs and lines as above, with three differences. (1) Locality: operands are drawn
# from the last LOCAL names (constants included), so a line needs recent values, and the
# question's operand u (a statement of the first third) is never read again after its line: the
# answer needs u's one binding, written early in the chain, and a digit. (2) After a share
# `rate` of the statements (evenly spaced: after statement i when floor((i+1) rate) >
# floor(i rate), a function of the statement's name) comes a redundant thought, `verify` ...
# `ok`, of one of three kinds in turn:
#   recheck  - the previous statement's line again, exactly (a re-derivation);
#   restate  - the statement and its result restated (`f=a f+d 3:f`);
#   inverse  - the line checked backwards, a small variation (`f=a f+d f3 d1,3-1=2:a`: the
#              result minus the second operand gives the first operand's value, rebound).
# Every token of them is a one-hop lookup or a local copy, as in the derivation lines
# (tools/tiny/README.md): a restated binding follows the token that names it.
# Each repeats only what is already in the context: dropping every redundant thought loses
# nothing the answer needs, while u's binding, the statements in the prompt and the recent
# bindings are needed. (3) The question adds a digit (`ans=u ans+5`).
REDUNDANCY = 0.75  # the shipped model's rate (models/rkv-tiny-redundant)
LOCAL = 4
KINDS = ("recheck", "restate", "inverse")


def _inverse(op: str) -> str:
    return "-" if op == "+" else "+"


def redundant_schedule(n_computed: int, rate: float) -> list:
    """The kind of redundant thought after each computed statement (None: no thought)."""
    from fractions import Fraction
    r = Fraction(rate).limit_denominator(100)
    out, k = [], 0
    for i in range(n_computed):
        if int((i + 1) * r) > int(i * r):
            out.append(KINDS[k % len(KINDS)])
            k += 1
        else:
            out.append(None)
    return out


def make_redundant_problem(rng: random.Random, min_computed: int = MIN_COMPUTED,
                           max_computed: int = MAX_COMPUTED, rate: float = REDUNDANCY) -> dict:
    """One problem of the `redundant` family, as make_problem's dict plus "redundant_chars":
    the characters of the solution that belong to redundant thoughts (their share of the
    chain)."""
    n_computed = rng.randint(min_computed, max_computed)
    names = NAMES[: NUM_CONSTANTS + n_computed]
    u = names[NUM_CONSTANTS + rng.randrange(max(1, n_computed // 3))]
    values = {}
    program = []
    for name in names[:NUM_CONSTANTS]:
        values[name] = rng.randint(0, 9)
        program.append(f"{values[name]}:{name}")
    schedule = redundant_schedule(n_computed, rate)
    thoughts, block, lines, redundant_chars = [], [], [], 0
    for i, name in enumerate(names[NUM_CONSTANTS:]):
        earlier = [x for x in names[: NUM_CONSTANTS + i][-LOCAL:] if x != u]
        if not earlier:  # only when u is the last name and LOCAL is 1
            earlier = [names[0]]
        y = rng.choice(earlier)
        z = rng.choice(earlier) if rng.random() < 0.5 else str(rng.randint(1, 9))
        op = rng.choice(OPS)
        statement, line, values[name] = derivation(name, y, op, z, values)
        program.append(statement)
        lines.append(line)
        block.append(line)
        kind = schedule[i]
        if kind is None:
            continue
        thoughts.append("\n".join(block))
        block = []
        if kind == "recheck":
            body = lines[i - 1] if i > 0 else line
        elif kind == "restate":
            body = f"{statement} {values[name]}:{name}"
        else:
            zv = values[z] if z in values else int(z)
            reads = f" {name}{values[name]}" + (f" {z}{zv}" if z in values else "")
            body = f"{statement}{reads},{values[name]}{_inverse(op)}{zv}={values[y]}:{y}"
        thought = f"verify\n{body}\nok"
        redundant_chars += len(thought) + 2
        thoughts.append(thought)
    statement, line, answer = derivation(ANSWER_NAME, u, rng.choice(OPS),
                                         str(rng.randint(1, 9)), values)
    program.append(statement)
    block.append(line)
    block.append(f"Final answer: \\boxed{{{answer}}}")
    thoughts.append("\n".join(block))
    return {"problem": "\n".join(program) + "\n", "answer": str(answer),
            "solution": "\n\n".join(thoughts), "redundant_chars": redundant_chars}


FAMILIES = {"chains": "chain", "redundant": "redundant"}  # family -> id prefix


def make(rng: random.Random, family: str = "chains", short=None,
         rate: float = REDUNDANCY) -> dict:
    """One problem of `family`; `short` = (min, max) computed statements (the curriculum)."""
    bounds = short or (MIN_COMPUTED, MAX_COMPUTED)
    if family == "chains":
        return make_problem(rng, *bounds)
    if family == "redundant":
        return make_redundant_problem(rng, *bounds, rate=rate)
    raise ValueError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")


def problems(seed: int, count: int, family: str = "chains", rate: float = REDUNDANCY) -> list:
    rng = random.Random(seed)
    return [make(rng, family, rate=rate) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200, help="number of problems (default 200)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--out", required=True, help="jsonl file to write")
    parser.add_argument("--text", action="store_true",
                        help="write plain text instead: each problem followed by its chain of "
                             "thought, as the model is trained on them, separated by two blank "
                             "lines (rkv calibrate --separator '\\n\\n\\n' runs each as a "
                             "sequence of its own: the tiny models' calibration text)")
    parser.add_argument("--with-solution", action="store_true",
                        help="also write the reference chain of thought ('solution')")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="chains",
                        help="task family: chains (the first model's) or redundant (default chains)")
    parser.add_argument("--redundancy", type=float, default=REDUNDANCY,
                        help="redundant family: share of statements followed by a redundant "
                             f"thought, 0.0-1.0 (default {REDUNDANCY}, the shipped model's)")
    args = parser.parse_args()
    if not 0.0 <= args.redundancy <= 1.0:
        parser.error("--redundancy must be within 0.0-1.0")
    prefix = FAMILIES[args.family]
    if args.text:
        with open(args.out, "w", encoding="utf-8") as f:
            chains = problems(args.seed, args.count, args.family, args.redundancy)
            f.write("\n\n\n".join(p["problem"] + p["solution"] for p in chains) + "\n")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        for i, p in enumerate(problems(args.seed, args.count, args.family, args.redundancy)):
            record = {"id": f"{prefix}-{args.seed}-{i}", "problem": p["problem"],
                      "answer": p["answer"]}
            if args.with_solution:
                record["solution"] = p["solution"]
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
