#!/usr/bin/env python3
"""G-KV's post-training (issue 38; G-KV's paper, section 5 and appendix C) of a tiny reasoner, so
that it learns to think under its own KV eviction. G-KV's two recipes, its control, and a
variant of Distill:

  rl-sparse  sample with KV compression on (rkv eval --trace-dir), rebuild every sampled token's
             attention mask from the trace (masks.py), and optimise GRPO without a KL term under
             those masks, so the training policy is the inference policy; a truncated sample's
             advantage is zero.
  rl-full    the control: the same GRPO on full-cache samples with causal attention (the
             paper's RL-Full).
  distill    sample from the frozen full-cache model it starts from, replay each sample under
             the current model's compression (rkv eval --replay) for its masks, and
             train the masked model toward the full-cache model's distribution with a
             temperature-scaled KL loss (tau^2 KL(p_full/tau || p_masked/tau) per token).
  distill-on-policy
             Distill's loss on the model's own samples: sample with KV compression on, as
             rl-sparse does (each sample's masks recorded), and train the masked model toward
             the frozen full-cache model's distribution on those tokens. Distill teaches the
             states the full-cache model visits; this one teaches the states the compressed
             model actually reaches (its own mistakes included).

The rollouts run on rkv itself (its engine, its compression, float32 KV): the masked forward
pass here gives rkv's logits to 1e-5 of their scale (tests/tools/masked_logits_check.py), so
the sampling policy and the trained one agree.

    /usr/bin/python3 tools/tiny/post_train.py --out runs/post/gkv96 --recipe rl-sparse \
        --method gkv --budget 96 --iterations 150

OUT holds run.json (every setting, the seeds, the base model's hash), state.pt (resumed from
when the command is run again: a run may span sessions), log.csv (one row per iteration:
rewards, loss or KL, tokens, seconds, and the validation accuracy every --eval-every
iterations), model/ (the current weights in the layout rkv loads) and curves.svg. Problems are
drawn from task.py with a seed per iteration; the held-out test set (data/*_test.jsonl) and the
validation problems are never trained on. A run stops after --iterations or once its rollouts
have generated --token-budget tokens.
"""
import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import masks  # noqa: E402
import retention  # noqa: E402
import task  # noqa: E402
import tokenizer  # noqa: E402
import train  # noqa: E402

RECIPES = ("rl-sparse", "rl-full", "distill", "distill-on-policy")
DISTILL = ("distill", "distill-on-policy")  # the recipes trained by KL to the full-cache model
VALIDATION_SEED = 11  # validation problems: task.py's draws with this seed, minus held-out ones
LOG_FIELDS = ["iteration", "rollout_tokens", "trained_tokens", "reward", "truncated",
              "groups_with_signal", "loss", "kl", "kl_full", "keep", "keep_miss", "keep_agree",
              "grad_norm", "lr", "rollout_s", "train_s", "seconds", "val_method", "val_full"]
# Settings that must not change when a run resumes (the rest may: more iterations, a larger
# token budget, the eval cadence, threads).
FIXED = ("base", "family", "recipe", "method", "budget", "buffer", "problems", "group", "lr",
         "temperature", "tau", "clip", "updates", "seed", "max_new_tokens", "weight_decay",
         "full_weight", "lr_decay_after", "keep_weight", "keep_tau", "keep_margin",
         "keep_need", "keep_theta")


