#!/usr/bin/env python3
"""A minutes-long diagnostic of the trainer: can the tiny model learn a pure key-value lookup?

Each example is N random keys with digit values and a query, `3:e;5:b;...\\n? e\\n` (or
`e=3;b=5;...` with --format key-first); the loss is on the queried digit only. The chain-of-
thought task needs exactly this lookup across hundreds of tokens, so a recipe (learning rate,
initialisation, shape) under which this is not learned in a few hundred steps will not train the
task either. Prints loss and accuracy every 50 steps (chance: loss 2.30, accuracy 0.10).

    /usr/bin/python3 tools/tiny/lookup_probe.py --lr 1e-3 --init-std 0.072 --steps 600
"""
import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer  # noqa: E402
import train  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    ap.add_argument("--init-std", type=float, default=0.02,
                    help="std of the linear layers' initial weights (default 0.02)")
    ap.add_argument("--steps", type=int, default=600, help="steps (default 600)")
    ap.add_argument("--batch", type=int, default=64, help="examples per step (default 64)")
    ap.add_argument("--keys", type=int, default=8, help="keys per example (default 8)")
    ap.add_argument("--format", choices=["value-first", "key-first"], default="value-first",
                    help="`3:e` (the task's binding) or `e=3` (default value-first)")
    train.add_shape_args(ap)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = train.Model(train.Config(args))
    for blk in model.blocks:
        for m in (blk.q_proj, blk.k_proj, blk.v_proj, blk.o_proj, blk.gate_proj, blk.up_proj,
                  blk.down_proj):
            torch.nn.init.normal_(m.weight, std=args.init_std)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = random.Random(0)
    names = tokenizer.NAMES[:26]

    def example():
        keys = rng.sample(names, args.keys)
        values = [rng.randint(0, 9) for _ in keys]
        q = rng.randrange(args.keys)
        pairs = [f"{v}:{k}" if args.format == "value-first" else f"{k}={v}"
                 for k, v in zip(keys, values)]
        return tokenizer.encode(";".join(pairs) + f"\n? {keys[q]}\n"), values[q]

    t0 = time.time()
    for step in range(1, args.steps + 1):
        batch = [example() for _ in range(args.batch)]
        ids = torch.tensor([b[0] for b in batch])
        target = torch.tensor([ord(str(b[1])) for b in batch])  # digit byte tokens
        logits = model(ids)[:, -1]
        loss = F.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            acc = (logits.argmax(-1) == target).float().mean().item()
            print(f"step {step} loss {loss.item():.3f} (chance {math.log(10):.2f}) "
                  f"accuracy {acc:.2f} {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
