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
import retention  # noqa: E402
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
dargs = argparse.Namespace(micro_batch=8, tau=2.0, full_weight=1.0, keep_weight=0.0)
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
# The retention loss (retention.py). What each position holds is needed until its last use: a
# statement token until it recurs, a binding until its variable's last read.
tok = train.tokenizer
ids = tok.encode("2:a\ne=a e+a\nans=e ans+a\ne=a e+a a2 a2,2+2=4:e\nans=e ans+a e4 a2")
text = [tok.decode([i]) for i in ids]
use = retention.last_use(ids)
pos = {w: [j for j, x in enumerate(text) if x == w] for w in set(text)}
check(use[pos["2:a"][0]] == pos[" a"][-1], f"binding 2:a used until the last read of a: {use[0]}")
check(use[pos["e=a"][0]] == pos["e=a"][1] and use[pos["e=a"][1]] == -1,
      "a statement token is needed until its copy, the copy itself not after")
check(use[pos["4:e"][0]] == pos[" e"][-1] and use[pos["ans=e"][0]] == pos["ans=e"][1],
      "the chain's binding 4:e until e's last read; the question's line until it is copied")
check(all(use[j] == -1 for w in (" a", "\n", ",", "2") for j in pos[w]),
      "reads, digits and marks hold nothing the chain reads later")

# One compression of a one-layer model (budget 24: 8 candidates kept of 24, window 16): the
# needed candidates are those used at or after the step, and a gradient step on the loss lowers
# it.
torch.manual_seed(1)
rc = train.Config(argparse.Namespace(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64))
rmodel = train.Model(rc)
seq = [int(x) for x in torch.randint(11, 40, (60,))]  # digits and marks: nothing is needed
seq[2], seq[5], seq[50] = tok.encode("e=a")[0], tok.encode("f=b")[0], tok.encode("e=a")[0]
rmask = torch.ones(1, 1, 59, 59, dtype=torch.bool).tril()  # [layers, kv heads, t, t]
event = {"layer": 0, "head": 0, "step": 40, "first_reader": 39, "kept_positions": list(range(8))
         + list(range(24, 40))}
rmask[0, 0, 39:, 8:24] = False  # what the compression left positions 39 on
ropt = torch.optim.SGD(rmodel.parameters(), lr=0.05)
losses = []
for _ in range(2):
    _, rqk = rmodel.forward_with_qk(torch.tensor([seq[:59]]), [rmask])
    r = retention.sample_loss(rqk, 0, rmask, [event], seq, retention.Settings(24), 2)
    ropt.zero_grad()
    r["loss"].backward()
    ropt.step()
    losses.append(float(r["loss"]))
check(r["needed"] == 1 and r["kept"] == 8,
      f"one needed candidate (e=a, read again at 50; f=b is never), 8 kept: {r['needed']}, "
      f"{r['kept']}")
check(losses[1] < losses[0], f"a gradient step lowers the retention loss: {losses}")

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
