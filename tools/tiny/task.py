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


def problems(seed: int, count: int) -> list:
    rng = random.Random(seed)
    return [make_problem(rng) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200, help="number of problems (default 200)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--out", required=True, help="jsonl file to write")
    parser.add_argument("--with-solution", action="store_true",
                        help="also write the reference chain of thought ('solution')")
    args = parser.parse_args()
    with open(args.out, "w", encoding="utf-8") as f:
        for i, p in enumerate(problems(args.seed, args.count)):
            record = {"id": f"chain-{args.seed}-{i}", "problem": p["problem"], "answer": p["answer"]}
            if args.with_solution:
                record["solution"] = p["solution"]
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
