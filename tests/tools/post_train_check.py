#!/usr/bin/env python3
"""Hand-worked cases of tools/tiny/post_train.py's arithmetic (issue 38): GRPO's group-normalised
advantages (a truncated sample's is zero, a group whose rewards agree teaches nothing), the
batch layout (targets only on generated tokens, a sample's mask in its own corner, causal
elsewhere), that one on-policy GRPO step moves each trained token's log-probability the way
its advantage says, and which model, method and masks each recipe's rollouts use."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "tiny"))
try:
    import torch
except ImportError as e:
    sys.exit(f"post_train_check: {e}: install Debian's python3-torch (scripts/setup.sh does)")
import argparse  # noqa: E402

import post_train as pt  # noqa: E402
import train  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# rewards 1,0,0,0: mean 0.25, population std sqrt(0.1875) = 0.4330
g = [pt.Sample([1, 2, 3], 1, None, r, group=0) for r in (1, 0, 0, 0)]
g += [pt.Sample([1, 2, 3], 1, None, 1.0, group=1) for _ in range(3)]  # all correct: no signal
g += [pt.Sample([1, 2, 3], 1, None, 0.0, truncated=True, group=2),
      pt.Sample([1, 2, 3], 1, None, 1.0, group=2)]
n = pt.grpo_advantages(g)
check(n == 2, f"groups whose rewards differ: {n} (expected 2)")
check(abs(g[0].advantage - 0.75 / 0.4330127) < 1e-4, f"correct sample's advantage {g[0].advantage:.4f}")
check(abs(g[1].advantage + 0.25 / 0.4330127) < 1e-4, f"wrong sample's advantage {g[1].advantage:.4f}")
check(all(s.advantage == 0.0 for s in g[4:7]), "a group that agrees has zero advantages")
check(g[7].advantage == 0.0 and abs(g[8].advantage - 1.0) < 1e-4,
      "a truncated sample's advantage is zero; its group still normalises the rest")

# batch layout: two samples of lengths 5 and 3 (prompts 2 and 1), layers 1, kv heads 1
m = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
m[0, 0, 3, 0] = False  # position 3 no longer sees position 0
a = pt.Sample([10, 11, 12, 13, 14], 2, m)
b = pt.Sample([20, 21, 22], 1, None)
ids, targets, masks = pt.batch_tensors([a, b], 1, 1)
check(ids.tolist() == [[10, 11, 12, 13], [20, 21, train.tokenizer.EOS_ID, train.tokenizer.EOS_ID]],
      f"ids {ids.tolist()}")
check(targets.tolist() == [[-100, 12, 13, 14], [21, 22, -100, -100]], f"targets {targets.tolist()}")
check(not bool(masks[0][0, 0, 3, 0]) and bool(masks[0][0, 0, 3, 1]), "a sample's own mask is kept")
check(bool(masks[0][1, 0, 3, 0]) and not bool(masks[0][1, 0, 0, 1]),
      "a sample without a mask is causal")

# one on-policy GRPO step on a small random model: positive advantage raises the sample's
# log-probability, negative lowers it
torch.manual_seed(0)
c = train.Config(argparse.Namespace(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64))
model = train.Model(c)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
args = argparse.Namespace(micro_batch=8, updates=1, clip=0.2, temperature=1.0)
for sign in (1.0, -1.0):
    s = pt.Sample([5, 6, 7, 8, 9], 2, None)
    s.advantage = sign
    ids, targets, mask = pt.batch_tensors([s], c.layers, c.kv_heads)
    with torch.no_grad():
        before = float(pt.token_logprobs(model, ids, targets, mask, 1.0)[0][targets != -100].sum())
    pt.train_rl(args, model, opt, [s])
    with torch.no_grad():
        after = float(pt.token_logprobs(model, ids, targets, mask, 1.0)[0][targets != -100].sum())
    check((after - before) * sign > 0, f"advantage {sign:+.0f}: log-probability {before:.3f} -> {after:.3f}")

# distill: a student equal to its teacher has zero KL and no gradient to follow
teacher = train.Model(c)
teacher.load_state_dict(model.state_dict())
dargs = argparse.Namespace(micro_batch=8, tau=2.0, full_weight=1.0)
s = pt.Sample([5, 6, 7, 8, 9], 2, None)
stats = pt.train_distill(dargs, model, teacher, torch.optim.SGD(model.parameters(), lr=0.0), [s])
check(abs(stats["kl"]) < 1e-6 and abs(stats["kl_full"]) < 1e-6,
      f"KL of a model to itself: {stats['kl']:.2e}, full-cache anchor {stats['kl_full']:.2e}")
# a masked student differs from its full-cache teacher: the KL is positive, the anchor is not
m = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
m[0, 0, 3, :2] = False
s = pt.Sample([5, 6, 7, 8, 9], 2, m)
stats = pt.train_distill(dargs, model, teacher, torch.optim.SGD(model.parameters(), lr=0.0), [s])
check(stats["kl"] > 1e-6 and abs(stats["kl_full"]) < 1e-6,
      f"masked student: KL {stats['kl']:.2e} > 0, anchor {stats['kl_full']:.2e} = 0")
# The learning-rate schedule: constant, or --lr until update K then linear towards zero at N.
const = argparse.Namespace(lr=3e-5, lr_decay_after=None, iterations=14)
check(all(pt.learning_rate(const, i) == 3e-5 for i in range(1, 15)), "constant learning rate")
decay = argparse.Namespace(lr=3e-5, lr_decay_after=8, iterations=14)
rates = [pt.learning_rate(decay, i) for i in range(1, 15)]
# updates 1-8: 3e-5; update 9: 3e-5 * 6/7; update 14 (the last): 3e-5 / 7
expected = [3e-5] * 8 + [3e-5 * (15 - i) / 7 for i in range(9, 15)]
check(all(abs(a - b) < 1e-15 for a, b in zip(rates, expected)),
      f"decay after 8 of 14: {[f'{r:.3g}' for r in rates]}")
check(abs(rates[8] - 2.5714e-5) < 1e-9 and abs(rates[13] - 4.2857e-6) < 1e-9,
      f"update 9 at {rates[8]:.4g}, update 14 at {rates[13]:.4g} (3e-5 * 6/7, 3e-5 / 7)")

# Each recipe's rollouts (the commands it gives rkv, recorded instead of run): rl-sparse and
# distill-on-policy sample the model being trained with the method on and record its traces (the
# masks); rl-full samples it with a full cache; distill samples the frozen base model with a full
# cache, then replays those samples under the trained model's method.
commands = []
real_run, real_read = pt.run, pt.read_records
pt.run = lambda cmd, what: commands.append(cmd) or ""
pt.read_records = lambda run_dir: []


def flag(cmd, name):
    return cmd[cmd.index(name) + 1] if name in cmd else None


with __import__("tempfile").TemporaryDirectory() as tmp:
    for recipe in pt.RECIPES:
        commands.clear()
        rargs = argparse.Namespace(recipe=recipe, method="gkv", budget=128, buffer=16, group=4,
                                   temperature=0.7, seed=1, rkv="rkv", family="chains",
                                   max_new_tokens=64, threads=1, out=os.path.join(tmp, "run"),
                                   base="models/base")
        pt.rollouts(rargs, 3, tmp, [{"problem": "p", "answer": "a"}])
        first = commands[0]
        trained = os.path.join(tmp, "run", "model")
        if recipe in ("rl-sparse", "distill-on-policy"):
            check(len(commands) == 1 and flag(first, "-m") == trained
                  and flag(first, "--methods") == "gkv" and flag(first, "--budgets") == "128"
                  and flag(first, "--trace-dir") is not None and flag(first, "--temp") == "0.7",
                  f"{recipe}: the trained model's own samples, gkv at 128, traces kept")
        elif recipe == "rl-full":
            check(len(commands) == 1 and flag(first, "-m") == trained
                  and flag(first, "--methods") == "fullkv" and "--budgets" not in first,
                  "rl-full: the trained model's own samples with a full cache")
        else:
            check(len(commands) == 2 and flag(first, "-m") == "models/base"
                  and flag(first, "--methods") == "fullkv" and flag(commands[1], "-m") == trained
                  and flag(commands[1], "--methods") == "gkv" and "--replay" in commands[1],
                  "distill: the base model's full-cache samples, replayed under gkv")
pt.run, pt.read_records = real_run, real_read

sys.exit(1 if failures else 0)
