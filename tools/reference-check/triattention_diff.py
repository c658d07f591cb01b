"""rkv's TriAttention selection against the reference's TriAttention.compute_keep_indices
(WeianMao/triattention, triattention/methods/triattention.py and pruning_utils.py, run unmodified
with transformers' imports stubbed: the scoring reads none of it) on random single calls: per_head,
union and per_layer_perhead; 1 to 3 layers; query/KV heads 4/4, 8/2, 12/4, 6/2, 4/1; head sizes 16
to 64; prompts of 0 to 32; caches left by an earlier per-head round (survivors in another order
per KV head, as the reference leaves them) or fresh; normalisation on or off; the MLR or trig term
off; RoPE theta 1e4 or 1e6. The reference object is built without its loader (which needs a model
directory): the calibration statistics, HF's default rotary tables and the positions are set on it
directly. Kept position sets must be equal; a case with a top-k cut under 1e-4 is skipped.

Usage (scripts/compression-crosscheck.sh runs it): triattention_diff.py REFDIR RKV WORKDIR N SEED
REFDIR holds triattention.py and pruning_utils.py. Exits 1 on any difference.
"""
import sys
import types

import numpy as np
import torch

import triattention_ref as ref
from triattention_ref import Rotary, TopkSpy, grid, random_calibration, rotate

REFDIR, RKV, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
pu, tm = ref.load(REFDIR)
TriAttention = tm.TriAttention


def one(rng, i):
    qh, kvh = [(4, 4), (8, 2), (12, 4), (6, 2), (4, 1)][rng.integers(0, 5)]
    d = int(rng.choice([16, 32, 64]))
    L = int(rng.integers(1, 4))
    P = int(rng.choice([0, 4, 16, 32]))
    prior = bool(rng.random() < 0.5)
    n_new = int(rng.choice([64, 128, 200]))
    survivors = int(rng.choice([0, 32, 64])) if prior else 0
    N = P + survivors + n_new
    B = int(rng.integers(P + 4, N - 2)) if N - 2 > P + 4 else N - 1
    theta = float(rng.choice([10000.0, 1e6]))
    rot = Rotary(types.SimpleNamespace(head_dim=d, rope_theta=theta))
    F = d // 2
    # positions: prompt 0..P-1; survivors: a random subset of earlier positions per head, out of order; new ones consecutive
    first_new = P + survivors + int(rng.integers(0, 300)) if prior else P
    positions = []
    for h in range(kvh):
        surv = (rng.choice(np.arange(P, first_new), survivors, replace=False) if survivors else np.array([], dtype=int))
        rng.shuffle(surv)
        positions.append([int(x) for x in list(range(P)) + list(surv) + list(range(first_new, first_new + n_new))])
    R = first_new + n_new
    mode = str(rng.choice(['per_head', 'union', 'per_layer_perhead']))
    normalize = bool(rng.random() < 0.8)
    disable_mlr = bool(rng.random() < 0.15); disable_trig = bool(rng.random() < 0.15)
    qmr, qmi, qabs = random_calibration(rng, L, qh, F)
    keys_pre = grid(rng.normal(0, 1, (L, kvh, N, d)))
    keys = np.stack([np.stack([grid(rotate(keys_pre[l, h], positions[h], rot)) for h in range(kvh)]) for l in range(L)])
    # reference object without __init__
    t = object.__new__(TriAttention)
    t.config = types.SimpleNamespace(device=torch.device('cpu'), dtype=torch.float32, budget=B, layer_perhead_aggregation='max')
    t.budget = B
    t.sampled_heads = [(l, j) for l in range(L) for j in range(qh)]
    t.head_stats = {(l, j): pu.HeadFrequencyStats(torch.complex(torch.from_numpy(qmr[l, j]), torch.from_numpy(qmi[l, j])), torch.from_numpy(qabs[l, j])) for l in range(L) for j in range(qh)}
    t.rotary = rot; t.rope_style = 'half'; t.attention_scale = 1.0; t.head_dim = d
    t.omega = rot.inv_freq[:F].float(); t.offsets = pu.build_geometric_offsets(65536, torch.device('cpu'))
    t.freq_scale_sq = pu.compute_frequency_scaling(rot, d, torch.float32, torch.device('cpu')).pow(2)
    t.num_attention_heads = qh; t.num_key_value_heads = kvh; t.num_key_value_groups = qh // kvh
    t.cache_positions = list(positions[0])
    t.cache_positions_per_head = [list(p) for p in positions] if prior else None
    if not prior: positions = [list(positions[0])] * kvh
    t.cache_positions_per_layer_perhead = None
    t.absolute_position = R; t.prefix_length = P; t.divide_length = 128
    t.score_aggregation = 'mean'; t.normalize_scores = normalize; t.use_slack_trigger = True
    t.per_head_pruning = mode == 'per_head'; t.per_layer_perhead_pruning = mode == 'per_layer_perhead'
    t.layer_perhead_aggregation = 'max'
    t.disable_mlr = disable_mlr; t.disable_trig = disable_trig; t.allow_prefill_compression = False; t.generator = None
    if mode == 'per_layer_perhead' and prior:
        # each (layer, KV head) carries its head's list (rkv: a head's positions in every layer)
        t.cache_positions_per_layer_perhead = {(l, h): list(positions[h]) for l in range(L) for h in range(kvh)}
    pkv = tuple((torch.from_numpy(keys[l]).unsqueeze(0), torch.zeros(1)) for l in range(L))
    with TopkSpy() as spy:
        keep = t.compute_keep_indices(pkv, prefix_length=P)
    if spy.near_tie():
        return None
    keep = keep.numpy()
    if mode == 'union':
        want = [sorted(positions[h][i] for i in keep) for h in range(kvh)]
    elif mode == 'per_head':
        want = [sorted(positions[h][i] for i in keep[h]) for h in range(kvh)]
    else:
        want = [[sorted(positions[h][i] for i in keep[l, h]) for h in range(kvh)] for l in range(L)]
    the_case = ref.case(t, theta, dict(layers=L, q_heads=qh, kv_heads=kvh, group=qh // kvh,
                                      kv_len=N, prefix_len=P),
                        dict(key=keys.tolist(), positions=[list(p) for p in positions],
                             prefix_len=P, round_start=R),
                        (qmr, qmi, qabs), B, 128, normalize, mode, disable_mlr, disable_trig)
    desc = f'{mode} q{qh}/kv{kvh} d{d} L{L} P{P} N{N} B{B} prior={prior} norm={normalize} mlr_off={disable_mlr} trig_off={disable_trig} theta={theta}'
    try:
        got = ref.kept_position_sets(RKV, WORK, the_case, 'kept_positions')
    except RuntimeError as e:
        return (desc, str(e))
    return (desc, '' if got == want else 'kept positions differ')

ref.run_cases(one, int(sys.argv[4]), int(sys.argv[5]), "TriAttention")
