"""rkv's TriAttention over whole streams against the reference's own bookkeeping: the reference's
apply_triattention_patch (WeianMao/triattention, triattention/methods/triattention.py, unmodified;
transformers stubbed, HF's default rotary embedding supplied) wraps a fake model whose forward
appends given post-RoPE keys of the tokens at the positions it is called with (it asserts they are
the true ones), and the stream runs token by token through the patched forward: the slack trigger,
the positions kept per KV head (per layer too) and every compression are the reference's. The
same stream, as a golden-format rounds case, goes through rkv policy-run; the final cache position
sets must be equal (any round's difference carries into them). Random: per_head, union and
per_layer_perhead, 1 to 3 layers, heads 4/4, 8/2, 12/4, 6/2, 4/1, head sizes 16 to 64, prompts of
1 to 24, budgets up to 80, divide lengths 16 to 64, 1 to 4 rounds, normalisation on or off. The
tie-break noise is off; a stream with a top-k cut under 1e-4 is skipped.

Usage (scripts/compression-crosscheck.sh runs it): triattention_rounds_diff.py REFDIR RKV WORKDIR N SEED
REFDIR holds triattention.py and pruning_utils.py. Exits 1 on any difference.
"""
import contextlib
import io
import json
import subprocess
import sys
import types

import numpy as np
import torch

import triattention_ref as ref
from triattention_ref import Rotary, TopkSpy, grid

REFDIR, RKV, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
pu, tm = ref.load(REFDIR)


class FakeModel(torch.nn.Module):
    """Its forward appends the given post-RoPE keys of the tokens at the positions it is called with."""
    def __init__(self, stream):  # stream [L][Hkv][T][d]
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.stream = torch.from_numpy(stream)
    def forward(self, input_ids=None, position_ids=None, past_key_values=None, cache_position=None, **kw):
        n = input_ids.shape[1]
        past = past_key_values if past_key_values else None
        if position_ids is None:
            assert past is None
            position_ids = torch.arange(n).unsqueeze(0)
        pos = position_ids[0]
        assert torch.equal(input_ids[0], pos), 'called with the wrong positions'
        new = []
        for l in range(self.stream.shape[0]):
            k = self.stream[l][:, pos].unsqueeze(0)
            v = torch.zeros_like(k)
            if past is not None:
                k = torch.cat([past[l][0], k], 2); v = torch.cat([past[l][1], v], 2)
            new.append((k, v))
        return ref._Container(logits=None, past_key_values=tuple(new))

