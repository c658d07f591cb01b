#!/usr/bin/env python3
"""A retention loss for post_train.py (issue 38): teach the model's own attention to make gkv keep
the cache entries its chain will read later.

Nearly every wrong chain of the first task at gkv 128 first goes wrong copying a prompt line the
cache no longer holds (docs/RESULTS.md, "Why every run stops near 0.55"). A KL to the
full-cache model cannot teach that: an evicted entry is hidden from the masked pass and from its
gradient. But gkv's choice is itself a function of the model: its score is the attention of the
last `window` queries (section 2's G-KV variant) smoothed into a global score, minus the keys'
redundancy (ALGORITHMS.md 3, 4). This module recomputes that score in torch, differentiably, at
every compression rkv recorded in a trace, and penalises each entry the chain needs later that
scores below the eviction line:

    loss = mean over (compression, layer, KV head, needed candidate i) of
           tau * softplus((c + margin - s_i) / tau)

where s_i is entry i's gkv score and c (no gradient) lies halfway between the last kept and the
first evicted candidate's score. An entry is *needed* at a compression at step s, in one
(layer, KV head), when a full-cache pass attends to it there from s on with a probability above
theta (future_attention; post_train.py --keep-need attention), or, by token kind (last_use), when
it is a statement token (`e=a`, ` e+a`) whose token recurs at or after s (the chain copies it
there) or a value binding (`3:e`) whose variable is read (` e`) at or after s (task.py's chains).
The recomputed selection is checked against rkv's recorded one: `agreed` of `kept` counts rkv's
kept candidates that the torch scores also rank in the top B - window.
"""
import math

import torch

import tokenizer

# token id -> ("statement", None) | ("binding", variable) | ("read", variable)
KINDS = {}
for _tid, (_space, _first, _mark, _last) in tokenizer.FACTORS.items():
    if _mark == ":":
        KINDS[_tid] = ("binding", _last)
    elif _mark is not None:
        KINDS[_tid] = ("statement", None)
    elif _space and _first in tokenizer.VARIABLES:
        KINDS[_tid] = ("read", _first)


def last_use(ids: list) -> list:
    """For each position, the last position at which the chain uses what the token holds (a
    statement token: its last occurrence; a binding: the last read of its variable), or -1 when
    nothing uses it."""
    last_id, last_read = {}, {}
    for j, t in enumerate(ids):
        last_id[t] = j
        kind = KINDS.get(t)
        if kind is not None and kind[0] == "read":
            last_read[kind[1]] = j
    out = []
    for i, t in enumerate(ids):
        kind = KINDS.get(t)
        if kind is None or kind[0] == "read":
            out.append(-1)
        elif kind[0] == "statement":
            out.append(last_id[t] if last_id[t] > i else -1)
        else:
            out.append(last_read.get(kind[1], -1))
    return out


def redundancy(keys: torch.Tensor, threshold: float) -> torch.Tensor:
    """ALGORITHMS.md 3 over every cached key, [pairs, n_all, d] -> [pairs, n_all]: softmax of
    the column means of the cosine similarities, each row's most recent near-duplicate (or column
    0) zeroed."""
    p, n, _ = keys.shape
    kn = keys / (keys.norm(dim=-1, keepdim=True) + 1e-8)
    s = (kn @ kn.transpose(1, 2)) * (1 - torch.eye(n))
    # the largest column above the threshold (none: 0), as argmax of (above) * column index
    last = ((s.detach() > threshold) * torch.arange(1.0, n + 1)).argmax(dim=2, keepdim=True)
    s = s.scatter(2, last, 0.0)
    return torch.softmax(s.sum(1) / n, dim=1)


def causal_attention(qk: list, b: int, group: int, length: int = None) -> torch.Tensor:
    """A full-cache (causal) pass's attention probabilities of batch row b, from its queries
    and keys: [pairs, group, t, t], pair p = layer * kv_heads + KV head. length: the sample's own
    positions in a padded batch (default all)."""
    out = []
    for q, k in qk:
        t = q.shape[2] if length is None else length
        d, kv = q.shape[3], k.shape[1]
        logits = (q[b, :, :t].reshape(kv, group, t, d) @ k[b, :, :t][:, None].transpose(-1, -2)
                  / math.sqrt(d))
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        out.append(torch.softmax(logits.masked_fill(causal, float("-inf")), dim=-1))
    return torch.cat(out)


def future_attention(probs: torch.Tensor) -> torch.Tensor:
    """[pairs, t, t] from causal_attention's probabilities: [p, s, i] is the most any position
    at or after s attends to position i in pair p (the max over the pair's query heads), i.e. how
    much the chain from s on still reads i."""
    a = probs.amax(dim=1)
    return a.flip(1).cummax(dim=1).values.flip(1)  # suffix max over query rows


class Settings:
    def __init__(self, budget: int, window: int = 16, lam: float = 0.5, decay: float = 0.8,
                 threshold: float = 0.5, tau: float = 0.05, margin: float = 0.05):
        self.budget, self.window, self.lam, self.decay = budget, window, lam, decay
        self.threshold, self.tau, self.margin = threshold, tau, margin


