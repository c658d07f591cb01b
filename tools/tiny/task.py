#!/usr/bin/env python3
"""The tiny reasoning model's task: programs of digit assignments and their chains of thought.

A problem is a short program over single-letter variables (a-z, A-Z) whose values are digits
0-9, with arithmetic modulo 10. Four constants come first, then 24-32 computed statements
`x=y+z`, `x=y-z`, `x=y+k` or `x=y-k`, each operand an earlier variable chosen uniformly (so many
refer hundreds of tokens back). The question asks for `u+v` or `u-v` where u is computed in the
first third of the program: the answer needs a value written near the start of the chain.

The chain of thought executes every statement on its own line (`m=a+q=3+7=0`), and after every
third one re-verifies the statement computed three lines earlier (`verify m=a+q=3+7=0 ok`), the
repetitive self-checking of reasoning models. Thoughts are separated by a blank line, as in the
reasoning models' outputs SkipKV calibrates on: a block of three derivations is an execution
thought, a `verify` line a reflection thought (ALGORITHMS.md 5). It ends with the answer line and
`Final answer: \\boxed{N}`. Mean generated length is about 490 tokens with tools/tiny's
tokenizer (one token per character, keywords one token each).

Everything is deterministic in the seed. `python3 task.py --count 200 --seed 7 --out test.jsonl`
writes a held-out set; training draws from other seeds (train.py).
"""
import argparse
import json
import random
import string

NAMES = string.ascii_lowercase + string.ascii_uppercase
NUM_CONSTANTS = 4
MIN_COMPUTED, MAX_COMPUTED = 24, 32
CHECK_EVERY = 3


def make_problem(rng: random.Random, min_computed: int = MIN_COMPUTED,
                 max_computed: int = MAX_COMPUTED) -> dict:
    """One problem: {"problem": program + question, "answer": digit, "solution": chain}.
    Training's curriculum draws shorter programs first (fewer computed statements)."""
    n_computed = rng.randint(min_computed, max_computed)
    names = rng.sample(NAMES, NUM_CONSTANTS + n_computed)
    values = {}
    program = []
    for name in names[:NUM_CONSTANTS]:
        values[name] = rng.randint(0, 9)
        program.append(f"{name}={values[name]}")
    thoughts = []  # blocks of derivation lines and verification lines, "\n\n" between them
    block = []
    computed = []  # (text of the derivation line) per computed statement
    for i, name in enumerate(names[NUM_CONSTANTS:]):
        earlier = names[: NUM_CONSTANTS + i]
        y = rng.choice(earlier)
        op = rng.choice("+-")
        if rng.random() < 0.5:
            z = rng.choice(earlier)
            zv = values[z]
            expr = f"{y}{op}{z}"
        else:
            zv = rng.randint(1, 9)
            expr = f"{y}{op}{zv}"
        v = (values[y] + zv) % 10 if op == "+" else (values[y] - zv) % 10
        values[name] = v
        program.append(f"{name}={expr}")
        line = f"{name}={expr}={values[y]}{op}{zv}={v}"
        computed.append(line)
        block.append(line)
        if (i + 1) % CHECK_EVERY == 0:
            thoughts.append("\n".join(block))
            block = []
            thoughts.append(f"verify {computed[i + 1 - CHECK_EVERY]} ok")
    first_third = names[NUM_CONSTANTS : NUM_CONSTANTS + n_computed // 3]
    u = rng.choice(first_third)
    v_name = rng.choice(names)
    op = rng.choice("+-")
    answer = (values[u] + values[v_name]) % 10 if op == "+" else (values[u] - values[v_name]) % 10
    block.append(f"ans={u}{op}{v_name}={values[u]}{op}{values[v_name]}={answer}")
    block.append(f"Final answer: \\boxed{{{answer}}}")
    thoughts.append("\n".join(block))
    question = ";".join(program) + f"\n? {u}{op}{v_name}\n"
    return {"problem": question, "answer": str(answer), "solution": "\n\n".join(thoughts)}


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
