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
import sys
import types

import torch

import triattention_ref as ref
from triattention_ref import Rotary, TopkSpy, grid, random_calibration, rotate

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
    stream = grid(rotate(pre, list(range(T)), rot))
    qmr, qmi, qabs = random_calibration(rng, L, qh, F)
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
    the_case = ref.case(comp, theta, dict(layers=L, q_heads=qh, kv_heads=kvh, group=qh // kvh,
                                         prompt_len=P, n_tokens=T),
                        dict(prompt_len=P, n_tokens=T, stream_key=stream.tolist()),
                        (qmr, qmi, qabs), B, div, normalize, mode)
    desc = f'{mode} q{qh}/kv{kvh} d{d} L{L} P{P} B{B} divide {div} T{T} norm={normalize} theta={theta}'
    try:
        got = ref.kept_position_sets(RKV, WORK, the_case, 'final_cache_positions')
    except RuntimeError as e:
        return (desc, str(e))
    return (desc, '' if got == want else 'final cache positions differ')

ref.run_cases(one, int(sys.argv[4]), int(sys.argv[5]), "TriAttention streams")