def sample_loss(qk: list, b: int, mask: torch.Tensor, events: list, ids: list, st: Settings,
                group: int, future: torch.Tensor = None, theta: float = 0.1) -> dict:
    """The retention loss of one sample (row b of the batch). qk: per layer (q [B, heads, t, d],
    k [B, kv_heads, t, d]) after RoPE; mask: the sample's [layers, kv, n, n] visibility; events:
    its trace's compressions; future: future_attention of a full-cache pass, when given a
    candidate is needed in a (layer, KV head) when the chain from the step on attends to it there
    with a probability above theta (else by token kind, last_use). Returns the loss (a sum over
    the needed candidates), how many candidates were needed and how many of them rkv evicted
    (missed), both also per pair (needed_by_pair, missed_by_pair), and the selection's agreement
    (agreed of kept).
    Every (layer, KV head) compressing at a step holds the same number of entries, so one step's
    compressions are scored together."""
    use = torch.tensor(last_use(ids)) if future is None else None
    t = mask.shape[-1]
    layers, kv = mask.shape[0], mask.shape[1]
    out = {"loss": 0.0, "needed": 0, "missed": 0, "kept": 0, "agreed": 0,
           "needed_by_pair": torch.zeros(layers * kv, dtype=torch.long),
           "missed_by_pair": torch.zeros(layers * kv, dtype=torch.long)}
    d = qk[0][0].shape[-1]
    q_all = torch.stack([q[b] for q, _ in qk]).reshape(layers * kv, group, -1, d)
    k_all = torch.stack([k[b] for _, k in qk]).reshape(layers * kv, -1, d)
    state = torch.zeros(layers * kv, t)  # the global score each kept entry carries
    has = torch.zeros(layers * kv, t, dtype=torch.bool)
    by_step = {}
    for e in events:
        by_step.setdefault(e["step"], []).append(e)
    keep_n = st.budget - st.window
    for step in sorted(by_step):
        evs = by_step[step]
        if step - 1 >= t:
            continue
        pairs = torch.tensor([e["layer"] * kv + e["head"] for e in evs])
        rows = []
        for e in evs:
            if e["first_reader"] == step - 1:  # a decode step: its own attention read the result
                r = mask[e["layer"], e["head"], step - 2, :step].clone()
                r[step - 1] = True
            else:  # after a prompt
                r = mask[e["layer"], e["head"], step - 1, :step]
            rows.append(r.nonzero().squeeze(1))
        if len({r.numel() for r in rows}) != 1:
            raise ValueError(f"compressions at step {step} hold different numbers of entries")
        cached = torch.stack(rows)  # [P, n_all]
        n_all = cached.shape[1]
        n = n_all - st.window
        if n <= keep_n:
            continue
        cand, win = cached[:, :n], cached[0, n:]
        qw = q_all[:, :, win][pairs]  # [P, G, w, d]
        kc = k_all[pairs[:, None], cached]  # [P, n_all, d]
        logits = qw @ kc[:, None].transpose(-1, -2) / math.sqrt(d)  # [P, G, w, n_all]
        ahead = cached[:, None, :] > win[None, :, None]  # [P, w, n_all]: after the query
        probs = torch.softmax(logits.masked_fill(ahead[:, None], float("-inf")), dim=-1)
        local = probs.max(dim=1).values.mean(dim=1)[:, :n]
        local = local / local.max(dim=1, keepdim=True).values
        g = torch.where(torch.gather(has[pairs], 1, cand),
                        torch.maximum(st.decay * torch.gather(state[pairs], 1, cand), local),
                        local)
        red = redundancy(kc, st.threshold)[:, :n]
        score = st.lam * g - (1 - st.lam) * red / red.max(dim=1, keepdim=True).values
        kept_mask = torch.stack([torch.isin(cand[i], torch.tensor(e["kept_positions"]))
                                 for i, e in enumerate(evs)])
        srt, order = torch.sort(score.detach(), dim=1, descending=True)
        top = torch.zeros_like(kept_mask).scatter(1, order[:, :keep_n], True)
        out["kept"] += int(kept_mask.sum())
        out["agreed"] += int((top & kept_mask).sum())
        c = 0.5 * (srt[:, keep_n - 1] + srt[:, keep_n])
        if future is None:
            needed = use[cand] >= step
        elif step < future.shape[1]:
            needed = torch.gather(future[pairs, step], 1, cand) > theta
        else:  # nothing reads after the last position
            needed = torch.zeros_like(kept_mask)
        if needed.any():
            gap = (c[:, None] + st.margin - score) / st.tau
            out["loss"] = out["loss"] + st.tau * (
                torch.nn.functional.softplus(gap) * needed).sum()
            out["needed_by_pair"].index_add_(0, pairs, needed.sum(1))
            out["missed_by_pair"].index_add_(0, pairs, (needed & ~kept_mask).sum(1))
        new_state = torch.zeros(len(evs), t).scatter(1, cand, g * kept_mask)
        new_has = torch.zeros(len(evs), t, dtype=torch.bool).scatter(1, cand, kept_mask)
        state = state.index_copy(0, pairs, new_state)
        has = has.index_copy(0, pairs, new_has)
    out["needed"] = int(out["needed_by_pair"].sum())
    out["missed"] = int(out["missed_by_pair"].sum())
    return out