def learning_rate(args, update: int) -> float:
    """The learning rate of update `update` (1-based): --lr throughout, or with --lr-decay-after K,
    --lr up to update K and then falling linearly, update i taking lr * (N + 1 - i) / (N + 1 - K)
    for N = --iterations (the last update gets lr / (N + 1 - K), never zero)."""
    k = args.lr_decay_after
    if k is None or update <= k:
        return args.lr
    return args.lr * (args.iterations + 1 - update) / (args.iterations + 1 - k)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd, what):
    """Runs a command and returns its stdout; a failure ends the calling script, saying what
    failed and the end of the command's stderr (shared by ship_adapted.py and the mask test)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {what} failed ({' '.join(cmd[:3])} ...):\n"
                 f"{r.stderr[-2000:]}")
    return r.stdout


def write_problems(path: str, problems: list, prefix: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, p in enumerate(problems):
            f.write(json.dumps({"id": f"{prefix}-{i}", "problem": p["problem"],
                                "answer": p["answer"]}) + "\n")


def draw_problems(args, iteration: int, excluded: set) -> list:
    rng = random.Random(args.seed * 1_000_003 + iteration)
    out = []
    while len(out) < args.problems:
        p = task.make(rng, args.family)
        if p["problem"] not in excluded:
            out.append(p)
    return out


class Sample:
    """One rollout: ids (prompt, generated, and the end-of-sequence id when it ended there),
    the prompt's length, the per-layer masks (None: causal), the trace's compressions and its
    reward."""

    def __init__(self, ids, prompt, mask, reward=0.0, truncated=False, group=0, events=()):
        self.ids, self.prompt, self.mask, self.events = ids, prompt, mask, list(events)
        self.reward, self.truncated, self.group = reward, truncated, group
        self.advantage = 0.0


def sample_from_trace(trace_path: str, stop_reason: str, with_mask: bool):
    tr = masks.Trace(trace_path)
    ids = list(tr.ids)
    if stop_reason == "eos":
        ids.append(tokenizer.EOS_ID)
    # queries run over every position but the last (it only is a target)
    mask = masks.visibility(tr, len(ids) - 1) if with_mask and tr.events else None
    return ids, tr.prompt_tokens, mask, (tr.events if mask is not None else [])


def eval_cmd(args, model_dir, dataset, out, method, budget, samples, temperature, seed,
             trace_dir=None, limit=0):
    cmd = [args.rkv, "eval", "-m", model_dir, "--dataset", dataset, "--preset", args.family,
           "--methods", method, "--samples", str(samples), "--temp", str(temperature),
           "--top-p", "1", "-s", str(seed), "-o", out, "--kv-dtype", "f32",
           "-n", str(args.max_new_tokens), "-t", str(args.threads)]
    if method != "fullkv":
        cmd += ["--budgets", str(budget), "--kv-buffer", str(args.buffer)]
    if trace_dir:
        cmd += ["--trace-dir", trace_dir]
    if limit:
        cmd += ["--limit", str(limit)]
    return cmd


def read_records(run_dir: str) -> list:
    with open(os.path.join(run_dir, "samples.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def rollouts_rl(args, iteration: int, work: str, problems: list) -> list:
    dataset = os.path.join(work, "problems.jsonl")
    write_problems(dataset, problems, f"train-{iteration}")
    method = "fullkv" if args.recipe == "rl-full" else args.method
    out = os.path.join(work, "eval")
    run(eval_cmd(args, os.path.join(args.out, "model"), dataset, out, method, args.budget,
                 args.group, args.temperature, args.seed * 7919 + iteration,
                 trace_dir=os.path.join(work, "traces")), "the rollouts")
    samples = []
    for rec in read_records(out):
        ids, prompt, mask, events = sample_from_trace(
            os.path.join(work, "traces", rec["trace"]), rec["stop_reason"], method != "fullkv")
        samples.append(Sample(ids, prompt, mask, float(rec["correct"]),
                              rec["stop_reason"] == "length", rec["example_index"], events))
    return samples


def rollouts_distill(args, iteration: int, work: str, problems: list) -> list:
    dataset = os.path.join(work, "problems.jsonl")
    write_problems(dataset, problems, f"train-{iteration}")
    out = os.path.join(work, "eval")
    # samples of the full-cache model the run started from (the teacher)
    run(eval_cmd(args, args.base, dataset, out, "fullkv", 0, args.group, args.temperature,
                 args.seed * 7919 + iteration, trace_dir=os.path.join(work, "traces")),
        "the teacher's samples")
    teacher = read_records(out)
    replay_file = os.path.join(work, "replay.jsonl")
    with open(replay_file, "w") as f:
        for rec in teacher:
            tr = masks.Trace(os.path.join(work, "traces", rec["trace"]))
            generated = tr.ids[tr.prompt_tokens:]
            if rec["stop_reason"] == "eos":
                generated = generated + [tokenizer.EOS_ID]
            f.write(json.dumps({"example_id": rec["example_id"], "sample": rec["sample"],
                                "ids": generated}) + "\n")
    # the same outputs under the current model's eviction: their masks
    replayed = os.path.join(work, "replayed")
    run(eval_cmd(args, os.path.join(args.out, "model"), dataset, replayed, args.method,
                 args.budget, args.group, 1.0, 0, trace_dir=os.path.join(work, "replay-traces"))
        + ["--replay", replay_file], "the replays")
    by_key = {(r["example_id"], r["sample"]): r for r in read_records(replayed)}
    samples = []
    for rec in teacher:
        r = by_key[(rec["example_id"], rec["sample"])]
        ids, prompt, mask, events = sample_from_trace(
            os.path.join(work, "replay-traces", r["trace"]), r["stop_reason"], True)
        if r["output"] != rec["output"]:
            sys.exit(f"post_train: the replay of {rec['example_id']} sample {rec['sample']} "
                     "wrote another output than the teacher's")
        samples.append(Sample(ids, prompt, mask, float(rec["correct"]),
                              rec["stop_reason"] == "length", rec["example_index"], events))
    return samples


def rollouts(args, iteration: int, work: str, problems: list) -> list:
    """The iteration's samples: the teacher's replayed under the current model's eviction
    (distill), or the current model's own, with the method on and their masks recorded
    (rl-sparse, distill-on-policy) or with a full cache and no masks (rl-full)."""
    if args.recipe == "distill":
        return rollouts_distill(args, iteration, work, problems)
    return rollouts_rl(args, iteration, work, problems)


def grpo_advantages(samples: list) -> int:
    """GRPO's group-normalised advantages, (r - mean) / (std + 1e-6) per problem; zero for a
    truncated sample. Returns the number of groups whose rewards differ (the ones that teach)."""
    groups = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    informative = 0
    for members in groups.values():
        r = torch.tensor([float(m.reward) for m in members], dtype=torch.float64)
        std = float(r.std(unbiased=False))
        if std > 0:
            informative += 1
        for m in members:
            m.advantage = 0.0 if m.truncated or std == 0 else (m.reward - float(r.mean())) / (
                std + 1e-6)
    return informative


def batch_tensors(chunk: list, layers: int, kv_heads: int):
    """ids [b, t], targets [b, t] (-100 off the generated tokens), masks (per layer, [b, kv,
    t, t], or None when every sample is causal)."""
    t = max(len(s.ids) for s in chunk) - 1
    ids = torch.full((len(chunk), t), tokenizer.EOS_ID, dtype=torch.long)
    targets = torch.full((len(chunk), t), -100, dtype=torch.long)
    any_mask = any(s.mask is not None for s in chunk)
    m = None
    if any_mask:
        m = torch.ones(t, t, dtype=torch.bool).tril().repeat(layers, len(chunk), kv_heads, 1, 1)
    for i, s in enumerate(chunk):
        n = len(s.ids) - 1
        ids[i, :n] = torch.tensor(s.ids[:-1])
        targets[i, s.prompt - 1:n] = torch.tensor(s.ids[s.prompt:])
        if any_mask and s.mask is not None:
            m[:, i, :, :n, :n] = s.mask[:, :, :n, :n]
    return ids, targets, (None if m is None else [m[l] for l in range(layers)])


def token_logprobs(model, ids, targets, mask, temperature):
    """Log-probabilities of the targets under the sampling distribution, softmax(logits / T)
    (the rollouts sample with top-p 1 and no top-k, so this is exactly what rkv sampled from)."""
    logits = model(ids, mask)
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(-1, targets.clamp(min=0)[..., None])[..., 0], logits


def train_rl(args, model, opt, samples: list) -> dict:
    """One GRPO update (or --updates of them with PPO's clip), loss averaged over the tokens
    of the samples that carry a signal."""
    live = [s for s in samples if s.advantage != 0.0]
    stats = {"loss": 0.0, "grad_norm": 0.0, "trained_tokens": 0}
    if not live:
        return stats
    n_tokens = sum(len(s.ids) - s.prompt for s in live)
    c = model.c
    chunks = [live[i:i + args.micro_batch] for i in range(0, len(live), args.micro_batch)]
    # The sampling policy's log-probabilities: the model's before the first update (one update:
    # the ratio is 1 and each token's gradient is its advantage times its log-probability's).
    old = [None] * len(chunks)
    if args.updates > 1:
        with torch.no_grad():
            for k, chunk in enumerate(chunks):
                ids, targets, mask = batch_tensors(chunk, c.layers, c.kv_heads)
                old[k] = token_logprobs(model, ids, targets, mask, args.temperature)[0]
    for _ in range(args.updates):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k, chunk in enumerate(chunks):
            ids, targets, mask = batch_tensors(chunk, c.layers, c.kv_heads)
            lp, _ = token_logprobs(model, ids, targets, mask, args.temperature)
            old_lp = lp.detach() if old[k] is None else old[k]
            adv = torch.tensor([s.advantage for s in chunk])[:, None]
            ratio = torch.exp(lp - old_lp)
            obj = torch.minimum(ratio * adv, ratio.clamp(1 - args.clip, 1 + args.clip) * adv)
            on = (targets != -100).float()
            loss = -(obj * on).sum() / n_tokens
            loss.backward()
            total += float(loss)
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        stats["loss"] = total
    stats["trained_tokens"] = n_tokens
    return stats


def kl_to(p_log, logits, tau):
    """KL(p || softmax(logits / tau)) per position, p given as log-probabilities."""
    q = torch.log_softmax(logits / tau, dim=-1)
    return (p_log.exp() * (p_log - q)).sum(-1)


def train_distill(args, model, teacher, opt, samples: list) -> dict:
    n_tokens = sum(len(s.ids) - s.prompt for s in samples)
    stats = {"kl": 0.0, "grad_norm": 0.0, "trained_tokens": n_tokens}
    if not samples:
        return stats
    c = model.c
    tau = args.tau
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for i in range(0, len(samples), args.micro_batch):
        chunk = samples[i:i + args.micro_batch]
        ids, targets, mask = batch_tensors(chunk, c.layers, c.kv_heads)
        keeping = args.keep_weight > 0
        teacher_qk = qk = None
        with torch.no_grad():
            if keeping and args.keep_need == "attention":
                t_logits, teacher_qk = teacher.forward_with_qk(ids)
            else:
                t_logits = teacher(ids)
            p_full = torch.log_softmax(t_logits / tau, dim=-1)
        on = (targets != -100).float()
        if keeping:
            logits, qk = model.forward_with_qk(ids, mask)
        else:
            logits = model(ids, mask)
        kl = kl_to(p_full, logits, tau)  # KL(p_full || q_masked) per position
        loss = tau * tau * (kl * on).sum() / n_tokens
        total += float(loss)
        if keeping:
            loss = loss + args.keep_weight * keep_loss(args, model, qk, chunk, len(samples),
                                                       stats, teacher_qk)
        if args.full_weight > 0:
            # the anchor: the model with a full cache kept at the teacher's distribution
            anchor = kl_to(p_full, model(ids), tau)
            a = args.full_weight * tau * tau * (anchor * on).sum() / n_tokens
            stats["kl_full"] = stats.get("kl_full", 0.0) + float(a) / (
                args.full_weight * tau * tau)
            loss = loss + a
        loss.backward()
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    opt.step()
    stats["kl"] = total / (tau * tau)
    return stats


def keep_loss(args, model, qk: list, chunk: list, n_samples: int, stats: dict, teacher_qk=None):
    """The retention loss (retention.py) of a chunk's masked pass (its queries and keys, qk),
    weighted by the chunk's share of the batch; its mean, misses and agreement accumulate in
    stats. With --keep-need attention an entry is needed where the teacher's full-cache pass
    (teacher_qk) attends to it later."""
    st = retention.Settings(args.budget, tau=args.keep_tau, margin=args.keep_margin)
    group = model.c.heads // model.c.kv_heads
    total, terms = 0.0, 0
    for b, s in enumerate(chunk):
        if s.mask is None:
            continue
        future = None
        if args.keep_need == "attention":
            with torch.no_grad():
                future = retention.future_attention(
                    retention.causal_attention(teacher_qk, b, group, len(s.ids) - 1))
        r = retention.sample_loss(qk, b, s.mask, s.events, s.ids, st, group, future,
                                  args.keep_theta)
        total = total + r["loss"]
        terms += r["needed"]
        for k in ("needed", "missed", "kept", "agreed"):
            stats["keep_" + k] = stats.get("keep_" + k, 0) + r[k]
    loss = total / max(terms, 1) * (len(chunk) / n_samples)
    stats["keep"] = stats.get("keep", 0.0) + float(loss)
    return loss


def validate(args, work: str) -> tuple:
    """Greedy pass@1 of the current model on the validation problems, at the run's method and
    budget and with a full cache."""
    out = []
    for method in (args.method, "fullkv"):
        d = os.path.join(work, f"val-{method}")
        shutil.rmtree(d, ignore_errors=True)
        run(eval_cmd(args, os.path.join(args.out, "model"), os.path.join(args.out, "val.jsonl"),
                     d, method, args.budget, 1, 0, 0), "the validation")
        recs = read_records(d)
        out.append(sum(r["correct"] for r in recs) / len(recs))
    return tuple(out)


def keep_checkpoint(args, iteration: int) -> None:
    """The weights validated at `iteration`, kept as OUT/checkpoints/ITERATION (the layout rkv
    loads): ship_adapted.py --iteration N ships one of them."""
    dest = os.path.join(args.out, "checkpoints", str(iteration))
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(os.path.join(args.out, "model"), dest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="run directory (resumed when it holds state.pt)")
    ap.add_argument("--base", default="models/rkv-tiny-reasoner",
                    help="the model to start from (and distill's teacher)")
    ap.add_argument("--family", choices=sorted(task.FAMILIES), default="chains",
                    help="task family the base model was trained on (default chains)")
    ap.add_argument("--recipe", choices=RECIPES, required=True,
                    help="rl-sparse, rl-full, distill or distill-on-policy")
    ap.add_argument("--method", default="gkv", help="KV method trained for (default gkv)")
    ap.add_argument("--budget", type=int, default=96, help="KV budget (default 96)")
    ap.add_argument("--buffer", type=int, default=16, help="KV buffer (default 16)")
    ap.add_argument("--iterations", type=int, default=100, help="iterations (default 100)")
    ap.add_argument("--token-budget", type=int, default=20_000_000,
                    help="stop once the rollouts have generated this many tokens "
                         "(default 20,000,000)")
    ap.add_argument("--problems", type=int, default=8, help="problems per iteration (default 8)")
    ap.add_argument("--group", type=int, default=8,
                    help="samples per problem (GRPO's group; distill: teacher samples) (default 8)")
    ap.add_argument("--lr", type=float, default=2e-5, help="AdamW learning rate (default 2e-5)")
    ap.add_argument("--lr-decay-after", type=int, default=None, metavar="K",
                    help="keep --lr for K updates, then decay it linearly towards 0 at "
                         "--iterations (default: constant)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW decay (default 0)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="sampling temperature of the rollouts, top-p 1; GRPO's log-probabilities "
                         "are taken at the same temperature (default 0.7)")
    ap.add_argument("--tau", type=float, default=1.0, help="distill: KL temperature (default 1)")
    ap.add_argument("--full-weight", type=float, default=0.0,
                    help="distill: weight of a second KL term, the full-cache model's own (causal "
                         "attention) to the teacher, that keeps its full-cache accuracy; 0 is the "
                         "paper's recipe (default 0)")
    ap.add_argument("--keep-weight", type=float, default=0.0,
                    help="distill: weight of the retention loss (retention.py): the method's "
                         "score, recomputed from the model's attention at every recorded "
                         "compression, pushed above the eviction line for the entries the chain "
                         "reads later; gkv only; 0 is off (default 0)")
    ap.add_argument("--keep-need", choices=("tokens", "attention"), default="tokens",
                    help="retention loss: what the chain needs later: `tokens`, the statement "
                         "and binding tokens it reads again (task.py's chains), or `attention`, "
                         "what the frozen full-cache model attends to from then on, per (layer, KV "
                         "head), above --keep-theta (default tokens)")
    ap.add_argument("--keep-theta", type=float, default=0.3,
                    help="retention loss with --keep-need attention: the attention probability "
                         "that makes an entry needed (default 0.3)")
    ap.add_argument("--keep-tau", type=float, default=0.05,
                    help="retention loss: softplus temperature, in score units (default 0.05)")
    ap.add_argument("--keep-margin", type=float, default=0.05,
                    help="retention loss: margin above the eviction line (default 0.05)")
    ap.add_argument("--clip", type=float, default=0.2, help="GRPO's ratio clip (default 0.2)")
    ap.add_argument("--updates", type=int, default=1,
                    help="optimizer steps per batch of rollouts (default 1: on-policy)")
    ap.add_argument("--micro-batch", type=int, default=16,
                    help="sequences per forward pass (memory only) (default 16)")
    ap.add_argument("--max-new-tokens", type=int, default=1024,
                    help="rollout length cap (default 1024)")
    ap.add_argument("--eval-every", type=int, default=10,
                    help="validate every N iterations (default 10)")
    ap.add_argument("--val-problems", type=int, default=100,
                    help="validation problems (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="seed of problems and sampling (default 1)")
    ap.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    ap.add_argument("--rkv", default="build/rkv", help="the rkv binary (default build/rkv)")
    args = ap.parse_args()
    args.base = os.path.normpath(args.base)
    if args.lr_decay_after is not None and not 0 <= args.lr_decay_after < args.iterations:
        ap.error("--lr-decay-after must be at least 0 and below --iterations")
    if args.keep_weight > 0 and (args.recipe not in DISTILL or args.method != "gkv"):
        ap.error("--keep-weight needs a distill recipe and --method gkv (the loss recomputes "
                 "gkv's score)")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    record_path = os.path.join(args.out, "run.json")
    state_path = os.path.join(args.out, "state.pt")
    log_path = os.path.join(args.out, "log.csv")
    if os.path.exists(record_path):
        with open(record_path) as f:
            before = json.load(f)
        before["settings"].setdefault("full_weight", 0.0)  # runs from before the options
        for k, v in (("keep_weight", 0.0), ("keep_tau", 0.05), ("keep_margin", 0.05),
                     ("keep_need", "tokens"), ("keep_theta", 0.3)):
            before["settings"].setdefault(k, v)
        fixed = FIXED + (("iterations",) if args.lr_decay_after is not None else ())
        changed = [k for k in fixed if before["settings"].get(k) != getattr(args, k)]
        if changed:
            sys.exit(f"post_train: {args.out} was started with other settings ({', '.join(changed)}"
                     "): give the same ones, or another --out")
    else:
        record = {"recipe": args.recipe, "base_model": args.base,
                  "base_model_sha256": sha256(os.path.join(args.base, "model.safetensors")),
                  "started": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                  "rkv": run([args.rkv, "--version"], "rkv --version").strip(),
                  "validation_seed": VALIDATION_SEED, "settings": vars(args)}
        with open(record_path, "w") as f:
            json.dump(record, f, indent=1)

    # The rollouts run a private copy of rkv: a rebuild of build/rkv during a run cannot pull
    # the binary from under it.
    private = os.path.join(args.out, "rkv")
    shutil.copy(args.rkv, private + ".tmp")
    os.replace(private + ".tmp", private)
    args.rkv = private

    model = train.from_exported(args.base)
    teacher = None
    if args.recipe in DISTILL:
        teacher = train.from_exported(args.base)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=args.weight_decay)
    start, rollout_tokens, elapsed0 = 0, 0, 0.0
    if os.path.exists(state_path):
        state = torch.load(state_path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, rollout_tokens, elapsed0 = state["iteration"], state["rollout_tokens"], state[
            "elapsed"]
        print(f"resumed at iteration {start} ({rollout_tokens:,} rollout tokens)", flush=True)
    elif os.path.exists(log_path):
        os.remove(log_path)
    train.export(model, os.path.join(args.out, "model"))

    excluded = train.held_out_problems(args.family)
    val = [p for p in task.problems(VALIDATION_SEED, args.val_problems + 50, args.family)
           if p["problem"] not in excluded][: args.val_problems]
    write_problems(os.path.join(args.out, "val.jsonl"), val, "val")
    excluded |= {p["problem"] for p in val}

    work = os.path.join(args.out, "work")
    t0 = time.time() - elapsed0
    if start == 0:  # the starting point's validation, as iteration 0
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        vm, vf = validate(args, work)
        keep_checkpoint(args, 0)
        write_log(log_path, {"iteration": 0, "rollout_tokens": 0, "val_method": f"{vm:.3f}",
                             "val_full": f"{vf:.3f}", "seconds": f"{time.time() - t0:.1f}"})
        print(f"iteration 0: validation {args.method} {args.budget}: {vm:.3f}, full: {vf:.3f}",
              flush=True)
    for it in range(start, args.iterations):
        if rollout_tokens >= args.token_budget:
            print(f"token budget reached ({rollout_tokens:,} >= {args.token_budget:,})")
            break
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        problems = draw_problems(args, it, excluded)
        model.train()
        t_roll = time.time()
        samples = rollouts(args, it, work, problems)
        t_train = time.time()
        lr = learning_rate(args, it + 1)
        for group in opt.param_groups:
            group["lr"] = lr
        rollout_tokens += sum(len(s.ids) - s.prompt for s in samples)
        row = {"iteration": it + 1, "rollout_tokens": rollout_tokens,
               "reward": f"{sum(s.reward for s in samples) / len(samples):.4f}",
               "truncated": f"{sum(s.truncated for s in samples) / len(samples):.4f}",
               "lr": f"{lr:.2e}"}
        if args.recipe in DISTILL:
            stats = train_distill(args, model, teacher, opt, samples)
            row["kl"] = f"{stats['kl']:.5f}"
            if "kl_full" in stats:
                row["kl_full"] = f"{stats['kl_full']:.5f}"
            if "keep" in stats:
                row["keep"] = f"{stats['keep']:.5f}"
                row["keep_miss"] = f"{stats['keep_missed'] / max(stats['keep_needed'], 1):.4f}"
                row["keep_agree"] = f"{stats['keep_agreed'] / max(stats['keep_kept'], 1):.4f}"
        else:
            row["groups_with_signal"] = grpo_advantages(samples)
            stats = train_rl(args, model, opt, samples)
            row["loss"] = f"{stats['loss']:.5f}"
        row["trained_tokens"] = stats["trained_tokens"]
        row["grad_norm"] = f"{stats['grad_norm']:.4f}"
        row["rollout_s"], row["train_s"] = f"{t_train - t_roll:.1f}", f"{time.time() - t_train:.1f}"
        train.export(model, os.path.join(args.out, "model"))
        done = it + 1
        if done % args.eval_every == 0 or done == args.iterations:
            vm, vf = validate(args, work)
            row["val_method"], row["val_full"] = f"{vm:.3f}", f"{vf:.3f}"
            keep_checkpoint(args, done)
        row["seconds"] = f"{time.time() - t0:.1f}"
        write_log(log_path, row)
        print(" ".join(f"{k} {row[k]}" for k in LOG_FIELDS if k in row), flush=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "iteration": done,
                    "rollout_tokens": rollout_tokens, "elapsed": time.time() - t0},
                   state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
    shutil.rmtree(work, ignore_errors=True)


def write_log(path: str, row: dict) -> None:
    new = not os.path.exists(path)
    if not new:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != LOG_FIELDS:  # a log from an older version: new columns
                rows = list(reader)
                with open(path, "w", newline="") as g:
                    w = csv.DictWriter(g, fieldnames=LOG_FIELDS)
                    w.writeheader()
                    w.writerows(rows)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


if __name__ == "__main__":
    main()