def one(rng, i):
    qh, kvh = [(4, 4), (8, 2), (12, 4), (6, 2), (4, 1)][rng.integers(0, 5)]
    d = int(rng.choice([16, 32, 64])); L = int(rng.integers(1, 4)); F = d // 2
    P = int(rng.choice([1, 8, 20, 24])); B = int(rng.choice([P + 16, 48, 64, 80])); B = max(B, P + 8)
    div = int(rng.choice([16, 48, 64]))
    T = P + int(rng.integers(B + div, B + 4 * div + 40))
    mode = str(rng.choice(['per_head', 'union', 'per_layer_perhead']))
    normalize = bool(rng.random() < 0.8)
    theta = float(rng.choice([10000.0, 1e6]))
    ref.CONFIG.clear(); ref.CONFIG.update(model_type='qwen3', rope_theta=theta, head_dim=d, num_attention_heads=qh, num_key_value_heads=kvh,
                            num_hidden_layers=L, rope_scaling=None, hidden_size=qh * d, max_position_embeddings=65536)
    rot = Rotary(types.SimpleNamespace(**ref.CONFIG))
    pre = grid(rng.normal(0, 1, (L, kvh, T, d)))
    cos, sin = rot(None, torch.arange(T).unsqueeze(0))
    kt = torch.from_numpy(pre); rh = torch.cat((-kt[..., F:], kt[..., :F]), -1)
    stream = grid((kt * cos[0] + rh * sin[0]).numpy())
    qmr = rng.normal(0, 1, (L, qh, F)).astype(np.float32); qmi = rng.normal(0, 1, (L, qh, F)).astype(np.float32)
    qabs = (np.sqrt(qmr ** 2 + qmi ** 2) * rng.uniform(1.0, 1.6, (L, qh, F))).astype(np.float32)
    stats = {f'layer{l:02d}_head{j:02d}': dict(q_mean_real=torch.from_numpy(qmr[l, j]), q_mean_imag=torch.from_numpy(qmi[l, j]), q_abs_mean=torch.from_numpy(qabs[l, j])) for l in range(L) for j in range(qh)}
    torch.save({'metadata': {'sampled_heads': [[l, j] for l in range(L) for j in range(qh)], 'head_dim': d}, 'stats': stats}, WORK + '/stats.pt')
    model = FakeModel(stream)
    with contextlib.redirect_stdout(io.StringIO()):
        tm.apply_triattention_patch(model, stats_path=WORK + '/stats.pt', model_path=WORK, kv_budget=B, normalize_scores=normalize,
                                    count_prompt_tokens=True, divide_length=div, use_slack_trigger=True,
                                    per_head_pruning=mode == 'per_head', per_layer_perhead_pruning=mode == 'per_layer_perhead',
                                    pruning_seed=0)
    comp = model._triattention_compressor
    comp.generator = None  # no tie-break noise: near-ties are skipped below
    with TopkSpy() as spy:
        out = model.forward(input_ids=torch.arange(P).unsqueeze(0), past_key_values=None)
        comp.generator = None  # the prefill reset the state and its generator
        pkv = out.past_key_values
        for t in range(P, T):
            out = model.forward(input_ids=torch.tensor([[t]]), past_key_values=pkv)
            pkv = out.past_key_values
    if spy.near_tie():
        return None
    if mode == 'per_layer_perhead':
        if comp.cache_positions_per_layer_perhead is None: return None
        want = [[sorted(comp.cache_positions_per_layer_perhead[(l, h)]) for h in range(kvh)] for l in range(L)]
    elif mode == 'per_head':
        if comp.cache_positions_per_head is None: return None
        want = [sorted(p) for p in comp.cache_positions_per_head]
    else:
        want = [sorted(comp.cache_positions)] * kvh
    case = dict(format_version=1, case_id=f'r{i}', method='triattention', preset='x',
                params=dict(budget=B, divide_length=div, use_slack_trigger=True, count_prompt_tokens=True, allow_prefill_compression=False,
                            normalize_scores=normalize, score_aggregation='mean', offset_max_length=65536, pruning_seed=0,
                            layer_perhead_aggregation='max', disable_mlr=False, disable_trig=False, selection_mode=mode, window_size=None),
                rope=dict(style='half', theta=theta, head_dim=d, rope_type='default', attention_scaling=1.0,
                          omega=comp.omega.tolist(), freq_scale_sq=comp.freq_scale_sq.tolist(), offsets=[float(x) for x in comp.offsets.tolist()]),
                shapes=dict(batch=1, layers=L, q_heads=qh, kv_heads=kvh, group=qh // kvh, head_dim=d, freq_count=F, prompt_len=P, n_tokens=T),
                inputs=dict(prompt_len=P, n_tokens=T, stream_key=stream.tolist(),
                            calibration=dict(q_mean_real=qmr.tolist(), q_mean_imag=qmi.tolist(), q_abs_mean=qabs.tolist())),
                expected={})
    path = WORK + '/case.json'; json.dump(case, open(path, 'w'))
    o = subprocess.run([RKV, 'policy-run', '--case', path], capture_output=True, text=True)
    desc = f'{mode} q{qh}/kv{kvh} d{d} L{L} P{P} B{B} divide {div} T{T} norm={normalize} theta={theta}'
    if o.returncode != 0:
        return (desc, 'rkv error: ' + o.stderr[-300:])
    got = json.loads(o.stdout)['final_cache_positions']
    got = [[sorted(x) for x in layer] for layer in got] if mode == 'per_layer_perhead' else [sorted(x) for x in got]
    return (desc, '' if got == want else 'final cache positions differ')

ref.run_cases(one, int(sys.argv[4]), int(sys.argv[5]), "TriAttention streams")
