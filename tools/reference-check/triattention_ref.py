"""Loads TriAttention's reference files (triattention.py, pruning_utils.py from
WeianMao/triattention) for triattention_diff.py and triattention_rounds_diff.py, unmodified but
for their imports: transformers is stubbed (AutoConfig answers with `CONFIG`, the cache and output
classes are plain containers) and HF's default rotary embedding is supplied (`Rotary`). The
scoring reads nothing else of transformers. Also the two scripts' common pieces: random
calibration statistics, RoPE on keys, the case's fields, its run through rkv policy-run, and the
loop that runs N random cases."""
import sys
import types

import numpy as np
import torch

from compression_diff import grid, policy_run  # noqa: F401 (grid: for the two scripts)

torch.set_num_threads(1)
CONFIG = {}  # the model config AutoConfig.from_pretrained answers with


class _AutoConfig:
    @staticmethod
    def from_pretrained(path, trust_remote_code=True):
        return types.SimpleNamespace(**CONFIG)


class _Container:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Rotary(torch.nn.Module):
    """HF's default rotary embedding (half style): cos/sin of float32 inv_freq * position."""

    def __init__(self, config=None, device=None):
        super().__init__()
        d = config.head_dim
        self.config = config
        exponent = torch.arange(0, d, 2, dtype=torch.int64).float() / d
        self.register_buffer("inv_freq", 1.0 / (config.rope_theta ** exponent), persistent=False)
        self.attention_scaling = 1.0

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


def load(refdir):
    """Returns (pruning_utils, triattention) as modules."""
    tf = types.ModuleType("transformers")
    tf.AutoConfig = _AutoConfig
    cu = types.ModuleType("transformers.cache_utils")
    cu.Cache = cu.DynamicCache = type("Cache", (), {})
    mo = types.ModuleType("transformers.modeling_outputs")
    mo.CausalLMOutputWithPast = _Container
    sys.modules.update({"transformers": tf, "transformers.cache_utils": cu,
                        "transformers.modeling_outputs": mo})
    src = open(refdir + "/pruning_utils.py").read()
    # The rotary classes come from transformers' model files: replaced by Rotary.
    a = src.index("from transformers import AutoConfig")
    b = src.index("\n\n", src.index("LlamaRotaryEmbedding"))
    src = src[:a] + "from transformers import AutoConfig\nLlamaRotaryEmbedding = None\n" + src[b:]
    pu = types.ModuleType("pruning_utils")
    sys.modules["pruning_utils"] = pu
    exec(compile(src, "pruning_utils.py", "exec"), pu.__dict__)
    pu.Qwen3RotaryEmbedding = Rotary
    src = open(refdir + "/triattention.py").read()
    src = src.replace("from .pruning_utils import", "from pruning_utils import").replace(
        "from ..common.stats_utils import validate_stats_metadata",
        "def validate_stats_metadata(*a, **k): pass")
    tm = types.ModuleType("triattention_reference")
    sys.modules["triattention_reference"] = tm
    exec(compile(src, "triattention.py", "exec"), tm.__dict__)
    return pu, tm


def random_calibration(rng, layers, q_heads, freqs):
    """The statistics' three means [layers][q_heads][freqs] (q_abs_mean at least |q_mean|)."""
    re = rng.normal(0, 1, (layers, q_heads, freqs)).astype(np.float32)
    im = rng.normal(0, 1, (layers, q_heads, freqs)).astype(np.float32)
    ab = (np.sqrt(re ** 2 + im ** 2) * rng.uniform(1.0, 1.6, (layers, q_heads, freqs)))
    return re, im, ab.astype(np.float32)


def rotate(keys, positions, rotary):
    """Pre-RoPE keys [..., N, d] rotated to positions [N] (half style)."""
    cos, sin = rotary(None, torch.tensor(positions).unsqueeze(0))
    k = torch.from_numpy(keys)
    half = k.shape[-1] // 2
    return (k * cos[0] + torch.cat((-k[..., half:], k[..., :half]), -1) * sin[0]).numpy()


def case(compressor, theta, shapes, inputs, calibration, budget, divide, normalize, mode,
         disable_mlr=False, disable_trig=False):
    """A golden-format TriAttention case: the reference's argument names as `params`, the rope
    tables of `compressor` (a reference TriAttention object), `calibration` = (re, im, abs)."""
    re, im, ab = calibration
    d = compressor.head_dim
    return dict(
        format_version=1, case_id="random", method="triattention", preset="random",
        params=dict(budget=budget, divide_length=divide, use_slack_trigger=True,
                    count_prompt_tokens=True, allow_prefill_compression=False,
                    normalize_scores=normalize, score_aggregation="mean",
                    offset_max_length=65536, pruning_seed=0, layer_perhead_aggregation="max",
                    disable_mlr=disable_mlr, disable_trig=disable_trig, selection_mode=mode,
                    window_size=None),
        rope=dict(style="half", theta=theta, head_dim=d, rope_type="default",
                  attention_scaling=1.0, omega=compressor.omega.tolist(),
                  freq_scale_sq=compressor.freq_scale_sq.tolist(),
                  offsets=[float(x) for x in compressor.offsets.tolist()]),
        shapes=dict(batch=1, head_dim=d, freq_count=d // 2, **shapes),
        inputs=dict(inputs, calibration=dict(q_mean_real=re.tolist(), q_mean_imag=im.tolist(),
                                             q_abs_mean=ab.tolist())),
        expected={})


def kept_position_sets(rkv, work, the_case, field):
    """rkv policy-run's `field` (positions per KV head, per layer too for per_layer_perhead), each
    list sorted."""
    got = policy_run(rkv, work, the_case)[field]
    if the_case["params"]["selection_mode"] == "per_layer_perhead":
        return [[sorted(x) for x in layer] for layer in got]
    return [sorted(x) for x in got]


class TopkSpy:
    """Records what every torch.topk / Tensor.topk call ranks, and its k."""

    def __enter__(self):
        self.calls = []
        self.orig = (torch.topk, torch.Tensor.topk)
        spy = self

        def f(x, *a, **kw):
            spy.calls.append((x.detach().clone(), kw.get("k", a[0] if a else None)))
            return spy.orig[0](x, *a, **kw)

        def m(x, *a, **kw):
            spy.calls.append((x.detach().clone(), kw.get("k", a[0] if a else None)))
            return spy.orig[1](x, *a, **kw)

        torch.topk, torch.Tensor.topk = f, m
        return self

    def __exit__(self, *exc):
        torch.topk, torch.Tensor.topk = self.orig

    def near_tie(self, gap=1e-4):
        for x, k in self.calls:
            v = np.sort(x.double().numpy())[::-1]
            if k is not None and k < len(v) and np.isfinite(v[k]) and v[k - 1] - v[k] < gap:
                return True
        return False


def run_cases(one, n, seed, label):
    """one(rng, i) -> None (skipped) or (description, error or ""). Prints a tally, exits 1 on any
    difference."""
    rng = np.random.default_rng(seed)
    ok = skipped = bad = 0
    for i in range(n):
        r = one(rng, i)
        if r is None:
            skipped += 1
        elif not r[1]:
            ok += 1
        else:
            bad += 1
            print(f"DIFFERS: {r[0]}: {r[1]}", flush=True)
    print(f"{label}: {ok} equal, {bad} different, {skipped} skipped (near-tie at a cut)")
    sys.exit(1 if bad else 0)