def evicted_share(probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[pairs, t]: the share of a full-cache pass's attention (causal_attention's
    probabilities; the max over each pair's query heads) that falls on entries the mask has
    evicted, per (layer, KV head) and position."""
    t = probs.shape[-1]
    evicted = (~mask[:, :, :t, :t]).reshape(-1, 1, t, t).float()
    return (probs * evicted).sum(-1).amax(dim=1)


def main() -> None:
    """For an `rkv eval --methods gkv --trace-dir` run: how many entries the full-cache teacher
    attends to later (above --theta) gkv evicted, per (layer, KV head) and for right and wrong
    samples; how well the torch score reproduces rkv's choice; and, for each wrong sample, where
    it first departs from the teacher's greedy choice and how much of the teacher's attention
    there, per (layer, KV head), falls on evicted entries."""
    import argparse
    import json
    import os

    import masks
    import train

    ap = argparse.ArgumentParser(description=main.__doc__.split(";")[0])
    ap.add_argument("model", help="the model the traces were generated with")
    ap.add_argument("run", help="an `rkv eval --methods gkv --trace-dir TRACES` output directory")
    ap.add_argument("traces", help="its trace directory")
    ap.add_argument("--budget", type=int, required=True, help="the run's gkv budget")
    ap.add_argument("--teacher", default="models/rkv-tiny-reasoner",
                    help="the full-cache model (default models/rkv-tiny-reasoner)")
    ap.add_argument("--theta", type=float, default=0.3,
                    help="attention that makes an entry needed (default 0.3)")
    ap.add_argument("--limit", type=int, default=0, help="samples to read (default all)")
    args = ap.parse_args()
    model, teacher = train.from_exported(args.model), train.from_exported(args.teacher)
    st = Settings(args.budget)
    group = model.c.heads // model.c.kv_heads
    pairs = model.c.layers * model.c.kv_heads
    tot = {"kept": 0, "agreed": 0}
    need = {(p, ok): [0, 0] for p in range(pairs) for ok in (True, False)}
    departures, everywhere = [], []
    with open(os.path.join(args.run, "samples.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [r for r in recs if r["method"] == "gkv"][: args.limit or None]
    for r in recs:
        tr = masks.Trace(os.path.join(args.traces, r["trace"]))
        if not tr.events:
            continue
        m = masks.visibility(tr)
        ids = torch.tensor([tr.ids])
        with torch.no_grad():
            t_logits, tqk = teacher.forward_with_qk(ids)
            greedy = t_logits[0].argmax(-1)
            probs = causal_attention(tqk, 0, group)
            qk = model.forward_with_qk(ids, [m[i][None] for i in range(tr.layers)])[1]
            o = sample_loss(qk, 0, m, tr.events, tr.ids, st, group, future_attention(probs),
                            args.theta)
            tot["kept"] += o["kept"]
            tot["agreed"] += o["agreed"]
            for p in range(pairs):
                need[(p, bool(r["correct"]))][0] += int(o["missed_by_pair"][p])
                need[(p, bool(r["correct"]))][1] += int(o["needed_by_pair"][p])
            share = evicted_share(probs, m)
            everywhere.append(share[:, tr.prompt_tokens - 1:])
            if not r["correct"]:
                first = [j for j in range(tr.prompt_tokens - 1, len(tr.ids) - 1)
                         if greedy[j] != tr.ids[j + 1]]
                if first:
                    departures.append(share[:, first[0]])
    print(f"{len(recs)} samples; torch's top-k agrees with rkv's kept set on "
          f"{tot['agreed'] / max(tot['kept'], 1):.4f}")
    print(f"needed entries (teacher attention above {args.theta} later) that gkv evicted:")
    for p in range(pairs):
        (rm, rn), (wm, wn) = need[(p, True)], need[(p, False)]
        print(f"  layer {p // model.c.kv_heads} KV head {p % model.c.kv_heads}: right samples "
              f"{rm} of {rn}, wrong samples {wm} of {wn}")
    if departures:
        d, e = torch.stack(departures), torch.cat(everywhere, dim=1)
        print(f"share of the teacher's attention on evicted entries above 0.9, per (layer, KV "
              f"head): at the first departure of the {len(departures)} wrong samples from the "
              f"teacher's greedy token, and at all {e.shape[1]} generated positions:")
        for p in range(pairs):
            print(f"  layer {p // model.c.kv_heads} KV head {p % model.c.kv_heads}: "
                  f"{int((d[:, p] > 0.9).sum())} of {d.shape[0]}, "
                  f"{float((e[p] > 0.9).float().mean()):.3f} of all positions")


if __name__ == "__main__":
    main()
