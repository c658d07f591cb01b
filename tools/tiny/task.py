#!/usr/bin/env python3
"""The tiny reasoning model's task: programs of digit assignments and their chains of thought.

A problem is a short program over single-letter variables (a-z, then A-Z, in that order) whose
values are digits 0-9, with arithmetic modulo 10. Four constants come first (`2:a`, "2 is a"),
then 20-28 computed statements (`a-9=e`, "a - 9 is e"; operands `y+z`, `y-z`, `y+k` or `y-k`,
each an earlier variable chosen uniformly, so many refer hundreds of tokens back). The question
(`? e+c`) asks for `u+v` or `u-v` where u is computed in the first third of the program: the
answer needs a value written near the start of the chain.

The chain of thought executes every statement on its own line: the statement, the operands'
values, the result bound to the name (`a-9=e,2-9,3:e`). Names come after what they name, both in
the program and in the chain, and the tokenizer merges a name with the mark before it (`=e` and
`:e` are single tokens), so every lookup is one content match: the value of e is the digit before
the last `:e` token, e's statement the tokens before `=e`. That lookup, across hundreds of tokens,
is what KV-cache eviction puts to the test. After every third statement the chain re-verifies the
one computed three lines earlier (`verify a-9=e,2-9,3:e ok`), the repetitive self-checking of
reasoning models. Thoughts are separated by a blank line, as in the reasoning models' outputs
SkipKV calibrates on: a block of three derivations is an execution thought, a `verify` line a
reflection thought (ALGORITHMS.md 5). It ends with the answer line and `Final answer:
\\boxed{N}`. Mean generated length is about 450 tokens with tools/tiny's tokenizer.

Everything is deterministic in the seed. `python3 task.py --count 200 --seed 7 --out test.jsonl`
writes a held-out set; training draws from other seeds (train.py).
"""
import argparse
import json
import random
import string

NAMES = string.ascii_lowercase + string.ascii_uppercase
NUM_CONSTANTS = 4
MIN_COMPUTED, MAX_COMPUTED = 20, 28
CHECK_EVERY = 3


def make_problem(rng: random.Random, min_computed: int = MIN_COMPUTED,
                 max_computed: int = MAX_COMPUTED) -> dict:
    """One problem: {"problem": program + question, "answer": digit, "solution": chain}.
    Training's curriculum draws shorter programs first (fewer computed statements)."""
    n_computed = rng.randint(min_computed, max_computed)
    # Names in a fixed order (a, b, ..., z, A, ...): the next statement's name is the successor
    # of the last one.
    names = NAMES[: NUM_CONSTANTS + n_computed]
    values = {}
    program = []
    for name in names[:NUM_CONSTANTS]:
        values[name] = rng.randint(0, 9)
        program.append(f"{values[name]}:{name}")
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
        program.append(f"{expr}={name}")
        line = f"{expr}={name},{values[y]}{op}{zv},{v}:{name}"
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
    block.append(f"{u}{op}{v_name}=ans,{values[u]}{op}{values[v_name]},{answer}:ans")
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
