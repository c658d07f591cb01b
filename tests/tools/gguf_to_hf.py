#!/usr/bin/env python3
"""gguf_to_hf.py - write the Hugging Face checkpoint a GGUF file was converted from.

Reads a GGUF file (qwen3moe, gpt-oss, qwen35, qwen35moe) and writes OUT_DIR/config.json and
OUT_DIR/model.safetensors: the checkpoint that llama.cpp's converter (convert_hf_to_gguf.py and
its conversion/ package, ngxson/llama.cpp 3f545bec) turns into that GGUF file. It is the test
oracle for loading the same models from safetensors: rkv must give the same logits for the GGUF
file and for the directory this script writes. It is written independently of rkv's loader and
needs only Debian's python3 with numpy (no PyPI packages).

    python3 tests/tools/gguf_to_hf.py IN.gguf OUT_DIR [options]
        --experts-f32          gpt-oss: write dequantized float32 experts even if the GGUF experts
                               are MXFP4 (default: keep MXFP4 as HF *_blocks / *_scales)
        --experts-layout L     qwen3moe / qwen35moe routed experts: "per-expert" or "fused"
                               (defaults: qwen3moe per-expert, qwen35moe fused; see below)
        --text-only            qwen35 / qwen35moe: write the text-only *ForCausalLM checkpoint
                               (default: the published *ForConditionalGeneration layout)
        --check                after writing, run the checks described at the end
    python3 tests/tools/gguf_to_hf.py --to-gguf-check IN.gguf HF_DIR     checks only
    python3 tests/tools/gguf_to_hf.py --self-test [GOLDEN_ARCH_DIR]      all goldens, all options
        (GOLDEN_ARCH_DIR defaults to $RKV_SHARED_DIR/golden/arch, else <repo>/../shared/golden/arch)

Exit status 0 on success; 1 with a one-line "error: ..." for an unknown architecture, an
unsupported tensor type, a malformed file, a tensor this tool does not know, or a failed check.

==================================================================================================
CONVENTIONS
==================================================================================================
GGUF `ne` is listed fastest axis first. The numpy/torch shape of the same bytes is `ne` reversed:
ne {a, b, c} <-> shape [c, b, a]. HF nn.Linear weights are [out, in] and GGUF stores ne {in, out}:
the SAME bytes, so every 2-D linear below is copied unchanged (no transpose) unless a transform is
named. "GGUF [x, y]" below means the numpy shape (reversed ne). Symbols:
    H  hidden size (embedding_length)        V  vocab            L  block_count
    Hq / Hkv / D  attention heads / kv heads / head dim (key_length; value_length must equal it)
    E  experts   F  expert ff (expert_feed_forward_length)   Fs  shared-expert ff   Fd  dense ff
All tensors are written as safetensors F32, except the MXFP4 *_blocks / *_scales (U8). GGUF F16
and BF16 inputs are widened to F32 exactly. Other GGUF tensor types are refused.

Common to every architecture (names from gguf-py tensor_mapping.py):
    token_embd.weight    GGUF [V, H]  <->  model.embed_tokens.weight  [V, H]
    output_norm.weight   GGUF [H]     <->  model.norm.weight          [H]   (qwen35*: -1, below)
    output.weight        GGUF [V, H]  <->  lm_head.weight             [V, H]
    No output.weight in the GGUF -> no lm_head.weight and tie_word_embeddings = true.

==================================================================================================
qwen3moe  <-  Qwen3MoeForCausalLM, model_type "qwen3_moe"
==================================================================================================
Converter: conversion/qwen.py Qwen3MoeModel (Qwen2MoeModel.modify_tensors: per-expert tensors are
stacked on a new axis 0; fused gate_up_proj is split on axis -2: first F rows gate, last F up).
No value transforms: Qwen3MoeRMSNorm multiplies by w (no 1+w), and HF q/k are already in the NeoX
(rotate-half) order llama.cpp uses, so q/k are not permuted. Per layer N (prefix model.layers.N.):
    blk.N.attn_norm.weight     [H]          input_layernorm.weight
    blk.N.attn_q.weight        [Hq*D, H]    self_attn.q_proj.weight
    blk.N.attn_k.weight        [Hkv*D, H]   self_attn.k_proj.weight
    blk.N.attn_v.weight        [Hkv*D, H]   self_attn.v_proj.weight
    blk.N.attn_output.weight   [H, Hq*D]    self_attn.o_proj.weight
    blk.N.attn_q_norm.weight   [D]          self_attn.q_norm.weight
    blk.N.attn_k_norm.weight   [D]          self_attn.k_norm.weight
    blk.N.ffn_norm.weight      [H]          post_attention_layernorm.weight
    blk.N.ffn_gate_inp.weight  [E, H]       mlp.gate.weight            (router)
  --experts-layout per-expert (default; the published Qwen3-30B-A3B checkpoints):
    blk.N.ffn_gate_exps.weight [E, F, H]    mlp.experts.<e>.gate_proj.weight [F, H] = GGUF[e]
    blk.N.ffn_up_exps.weight   [E, F, H]    mlp.experts.<e>.up_proj.weight   [F, H] = GGUF[e]
    blk.N.ffn_down_exps.weight [E, H, F]    mlp.experts.<e>.down_proj.weight [H, F] = GGUF[e]
  --experts-layout fused (transformers v5 in-memory layout, Qwen2MoeExperts):
    mlp.experts.gate_up_proj [E, 2F, H] = concat(gate [E,F,H], up [E,F,H]) on axis 1 (gate rows
    0..F-1, up rows F..2F-1; NOT interleaved);  mlp.experts.down_proj [E, H, F] = GGUF unchanged.
Config: router softmax over all experts, top-k, renormalised -> norm_topk_prob = true (llama.cpp
hard-codes it for qwen3moe; there is no GGUF key). GGUF key -> config key:
    context_length -> max_position_embeddings, embedding_length -> hidden_size,
    block_count -> num_hidden_layers, feed_forward_length -> intermediate_size,
    attention.head_count -> num_attention_heads, attention.head_count_kv -> num_key_value_heads,
    attention.key_length -> head_dim, rope.freq_base -> rope_theta (rope_scaling null),
    attention.layer_norm_rms_epsilon -> rms_norm_eps, expert_count -> num_experts,
    expert_used_count -> num_experts_per_tok, expert_feed_forward_length -> moe_intermediate_size,
    vocab = rows of token_embd.weight -> vocab_size.
Floats are written as the shortest decimal that reads back to the GGUF float32 (1e-06, not
9.99999997e-07).

==================================================================================================
gpt-oss  <-  GptOssForCausalLM, model_type "gpt_oss"
==================================================================================================
Converter: conversion/gpt_oss.py GptOssModel (filter_tensors appends ".weight" to sinks;
modify_tensors splits gate_up; generate_extra_tensors + repack_mxfp4 + transform_nibble_layout for
MXFP4). Norms are plain multipliers (GptOssRMSNorm: w*x). Per layer N (prefix model.layers.N.):
    blk.N.attn_norm.weight             [H]        input_layernorm.weight
    blk.N.post_attention_norm.weight   [H]        post_attention_layernorm.weight   (pre-FFN norm)
    blk.N.attn_{q,k,v}.{weight,bias}              self_attn.{q,k,v}_proj.{weight,bias}
    blk.N.attn_output.{weight,bias}               self_attn.o_proj.{weight,bias}
    blk.N.attn_sinks.weight            [Hq]       self_attn.sinks [Hq]
    blk.N.ffn_gate_inp.{weight,bias}   [E,H],[E]  mlp.router.{weight,bias}
  Float experts (f32 GGUF, or --experts-f32). HF keeps them input-major ([in, out] per expert) with
  gate and up INTERLEAVED on the last axis (GptOssExperts: gate = gate_up[..., ::2], up = [..., 1::2]):
    mlp.experts.gate_up_proj      [E, H, 2F]: [e, h, 2f]   = ffn_gate_exps.weight[e, f, h]
                                              [e, h, 2f+1] = ffn_up_exps.weight  [e, f, h]
    mlp.experts.gate_up_proj_bias [E, 2F]:    [e, 2f] = ffn_gate_exps.bias[e, f], [e, 2f+1] = ffn_up_exps.bias[e, f]
    mlp.experts.down_proj         [E, F, H]:  [e, f, h] = ffn_down_exps.weight[e, h, f]  (transpose per expert)
    mlp.experts.down_proj_bias    [E, H]    = ffn_down_exps.bias [E, H]
    (converter: gate_up.transpose(-1,-2) then rows ::2 -> gate, 1::2 -> up; down.transpose(-1,-2);
    bias [..., ::2] / [..., 1::2].)
  MXFP4 experts (GGUF type MXFP4, default). HF (OpenAI) keeps them OUTPUT-major, i.e. the
  transposed orientation of the float params; transformers' convert_moe_packed_tensors dequantizes
  to [E, out, in] and transposes to the float layout. Blocks of 32 run along the input axis:
    mlp.experts.gate_up_proj_blocks U8 [E, 2F, H/32, 16], gate_up_proj_scales U8 [E, 2F, H/32]
        row 2f = gate row f, row 2f+1 = up row f (rows interleaved; converter: [:, ::2] gate, [:, 1::2] up)
    mlp.experts.down_proj_blocks    U8 [E, H, F/32, 16],  down_proj_scales    U8 [E, H, F/32]
    the biases stay F32 as above (gate_up_proj_bias interleaved on its last axis).
    GGUF MXFP4 block = 17 bytes for 32 values along ne0: byte 0 = E8M0 exponent e; bytes 1..16 = qs;
        value j (j < 16) = low nibble of qs[j], value j+16 = high nibble of qs[j];
        value = kvalues[code] * 2^(e-127) / 2, kvalues = {0,1,2,3,4,6,8,12,0,-1,-2,-3,-4,-6,-8,-12}.
    HF MXFP4 block = 16 bytes + 1 scale byte: value 2i = low nibble of byte i, value 2i+1 = high
        nibble of byte i; value = FP4_VALUES[code] * 2^(scale-127), FP4_VALUES = {0,.5,1,1.5,2,3,4,6,
        -0,-.5,-1,-1.5,-2,-3,-4,-6}. The 4-bit codes and the exponent byte are identical; only the
        nibble positions differ:
        HF scale  = GGUF byte 0
        HF byte i = code(2i) | code(2i+1) << 4,  code(j) = qs[j] & 15 (j < 16), qs[j-16] >> 4 (j >= 16)
        GGUF qs[j] = hf(j) | hf(j+16) << 4,      hf(k) = (HF byte k//2 >> 4*(k%2)) & 15
    config gets quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert":
        ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}.
    --experts-f32 dequantizes exactly (every MXFP4 value is an exact float32).
Config: attention_bias true; layer_types: layer i is "sliding_attention" when i is even, else
"full_attention" (llama.cpp: swa pattern period 2, il % 2 == 0 sliding; GptOssConfig's default);
sliding_window <- attention.sliding_window; rope_theta <- rope.freq_base; rope_scaling (as in the
published config.json) = {"rope_type": "yarn", "factor" <- rope.scaling.factor,
"original_max_position_embeddings" <- rope.scaling.original_context_length, "beta_fast" <-
rope.scaling.yarn_beta_fast (32), "beta_slow" <- rope.scaling.yarn_beta_slow (1), "truncate": false};
intermediate_size <- expert_feed_forward_length (the converter writes both feed_forward_length and
expert_feed_forward_length from it); num_local_experts <- expert_count; num_experts_per_tok <-
expert_used_count; head_dim <- key_length; swiglu_limit 7.0; other keys as qwen3moe.

==================================================================================================
qwen35 / qwen35moe  <-  Qwen3.5 (transformers models/qwen3_5, qwen3_5_moe)
==================================================================================================
Classes: default (published checkpoints) Qwen3_5ForConditionalGeneration, model_type "qwen3_5" /
Qwen3_5MoeForConditionalGeneration, "qwen3_5_moe", with the text model under "text_config"
(model_type "qwen3_5_text" / "qwen3_5_moe_text") and tensors under "model.language_model."
(lm_head.weight stays top level). --text-only: Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM, flat
config with model_type "qwen3_5_text" / "qwen3_5_moe_text", tensors under "model.". The converter
accepts both (TextModel.filter_tensors drops "language_model."; text_config is merged into the
root). Below, P = "model.language_model." (default) or "model." (--text-only).
Converter: conversion/qwen.py Qwen3_5TextModel / Qwen3_5MoeTextModel -> _LinearAttentionVReorderBase
(v-head reorder) -> Qwen3NextModel.modify_tensors (A_log, dt_bias, conv1d, norm +1) ->
Qwen2MoeModel.modify_tensors (experts).

Norms. HF Qwen3_5RMSNorm computes (1 + w) * x (weights initialised to 0); llama.cpp multiplies by
the stored weight, so the converter ADDS 1 to every tensor whose HF name ends in "norm.weight"
EXCEPT linear_attn.norm.weight (Qwen3NextRMSNormGated: plain w). Reverse: HF = GGUF - 1 for
attn_norm, post_attention_norm, attn_q_norm, attn_k_norm, output_norm; ssm_norm copied as is.

Gated DeltaNet dims (GGUF key -> config key): ssm.group_count -> linear_num_key_heads Hk,
ssm.time_step_rank -> linear_num_value_heads Hv, ssm.state_size -> linear_key_head_dim dk,
ssm.inner_size / Hv -> linear_value_head_dim dv, ssm.conv_kernel -> linear_conv_kernel_dim K;
r = Hv / Hk; C = 2*Hk*dk + Hv*dv conv channels.

V-head order. HF keeps v heads GROUPED by k head: v head h uses q/k head h // r (repeat_interleave).
The converter reorders them to the TILED order that ggml broadcasting wants: GGUF v head g uses q/k
head g mod Hk (_LinearAttentionVReorderBase._reorder_v_heads: view the axis as [Hk, r, s], swap the
first two, flatten). Along an axis made of Hv blocks of s elements:
    GGUF block g  = HF block (g mod Hk) * r + g // Hk
    HF block h    = GGUF block (h mod r) * Hk + h // r
It applies (only when Hk != Hv) to:
    attn_qkv     rows [2*Hk*dk, C)  (v part; the q rows [0,Hk*dk) and k rows [Hk*dk,2Hk*dk) unchanged), s = dv
    attn_gate    rows, s = dv       ssm_beta, ssm_alpha  rows, s = 1
    ssm_dt.bias, ssm_a  s = 1       ssm_conv1d  channels [2*Hk*dk, C), s = dv
    ssm_out      COLUMNS (input axis), s = dv
Not to ssm_norm (one [dv] vector shared by all heads) nor to the full-attention layers.

Per layer N, linear-attention layers (prefix P + "layers.N."):
    blk.N.attn_norm.weight        [H]          input_layernorm.weight            GGUF - 1
    blk.N.post_attention_norm.weight [H]       post_attention_layernorm.weight   GGUF - 1
    blk.N.attn_qkv.weight         [C, H]       linear_attn.in_proj_qkv.weight    v rows reordered
    blk.N.attn_gate.weight        [Hv*dv, H]   linear_attn.in_proj_z.weight      rows reordered
    blk.N.ssm_beta.weight         [Hv, H]      linear_attn.in_proj_b.weight      rows reordered
    blk.N.ssm_alpha.weight        [Hv, H]      linear_attn.in_proj_a.weight      rows reordered
    blk.N.ssm_dt.bias             [Hv]         linear_attn.dt_bias               reordered
                                               (the converter renames it to dt_proj.bias)
    blk.N.ssm_a                   [Hv]         linear_attn.A_log                 reordered; A_log = log(-ssm_a)
                                               (the converter writes ssm_a = -exp(A_log))
    blk.N.ssm_conv1d.weight       [C, K]       linear_attn.conv1d.weight [C, 1, K]  v channels reordered;
                                               tap K-1 multiplies the current token in both
    blk.N.ssm_norm.weight         [dv]         linear_attn.norm.weight           unchanged (no +1)
    blk.N.ssm_out.weight          [H, Hv*dv]   linear_attn.out_proj.weight       columns reordered
  full-attention layers (layer i is full attention when (i+1) % full_attention_interval == 0):
    blk.N.attn_q.weight           [Hq*2D, H]   self_attn.q_proj.weight  unchanged; per head h rows
                                               [2hD, 2hD+D) = query, [2hD+D, 2(h+1)D) = output gate, in both
    blk.N.attn_k.weight / attn_v.weight / attn_output.weight   self_attn.k_proj / v_proj / o_proj
    blk.N.attn_q_norm.weight, attn_k_norm.weight [D]   self_attn.q_norm / k_norm   GGUF - 1
  qwen35 dense FFN:  blk.N.ffn_{gate,up,down}.weight  ->  mlp.{gate,up,down}_proj.weight
  qwen35moe FFN:
    blk.N.ffn_gate_inp.weight     [E, H]    mlp.gate.weight
    routed experts, --experts-layout fused (default; the published Qwen3.5 MoE checkpoints):
      mlp.experts.gate_up_proj [E, 2F, H] = concat(ffn_gate_exps [E,F,H], ffn_up_exps [E,F,H]) on
      axis 1 (gate first, NOT interleaved);  mlp.experts.down_proj [E, H, F] = ffn_down_exps.
    --experts-layout per-expert: mlp.experts.<e>.{gate,up,down}_proj.weight = GGUF[e] as for qwen3moe.
    blk.N.ffn_{gate,up,down}_shexp.weight   mlp.shared_expert.{gate,up,down}_proj.weight
    blk.N.ffn_gate_inp_shexp.weight [H]     mlp.shared_expert_gate.weight [1, H]  (the converter
                                            writes ne {H, 1}; the goldens store ne {H}: same data)
Config (text part): rope_parameters = {"rope_type": "default", "rope_theta" <- rope.freq_base,
"partial_rotary_factor" = rope.dimension_count / head_dim, "mrope_section" = the first 3 of
rope.dimension_sections (the converter pads back to 4 with 0), "mrope_interleaved": true};
layer_types from full_attention_interval (also written as full_attention_interval); head_dim <-
key_length; intermediate_size <- feed_forward_length (qwen35 only: Qwen3_5MoeTextConfig has no
intermediate_size, so the unused qwen35moe feed_forward_length is not carried over);
moe_intermediate_size <- expert_feed_forward_length, shared_expert_intermediate_size <-
expert_shared_feed_forward_length, num_experts / num_experts_per_tok <- expert_count /
expert_used_count. The Qwen3.5 MoE router always renormalises the top-k (no config key).

==================================================================================================
CHECKS (--check, --to-gguf-check, --self-test)
==================================================================================================
1. Round trip. Reads only OUT_DIR (config.json + model.safetensors), re-applies the converter's
   HF->GGUF steps, written in the converter's direction (reshape [Hk, r, s] + swap for the v heads,
   -exp for A_log, +1 on norms, transpose and [::2]/[1::2] for gpt-oss, nibble repack for MXFP4,
   stacking / splitting of experts), and compares every tensor with the GGUF file: names, ne
   (trailing 1s ignored) and bytes. Tensors without arithmetic must match bit for bit. Two transforms
   are float32 arithmetic and cannot always be inverted exactly: norm +1 (for w < 0.5 the values
   fl(h + 1) lie on a coarser grid than w) and ssm_a = -exp(A_log); the HF value is chosen as the
   float32 whose image is nearest, and the check reports how many elements are bit-exact and
   requires the rest within float32 rounding (|d| <= 2^-24 for norms, |d|/|x| <= 2^-21 for ssm_a;
   seen: 2^-25 and ~1e-7). MXFP4 is also dequantized both ways (ggml's rules on the GGUF, transformers'
   rules on the HF blocks) and compared by value. The GGUF metadata the converter would write from
   config.json is compared with the file's keys.
2. Semantic check. A round trip only shows that the two directions are inverse. So the same layers
   are also computed twice in float64, from the GGUF tensors by llama.cpp's rules (the golden README:
   tiled v heads, ssm_a, plain norms, ne {K, C} conv taps, build_moe_ffn, swiglu_oai) and from the HF
   tensors by transformers' rules (Qwen3_5GatedDeltaNet with repeat_interleave, conv1d [C, 1, K],
   -exp(A_log) * softplus(a + dt_bias), Qwen3_5RMSNorm (1 + w), Qwen3NextRMSNormGated,
   Qwen3NextAttention's per-head chunk of q_proj, GptOssTopKRouter / GptOssExperts, MXFP4 through
   convert_moe_packed_tensors, Qwen2MoeExperts / shared_expert_gate, Qwen3MoeSparseMoeBlock):
   embeddings, lm_head, final norm, the layer-0 MoE block, one Gated DeltaNet layer over 6 tokens,
   the full-attention query / gate split. They must agree to 1e-6 (1e-5 for DeltaNet, whose two
   l2-norm epsilons differ).
3. --self-test runs both checks on every golden with every option, plus synthetic qwen35 and
   qwen35moe files with Hk = 2, Hv = 6: in the goldens Hk = r = 2, where the v-head permutation is
   its own inverse, so the goldens alone cannot catch a permutation applied in the wrong direction
   (real checkpoints, e.g. Hk = 16, Hv = 32, can).
"""

import argparse
import json
import os
import re
import struct
import sys
import tempfile

import numpy as np

from shared_dir import shared_dir


class ConvError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# GGUF reader
# ------------------------------------------------------------------------------------------------
GGML_F32, GGML_F16, GGML_BF16, GGML_MXFP4 = 0, 1, 30, 39
GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
    24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0", 39: "MXFP4",
}

# GGUF metadata value types
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}
GGUF_STRING, GGUF_ARRAY, GGUF_F32 = 8, 9, 6


class GGUFTensor:
    def __init__(self, name, ggml_type, ne, data):
        self.name = name
        self.ggml_type = ggml_type
        self.ne = tuple(ne)       # fastest axis first
        self.data = data          # float32 [reversed ne], or uint8 [*reversed(ne[1:]), ne0/32, 17] for MXFP4

    @property
    def type_name(self):
        return GGML_TYPE_NAMES.get(self.ggml_type, str(self.ggml_type))


class _Cursor:
    def __init__(self, buf, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise ConvError(f"{self.path}: truncated GGUF (wanted {n} bytes at offset {self.pos})")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.scalar("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def value(self, vtype, depth=0):
        if vtype in _GGUF_SCALARS:
            v = self.scalar(_GGUF_SCALARS[vtype])
            return np.float32(v) if vtype == GGUF_F32 else v
        if vtype == GGUF_STRING:
            return self.string()
        if vtype == GGUF_ARRAY and depth == 0:
            atype = self.scalar("<I")
            n = self.scalar("<Q")
            return [self.value(atype, depth + 1) for _ in range(n)]
        raise ConvError(f"{self.path}: unknown GGUF metadata value type {vtype} at offset {self.pos}")


def read_gguf(path):
    """Returns (kv: dict key -> (type, value), tensors: dict name -> GGUFTensor, in file order)."""
    with open(path, "rb") as f:
        buf = f.read()
    cur = _Cursor(buf, path)
    magic = bytes(cur.take(4))
    if magic != b"GGUF":
        raise ConvError(f"{path}: not a GGUF file (magic {magic!r})")
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise ConvError(f"{path}: GGUF version {version} is not supported (2 or 3; a big-endian "
                        f"file also lands here)")
    n_tensors = cur.scalar("<Q")
    n_kv = cur.scalar("<Q")
    kv = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.scalar("<I")
        kv[key] = (vtype, cur.value(vtype))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.scalar("<I")
        if n_dims > 4:
            raise ConvError(f"{path}: tensor {name!r} has {n_dims} dims")
        ne = [cur.scalar("<Q") for _ in range(n_dims)]
        ttype = cur.scalar("<I")
        offset = cur.scalar("<Q")
        infos.append((name, ne, ttype, offset))
    alignment = int(kv.get("general.alignment", (4, 32))[1])
    if alignment <= 0 or alignment & (alignment - 1):
        raise ConvError(f"{path}: general.alignment {alignment} is not a power of two")
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, ne, ttype, offset in infos:
        if name in tensors:
            raise ConvError(f"{path}: duplicate tensor {name!r}")
        n = int(np.prod(ne, dtype=np.int64)) if ne else 1
        shape = tuple(reversed(ne))
        start = data_start + offset
        if offset % alignment:
            raise ConvError(f"{path}: tensor {name!r} offset {offset} not aligned to {alignment}")
        if ttype == GGML_F32:
            size = 4 * n
        elif ttype in (GGML_F16, GGML_BF16):
            size = 2 * n
        elif ttype == GGML_MXFP4:
            if not ne or ne[0] % 32:
                raise ConvError(f"{path}: MXFP4 tensor {name!r} has ne0 {ne[:1]} not a multiple of 32")
            size = n // 32 * 17
        else:
            raise ConvError(f"unsupported tensor type: {name!r} is "
                            f"{GGML_TYPE_NAMES.get(ttype, '?')} (ggml type {ttype}); this tool reads "
                            f"F32, F16, BF16 and MXFP4")
        if start + size > len(buf):
            raise ConvError(f"{path}: tensor {name!r} runs past the end of the file")
        raw = buf[start:start + size]
        if ttype == GGML_F32:
            data = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)
        elif ttype == GGML_F16:
            data = np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
        elif ttype == GGML_BF16:
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            data = bits.view(np.float32).reshape(shape)
        else:
            data = np.frombuffer(raw, dtype=np.uint8).copy().reshape(
                tuple(reversed(ne[1:])) + (ne[0] // 32, 17))
        tensors[name] = GGUFTensor(name, ttype, ne, data)
    return kv, tensors


def kv_get(kv, key, default=None, required=False):
    if key in kv:
        return kv[key][1]
    if required:
        raise ConvError(f"GGUF key {key!r} is missing")
    return default


# ------------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------------
_ST_DTYPES = {np.dtype("<f4"): "F32", np.dtype(np.uint8): "U8"}
_ST_READ = {"F32": "<f4", "U8": "u1", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I64": "<i8",
            "I32": "<i4"}


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        arr = tensors[name]
        dt = _ST_DTYPES.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        if dt is None:
            raise ConvError(f"internal: {name} has dtype {arr.dtype}")
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name]).astype(tensors[name].dtype.newbyteorder("<"),
                                                               copy=False).tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = info["dtype"]
        if dt not in _ST_READ:
            raise ConvError(f"{path}: tensor {name} has unsupported dtype {dt}")
        arr = np.frombuffer(blob[base + b:base + e], dtype=_ST_READ[dt]).reshape(info["shape"])
        if dt == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dt in ("F16", "F64"):
            arr = arr.astype(np.float32)
        out[name] = arr.copy()
    return out


# ------------------------------------------------------------------------------------------------
# MXFP4
# ------------------------------------------------------------------------------------------------
# GGUF side (ggml): int8 kvalues, value = kvalues[code] * 2^(e-127) / 2
GGUF_MXFP4_KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)
# HF side (transformers' FP4_VALUES): value = FP4_VALUES[code] * 2^(scale-127)
HF_FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float64)


def gguf_mxfp4_codes(raw):
    """[..., 17] GGUF blocks -> [..., 32] 4-bit codes in value order."""
    qs = raw[..., 1:]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def gguf_mxfp4_dequant(raw):
    """[..., nb, 17] -> float32 [..., nb*32], by ggml's rules."""
    codes = gguf_mxfp4_codes(raw)
    e = raw[..., 0].astype(np.int64)
    vals = GGUF_MXFP4_KVALUES[codes] * np.ldexp(0.5, e - 127)[..., None]
    return vals.astype(np.float32).reshape(raw.shape[:-2] + (raw.shape[-2] * 32,))


def hf_mxfp4_dequant(blocks, scales):
    """HF blocks [..., nb, 16] + scales [..., nb] -> float32 [..., nb*32], by transformers' rules
    (low nibble of byte i = element 2i, high nibble = element 2i+1)."""
    vals = np.empty(blocks.shape[:-1] + (32,), np.float64)
    vals[..., 0::2] = HF_FP4_VALUES[blocks & 0x0F]
    vals[..., 1::2] = HF_FP4_VALUES[blocks >> 4]
    vals *= np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    return vals.astype(np.float32).reshape(blocks.shape[:-2] + (blocks.shape[-2] * 32,))


def mxfp4_gguf_to_hf(raw):
    """GGUF [..., nb, 17] -> (HF blocks [..., nb, 16], HF scales [..., nb])."""
    codes = gguf_mxfp4_codes(raw)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, raw[..., 0].copy()


def mxfp4_hf_to_gguf(blocks, scales):
    """HF blocks [..., nb, 16] + scales [..., nb] -> GGUF [..., nb, 17] (the converter's repack)."""
    code = np.empty(blocks.shape[:-1] + (32,), np.uint8)
    code[..., 0::2] = blocks & 0x0F
    code[..., 1::2] = blocks >> 4
    qs = code[..., :16] | (code[..., 16:] << 4)
    return np.concatenate([scales[..., None].astype(np.uint8), qs.astype(np.uint8)], axis=-1)


# ------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------
def f32_json(x):
    """Shortest decimal that reads back as the same float32."""
    return float(repr(np.float32(x)))


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def nearest_inverse(target, forward, guess):
    """Per element, the float32 x near `guess` (within 3 ulps) whose forward(x) is closest to target."""
    target = target.astype(np.float32)
    best = guess.astype(np.float32)
    best_err = np.abs(forward(best).astype(np.float64) - target.astype(np.float64))
    for direction in (np.float32(np.inf), np.float32(-np.inf)):
        cand = guess.astype(np.float32)
        for _ in range(3):
            cand = np.nextafter(cand, direction).astype(np.float32)
            err = np.abs(forward(cand).astype(np.float64) - target.astype(np.float64))
            better = err < best_err
            best = np.where(better, cand, best)
            best_err = np.where(better, err, best_err)
    return best


def norm_hf_from_gguf(w):
    """HF stores w - 1 (Qwen3.5 norms compute (1 + w) * x); the converter adds 1 in float32."""
    w = w.astype(np.float32)
    guess = (w.astype(np.float64) - 1.0).astype(np.float32)
    return nearest_inverse(w, lambda h: (h + np.float32(1.0)).astype(np.float32), guess)


def ssm_a_forward(a_log):
    return (-np.exp(a_log.astype(np.float64))).astype(np.float32)


def a_log_from_ssm_a(ssm_a):
    ssm_a = ssm_a.astype(np.float32)
    if np.any(ssm_a >= 0):
        raise ConvError("ssm_a has a value >= 0; it must be -exp(A_log) < 0")
    guess = np.log(-ssm_a.astype(np.float64)).astype(np.float32)
    return nearest_inverse(ssm_a, ssm_a_forward, guess)


def v_heads_gguf_to_hf(x, axis, hk, hv, s):
    """Reorder Hv blocks of s along `axis` from llama.cpp's tiled order to HF's grouped order:
    HF block h = GGUF block (h mod r) * Hk + h // r."""
    if hk == hv:
        return x
    r = hv // hk
    h = np.arange(hv)
    src = (h % r) * hk + h // r
    x = np.moveaxis(x, axis, 0)
    if x.shape[0] != hv * s:
        raise ConvError(f"v-head axis has {x.shape[0]} entries, expected {hv}*{s}")
    y = x.reshape((hv, s) + x.shape[1:])[src].reshape(x.shape)
    return np.ascontiguousarray(np.moveaxis(y, 0, axis))


def v_heads_hf_to_gguf(x, axis, hk, hv, s):
    """The converter's _reorder_v_heads: view the axis as [Hk, r, s], swap the first two."""
    if hk == hv:
        return x
    r = hv // hk
    x = np.moveaxis(x, axis, 0)
    y = x.reshape((hk, r, s) + x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
    return np.ascontiguousarray(np.moveaxis(y, 0, axis))


def rest_ne(ne):
    ne = list(ne)
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return tuple(ne)


# ------------------------------------------------------------------------------------------------
# GGUF -> HF
# ------------------------------------------------------------------------------------------------
ARCHES = ("qwen3moe", "gpt-oss", "qwen35", "qwen35moe")

# per-layer GGUF suffix -> HF suffix, plain copies (the layer prefix is added by the caller)
_COMMON_ATTN = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
}
PLAIN = {
    "qwen3moe": dict(_COMMON_ATTN, **{
        "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "ffn_gate_inp.weight": "mlp.gate.weight",
    }),
    "gpt-oss": dict(_COMMON_ATTN, **{
        "post_attention_norm.weight": "post_attention_layernorm.weight",
        "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.bias": "self_attn.k_proj.bias",
        "attn_v.bias": "self_attn.v_proj.bias",
        "attn_output.bias": "self_attn.o_proj.bias",
        "attn_sinks.weight": "self_attn.sinks",
        "ffn_gate_inp.weight": "mlp.router.weight",
        "ffn_gate_inp.bias": "mlp.router.bias",
    }),
}
_QWEN35_PLAIN = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ssm_norm.weight": "linear_attn.norm.weight",
}
PLAIN["qwen35"] = dict(_QWEN35_PLAIN, **{
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
})
PLAIN["qwen35moe"] = dict(_QWEN35_PLAIN, **{
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
})
# Qwen3.5 norms stored by HF as w - 1
QWEN35_PLUS1 = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}


class Options:
    def __init__(self, experts_f32=False, experts_layout=None, text_only=False):
        self.experts_f32 = experts_f32
        self.experts_layout = experts_layout
        self.text_only = text_only


def _arch_of(kv):
    arch = kv_get(kv, "general.architecture", required=True)
    if arch not in ARCHES:
        raise ConvError(f"unknown architecture {arch!r}: this tool converts {', '.join(ARCHES)}")
    return arch


def _dims(kv, tensors, arch):
    p = arch + "."
    d = {
        "H": int(kv_get(kv, p + "embedding_length", required=True)),
        "L": int(kv_get(kv, p + "block_count", required=True)),
        "Hq": int(kv_get(kv, p + "attention.head_count", required=True)),
        "Hkv": int(kv_get(kv, p + "attention.head_count_kv", required=True)),
        "eps": kv_get(kv, p + "attention.layer_norm_rms_epsilon", required=True),
        "ctx": int(kv_get(kv, p + "context_length", required=True)),
        "theta": kv_get(kv, p + "rope.freq_base", required=True),
    }
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise ConvError("token_embd.weight is missing")
    d["V"] = emb.data.shape[0]
    d["D"] = int(kv_get(kv, p + "attention.key_length", d["H"] // d["Hq"]))
    dv = int(kv_get(kv, p + "attention.value_length", d["D"]))
    if dv != d["D"]:
        raise ConvError(f"key_length {d['D']} != value_length {dv}: not expressible as one head_dim")
    d["tied"] = "output.weight" not in tensors
    if arch in ("qwen35", "qwen35moe"):
        d["Hk"] = int(kv_get(kv, p + "ssm.group_count", required=True))
        d["Hv"] = int(kv_get(kv, p + "ssm.time_step_rank", required=True))
        d["dk"] = int(kv_get(kv, p + "ssm.state_size", required=True))
        inner = int(kv_get(kv, p + "ssm.inner_size", required=True))
        d["K"] = int(kv_get(kv, p + "ssm.conv_kernel", required=True))
        if d["Hv"] % d["Hk"] or inner % d["Hv"]:
            raise ConvError(f"ssm.time_step_rank {d['Hv']} / group_count {d['Hk']} / inner_size {inner} "
                            f"do not divide")
        d["dv"] = inner // d["Hv"]
        d["interval"] = int(kv_get(kv, p + "full_attention_interval", 4))
        d["rope_dim"] = int(kv_get(kv, p + "rope.dimension_count", d["D"]))
        d["sections"] = kv_get(kv, p + "rope.dimension_sections")
    return d


def build_config(arch, kv, tensors, d, opts, mxfp4):
    p = arch + "."
    if arch == "qwen3moe":
        cfg = {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "decoder_sparse_step": 1,
            "head_dim": d["D"],
            "hidden_act": "silu",
            "hidden_size": d["H"],
            "initializer_range": 0.02,
            "intermediate_size": int(kv_get(kv, p + "feed_forward_length", kv_get(
                kv, p + "expert_feed_forward_length", required=True))),
            "max_position_embeddings": d["ctx"],
            "max_window_layers": d["L"],
            "mlp_only_layers": [],
            "moe_intermediate_size": int(kv_get(kv, p + "expert_feed_forward_length", required=True)),
            "norm_topk_prob": True,
            "num_attention_heads": d["Hq"],
            "num_experts": int(kv_get(kv, p + "expert_count", required=True)),
            "num_experts_per_tok": int(kv_get(kv, p + "expert_used_count", required=True)),
            "num_hidden_layers": d["L"],
            "num_key_value_heads": d["Hkv"],
            "output_router_logits": False,
            "rms_norm_eps": f32_json(d["eps"]),
            "rope_scaling": None,
            "rope_theta": f32_json(d["theta"]),
            "router_aux_loss_coef": 0.001,
            "sliding_window": None,
            "tie_word_embeddings": d["tied"],
            "torch_dtype": "float32",
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": d["V"],
        }
        return cfg
    if arch == "gpt-oss":
        stype = kv_get(kv, p + "rope.scaling.type")
        rope_scaling = None
        if stype is not None and stype != "none":
            if stype != "yarn":
                raise ConvError(f"gpt-oss rope.scaling.type {stype!r}: only yarn is expressible")
            rope_scaling = {
                "rope_type": "yarn",
                "factor": f32_json(kv_get(kv, p + "rope.scaling.factor", required=True)),
                "original_max_position_embeddings": int(kv_get(
                    kv, p + "rope.scaling.original_context_length", required=True)),
                "beta_fast": f32_json(kv_get(kv, p + "rope.scaling.yarn_beta_fast", 32.0)),
                "beta_slow": f32_json(kv_get(kv, p + "rope.scaling.yarn_beta_slow", 1.0)),
                "truncate": False,
            }
            if p + "rope.scaling.yarn_ext_factor" in kv:
                rope_scaling["extrapolation_factor"] = f32_json(kv_get(kv, p + "rope.scaling.yarn_ext_factor"))
            if p + "rope.scaling.yarn_attn_factor" in kv:
                rope_scaling["attention_factor"] = f32_json(kv_get(kv, p + "rope.scaling.yarn_attn_factor"))
        ff = int(kv_get(kv, p + "expert_feed_forward_length", kv_get(kv, p + "feed_forward_length", 0)))
        if not ff:
            raise ConvError("gpt-oss: expert_feed_forward_length is missing")
        cfg = {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "attention_bias": True,
            "attention_dropout": 0.0,
            "head_dim": d["D"],
            "hidden_act": "silu",
            "hidden_size": d["H"],
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(d["L"])],
            "max_position_embeddings": d["ctx"],
            "num_attention_heads": d["Hq"],
            "num_experts_per_tok": int(kv_get(kv, p + "expert_used_count", required=True)),
            "num_hidden_layers": d["L"],
            "num_key_value_heads": d["Hkv"],
            "num_local_experts": int(kv_get(kv, p + "expert_count", required=True)),
            "output_router_logits": False,
            "rms_norm_eps": f32_json(d["eps"]),
            "rope_scaling": rope_scaling,
            "rope_theta": f32_json(d["theta"]),
            "router_aux_loss_coef": 0.001,
            "sliding_window": int(kv_get(kv, p + "attention.sliding_window", required=True)),
            "swiglu_limit": 7.0,
            "tie_word_embeddings": d["tied"],
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": d["V"],
        }
        if mxfp4:
            cfg["quantization_config"] = {
                "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"],
                "quant_method": "mxfp4",
            }
        return cfg
    # qwen35 / qwen35moe
    moe = arch == "qwen35moe"
    rope = {
        "rope_type": "default",
        "rope_theta": f32_json(d["theta"]),
        "partial_rotary_factor": d["rope_dim"] / d["D"],
        "mrope_interleaved": True,
    }
    if d["sections"] is not None:
        sec = [int(x) for x in d["sections"]]
        rope["mrope_section"] = sec[:3] if len(sec) == 4 and sec[3] == 0 else sec
    text = {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "full_attention_interval": d["interval"],
        "head_dim": d["D"],
        "hidden_act": "silu",
        "hidden_size": d["H"],
        "initializer_range": 0.02,
        "layer_types": ["full_attention" if (i + 1) % d["interval"] == 0 else "linear_attention"
                        for i in range(d["L"])],
        "linear_conv_kernel_dim": d["K"],
        "linear_key_head_dim": d["dk"],
        "linear_num_key_heads": d["Hk"],
        "linear_num_value_heads": d["Hv"],
        "linear_value_head_dim": d["dv"],
        "max_position_embeddings": d["ctx"],
        "num_attention_heads": d["Hq"],
        "num_hidden_layers": d["L"],
        "num_key_value_heads": d["Hkv"],
        "rms_norm_eps": f32_json(d["eps"]),
        "rope_parameters": rope,
        "tie_word_embeddings": d["tied"],
        "use_cache": True,
        "vocab_size": d["V"],
    }
    if moe:
        text.update({
            "moe_intermediate_size": int(kv_get(kv, p + "expert_feed_forward_length", required=True)),
            "num_experts": int(kv_get(kv, p + "expert_count", required=True)),
            "num_experts_per_tok": int(kv_get(kv, p + "expert_used_count", required=True)),
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
            "shared_expert_intermediate_size": int(kv_get(
                kv, p + "expert_shared_feed_forward_length", required=True)),
        })
    else:
        text["intermediate_size"] = int(kv_get(kv, p + "feed_forward_length", required=True))
    if opts.text_only:
        text["architectures"] = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
        text["torch_dtype"] = "float32"
        return text
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5_moe" if moe else "qwen3_5",
        "text_config": text,
        "tie_word_embeddings": d["tied"],
        "torch_dtype": "float32",
    }


def gguf_to_hf(kv, tensors, opts):
    """Returns (config dict, HF tensors dict)."""
    arch = _arch_of(kv)
    d = _dims(kv, tensors, arch)
    qwen35 = arch in ("qwen35", "qwen35moe")
    layout = opts.experts_layout or ("fused" if arch == "qwen35moe" else "per-expert")
    if layout not in ("per-expert", "fused"):
        raise ConvError(f"--experts-layout {layout!r}: expected per-expert or fused")
    prefix = "model.language_model." if qwen35 and not opts.text_only else "model."
    out = {}
    used = set()

    def take(name):
        t = tensors.get(name)
        if t is None:
            raise ConvError(f"tensor {name!r} is missing")
        used.add(name)
        return t

    def fl(name):
        t = take(name)
        if t.ggml_type == GGML_MXFP4:
            raise ConvError(f"unsupported tensor type: {name!r} is MXFP4; only gpt-oss expert "
                            f"matrices may be MXFP4")
        return t.data

    def put(name, arr):
        if name in out:
            raise ConvError(f"internal: {name} written twice")
        out[name] = arr

    # whole-model tensors
    put(prefix + "embed_tokens.weight", f32(fl("token_embd.weight")))
    norm = fl("output_norm.weight")
    put(prefix + "norm.weight", f32(norm_hf_from_gguf(norm) if qwen35 else norm))
    if not d["tied"]:
        put("lm_head.weight", f32(fl("output.weight")))

    mxfp4 = False
    if arch == "gpt-oss":
        types = {tensors[n].ggml_type for n in tensors if re.fullmatch(r"blk\.\d+\.ffn_(gate|up|down)_exps\.weight", n)}
        if GGML_MXFP4 in types and not opts.experts_f32:
            if types != {GGML_MXFP4}:
                raise ConvError("gpt-oss: some expert matrices are MXFP4 and some are not; HF's MXFP4 form "
                                "needs all of them (use --experts-f32)")
            mxfp4 = True

    for il in range(d["L"]):
        b = f"blk.{il}."
        hp = f"{prefix}layers.{il}."
        for gsuf, hsuf in PLAIN[arch].items():
            if b + gsuf in tensors:
                put(hp + hsuf, f32(fl(b + gsuf)))
        if qwen35:
            Hk, Hv, dk, dv, K = d["Hk"], d["Hv"], d["dk"], d["dv"], d["K"]
            for gsuf, hsuf in QWEN35_PLUS1.items():
                if b + gsuf in tensors:
                    put(hp + hsuf, f32(norm_hf_from_gguf(fl(b + gsuf))))
            if b + "attn_qkv.weight" in tensors:       # Gated DeltaNet layer
                qkv = fl(b + "attn_qkv.weight")
                nqk = 2 * Hk * dk
                if qkv.shape[0] != nqk + Hv * dv:
                    raise ConvError(f"{b}attn_qkv.weight has {qkv.shape[0]} rows, expected {nqk + Hv * dv}")
                v = v_heads_gguf_to_hf(qkv[nqk:], 0, Hk, Hv, dv)
                put(hp + "linear_attn.in_proj_qkv.weight", f32(np.concatenate([qkv[:nqk], v], axis=0)))
                def heads(arr, axis, s):
                    return f32(v_heads_gguf_to_hf(arr, axis, Hk, Hv, s))
                put(hp + "linear_attn.in_proj_z.weight", heads(fl(b + "attn_gate.weight"), 0, dv))
                put(hp + "linear_attn.in_proj_b.weight", heads(fl(b + "ssm_beta.weight"), 0, 1))
                put(hp + "linear_attn.in_proj_a.weight", heads(fl(b + "ssm_alpha.weight"), 0, 1))
                put(hp + "linear_attn.dt_bias", heads(fl(b + "ssm_dt.bias"), 0, 1))
                put(hp + "linear_attn.A_log", heads(a_log_from_ssm_a(fl(b + "ssm_a")), 0, 1))
                conv = fl(b + "ssm_conv1d.weight")          # [C, K]
                if conv.shape != (nqk + Hv * dv, K):
                    raise ConvError(f"{b}ssm_conv1d.weight shape {conv.shape}, expected {(nqk + Hv * dv, K)}")
                conv = np.concatenate([conv[:nqk], heads(conv[nqk:], 0, dv)], axis=0)
                put(hp + "linear_attn.conv1d.weight", f32(conv.reshape(conv.shape[0], 1, K)))
                put(hp + "linear_attn.out_proj.weight", heads(fl(b + "ssm_out.weight"), 1, dv))
            if b + "ffn_gate_inp_shexp.weight" in tensors:
                g = fl(b + "ffn_gate_inp_shexp.weight")
                put(hp + "mlp.shared_expert_gate.weight", f32(g.reshape(1, -1)))
        if arch in ("qwen3moe", "qwen35moe"):
            gate = fl(b + "ffn_gate_exps.weight")       # [E, F, H]
            up = fl(b + "ffn_up_exps.weight")           # [E, F, H]
            down = fl(b + "ffn_down_exps.weight")       # [E, H, F]
            if layout == "fused":
                put(hp + "mlp.experts.gate_up_proj", f32(np.concatenate([gate, up], axis=1)))
                put(hp + "mlp.experts.down_proj", f32(down))
            else:
                for e in range(gate.shape[0]):
                    put(hp + f"mlp.experts.{e}.gate_proj.weight", f32(gate[e]))
                    put(hp + f"mlp.experts.{e}.up_proj.weight", f32(up[e]))
                    put(hp + f"mlp.experts.{e}.down_proj.weight", f32(down[e]))
        if arch == "gpt-oss":
            tg, tu = take(b + "ffn_gate_exps.weight"), take(b + "ffn_up_exps.weight")
            td = take(b + "ffn_down_exps.weight")
            gb, ub, db = fl(b + "ffn_gate_exps.bias"), fl(b + "ffn_up_exps.bias"), fl(b + "ffn_down_exps.bias")
            E, F = gb.shape
            bias = np.empty((E, 2 * F), np.float32)
            bias[:, 0::2], bias[:, 1::2] = gb, ub
            put(hp + "mlp.experts.gate_up_proj_bias", bias)
            put(hp + "mlp.experts.down_proj_bias", f32(db))
            if mxfp4:
                gblk, gsc = mxfp4_gguf_to_hf(tg.data)     # [E, F, H/32, 16], [E, F, H/32]
                ublk, usc = mxfp4_gguf_to_hf(tu.data)
                blk = np.empty((E, 2 * F) + gblk.shape[2:], np.uint8)
                sc = np.empty((E, 2 * F) + gsc.shape[2:], np.uint8)
                blk[:, 0::2], blk[:, 1::2] = gblk, ublk
                sc[:, 0::2], sc[:, 1::2] = gsc, usc
                put(hp + "mlp.experts.gate_up_proj_blocks", blk)
                put(hp + "mlp.experts.gate_up_proj_scales", sc)
                dblk, dsc = mxfp4_gguf_to_hf(td.data)     # [E, H, F/32, 16], [E, H, F/32]
                put(hp + "mlp.experts.down_proj_blocks", dblk)
                put(hp + "mlp.experts.down_proj_scales", dsc)
            else:
                def dense(t):
                    return t.data if t.ggml_type != GGML_MXFP4 else gguf_mxfp4_dequant(t.data)
                g, u, dn = dense(tg), dense(tu), dense(td)   # [E, F, H], [E, F, H], [E, H, F]
                gu = np.empty((E, g.shape[2], 2 * F), np.float32)
                gu[:, :, 0::2] = g.transpose(0, 2, 1)
                gu[:, :, 1::2] = u.transpose(0, 2, 1)
                put(hp + "mlp.experts.gate_up_proj", gu)
                put(hp + "mlp.experts.down_proj", f32(dn.transpose(0, 2, 1)))

    left = [n for n in tensors if n not in used]
    if left:
        raise ConvError(f"{arch}: tensors this tool does not map: {', '.join(left[:8])}"
                        f"{' ...' if len(left) > 8 else ''}")
    return build_config(arch, kv, tensors, d, opts, mxfp4), out


def convert(in_path, out_dir, opts):
    kv, tensors = read_gguf(in_path)
    cfg, hf = gguf_to_hf(kv, tensors, opts)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf)
    return cfg, hf


# ------------------------------------------------------------------------------------------------
# HF -> GGUF (the converter's direction), for the round trip
# ------------------------------------------------------------------------------------------------
def _fwd_names(arch):
    """HF name (after 'language_model.' is dropped) -> GGUF name, per layer; from tensor_mapping.py."""
    m = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate.weight": "ffn_gate_inp.weight",
    }
    if arch == "qwen3moe":
        m["post_attention_layernorm.weight"] = "ffn_norm.weight"
    else:   # FFN_NORM is not in these archs' tensor lists, so the name falls to ATTN_POST_NORM
        m["post_attention_layernorm.weight"] = "post_attention_norm.weight"
    if arch == "gpt-oss":
        for x, y in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
            m[f"self_attn.{x}_proj.bias"] = f"{y}.bias"
        m["self_attn.sinks.weight"] = "attn_sinks.weight"
        m["mlp.router.weight"] = "ffn_gate_inp.weight"
        m["mlp.router.bias"] = "ffn_gate_inp.bias"
        m["mlp.experts.gate_proj.weight"] = "ffn_gate_exps.weight"
        m["mlp.experts.up_proj.weight"] = "ffn_up_exps.weight"
        m["mlp.experts.down_proj.weight"] = "ffn_down_exps.weight"
        m["mlp.experts.gate_proj.bias"] = "ffn_gate_exps.bias"
        m["mlp.experts.up_proj.bias"] = "ffn_up_exps.bias"
        m["mlp.experts.down_proj.bias"] = "ffn_down_exps.bias"
    if arch in ("qwen3moe", "qwen35moe"):
        m["mlp.experts.gate_proj.weight"] = "ffn_gate_exps.weight"
        m["mlp.experts.up_proj.weight"] = "ffn_up_exps.weight"
        m["mlp.experts.down_proj.weight"] = "ffn_down_exps.weight"
    if arch in ("qwen35", "qwen35moe"):
        m.update({
            "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
            "linear_attn.in_proj_z.weight": "attn_gate.weight",
            "linear_attn.in_proj_b.weight": "ssm_beta.weight",
            "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
            "linear_attn.dt_proj.bias": "ssm_dt.bias",
            "linear_attn.A_log": "ssm_a",
            "linear_attn.conv1d.weight": "ssm_conv1d.weight",
            "linear_attn.norm.weight": "ssm_norm.weight",
            "linear_attn.out_proj.weight": "ssm_out.weight",
            "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight",
            "mlp.down_proj.weight": "ffn_down.weight",
            "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
            "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
            "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
            "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
        })
    return m


_HF_ARCH = {
    "Qwen3MoeForCausalLM": "qwen3moe", "GptOssForCausalLM": "gpt-oss",
    "Qwen3_5ForCausalLM": "qwen35", "Qwen3_5ForConditionalGeneration": "qwen35",
    "Qwen3_5MoeForCausalLM": "qwen35moe", "Qwen3_5MoeForConditionalGeneration": "qwen35moe",
}


def hf_to_gguf(hf_dir):
    """Returns (arch, expected GGUF kv {key: value}, tensors {name: ('f32', array) | ('mxfp4', raw)})."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    st = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    text = cfg.get("text_config", {})
    hf_arch = (text.get("architectures") or cfg.get("architectures") or [None])[0]
    if hf_arch not in _HF_ARCH:
        raise ConvError(f"{hf_dir}: unknown HF architecture {hf_arch!r}")
    arch = _HF_ARCH[hf_arch]
    hp = dict(cfg, **text)   # the converter merges text_config into the root
    rope = hp.get("rope_parameters", hp.get("rope_scaling")) or {}
    names = _fwd_names(arch)

    # drop "language_model." (TextModel.filter_tensors) and add ".weight" to sinks (GptOssModel)
    hf = {}
    for n, a in st.items():
        n2 = n.replace("language_model.", "")
        if arch == "gpt-oss" and "sinks" in n2:
            n2 += ".weight"
        hf[n2] = a

    out = {}

    def emit(name, arr, kind="f32"):
        if name in out:
            raise ConvError(f"round trip: {name} produced twice")
        out[name] = (kind, arr)

    experts = {}
    for name in sorted(hf):
        a = hf[name]
        if name == "model.embed_tokens.weight":
            emit("token_embd.weight", a)
            continue
        if name == "lm_head.weight":
            emit("output.weight", a)
            continue
        if name == "model.norm.weight":
            emit("output_norm.weight", (a + np.float32(1)).astype(np.float32) if arch in ("qwen35", "qwen35moe") else a)
            continue
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
        if not m:
            raise ConvError(f"round trip: cannot map {name}")
        bid, rest = int(m.group(1)), m.group(2)
        b = f"blk.{bid}."
        if arch in ("qwen35", "qwen35moe") and "linear_attn." in rest:
            hk, hv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
            dk, dv = hp["linear_key_head_dim"], hp["linear_value_head_dim"]
            nqk = 2 * hk * dk
            # _LinearAttentionVReorderBase.modify_tensors
            if ".in_proj_qkv." in rest:
                a = np.concatenate([a[:nqk], v_heads_hf_to_gguf(a[nqk:], 0, hk, hv, dv)], axis=0)
            elif ".in_proj_z." in rest:
                a = v_heads_hf_to_gguf(a, 0, hk, hv, dv)
            elif ".in_proj_b." in rest or ".in_proj_a." in rest:
                a = v_heads_hf_to_gguf(a, 0, hk, hv, 1)
            elif rest.endswith(".A_log") or rest.endswith(".dt_bias"):
                a = v_heads_hf_to_gguf(a, 0, hk, hv, 1)
            elif ".conv1d" in rest:
                sq = a.reshape(a.shape[0], a.shape[-1])
                a = np.concatenate([sq[:nqk], v_heads_hf_to_gguf(sq[nqk:], 0, hk, hv, dv)], axis=0)
            elif ".out_proj." in rest:
                a = v_heads_hf_to_gguf(a, 1, hk, hv, dv)
        if arch in ("qwen35", "qwen35moe"):
            # Qwen3NextModel.modify_tensors
            if rest.endswith(".A_log"):
                a = ssm_a_forward(a)
            elif rest.endswith(".dt_bias"):
                rest = rest[:-len(".dt_bias")] + ".dt_proj.bias"
            elif "conv1d" in rest:
                a = a.reshape(a.shape[0], a.shape[-1])
            elif rest.endswith("norm.weight") and not rest.endswith("linear_attn.norm.weight"):
                a = (a + np.float32(1)).astype(np.float32)
        if arch == "gpt-oss" and rest.startswith("mlp.experts."):
            key = rest[len("mlp.experts."):]
            experts.setdefault(bid, {})[key] = a
            continue
        if arch in ("qwen3moe", "qwen35moe"):
            me = re.fullmatch(r"mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight", rest)
            if me:
                experts.setdefault(bid, {}).setdefault(me.group(2), {})[int(me.group(1))] = a
                continue
            if rest == "mlp.experts.gate_up_proj":     # split on axis -2: gate first, then up
                nf = a.shape[-2] // 2
                emit(b + names["mlp.experts.gate_proj.weight"], a[..., :nf, :])
                emit(b + names["mlp.experts.up_proj.weight"], a[..., nf:, :])
                continue
            if rest == "mlp.experts.down_proj":
                emit(b + names["mlp.experts.down_proj.weight"], a)
                continue
        if rest not in names:
            raise ConvError(f"round trip: cannot map {name}")
        emit(b + names[rest], a)

    for bid, ex in sorted(experts.items()):
        b = f"blk.{bid}."
        if arch == "gpt-oss":
            gub = ex.pop("gate_up_proj_bias")
            emit(b + "ffn_gate_exps.bias", gub[..., ::2])
            emit(b + "ffn_up_exps.bias", gub[..., 1::2])
            emit(b + "ffn_down_exps.bias", ex.pop("down_proj_bias"))
            if "gate_up_proj_blocks" in ex:      # generate_extra_tensors / repack_mxfp4
                blk, sc = ex.pop("gate_up_proj_blocks"), ex.pop("gate_up_proj_scales")
                emit(b + "ffn_gate_exps.weight", mxfp4_hf_to_gguf(blk[:, ::2], sc[:, ::2]), "mxfp4")
                emit(b + "ffn_up_exps.weight", mxfp4_hf_to_gguf(blk[:, 1::2], sc[:, 1::2]), "mxfp4")
                emit(b + "ffn_down_exps.weight",
                     mxfp4_hf_to_gguf(ex.pop("down_proj_blocks"), ex.pop("down_proj_scales")), "mxfp4")
            else:
                gu = ex.pop("gate_up_proj").swapaxes(-1, -2)
                emit(b + "ffn_gate_exps.weight", gu[:, ::2, :])
                emit(b + "ffn_up_exps.weight", gu[:, 1::2, :])
                emit(b + "ffn_down_exps.weight", ex.pop("down_proj").swapaxes(-1, -2))
            if ex:
                raise ConvError(f"round trip: unmapped gpt-oss expert tensors {sorted(ex)}")
        else:
            n_exp = hp["num_experts"]
            for w in ("down", "gate", "up"):
                per = ex.get(w, {})
                if sorted(per) != list(range(n_exp)):
                    raise ConvError(f"round trip: layer {bid} has {len(per)} {w}_proj experts, expected {n_exp}")
                emit(b + names[f"mlp.experts.{w}_proj.weight"], np.stack([per[e] for e in range(n_exp)], axis=0))

    kvs = expected_kv(arch, hp, rope)
    return arch, kvs, out


def expected_kv(arch, hp, rope):
    """The architecture keys the converter writes from config.json (set_gguf_parameters)."""
    p = arch + "."
    kv = {p + "block_count": hp["num_hidden_layers"],
          p + "context_length": hp["max_position_embeddings"],
          p + "embedding_length": hp["hidden_size"],
          p + "attention.head_count": hp["num_attention_heads"],
          p + "attention.head_count_kv": hp["num_key_value_heads"],
          p + "attention.layer_norm_rms_epsilon": np.float32(hp["rms_norm_eps"]),
          p + "attention.key_length": hp["head_dim"],
          p + "attention.value_length": hp["head_dim"]}
    if "intermediate_size" in hp:
        kv[p + "feed_forward_length"] = hp["intermediate_size"]
    theta = rope.get("rope_theta", hp.get("rope_theta"))
    if theta is not None:
        kv[p + "rope.freq_base"] = np.float32(theta)
    for k_hf, k_gg in (("num_local_experts", "expert_count"), ("num_experts", "expert_count"),
                       ("num_experts_per_tok", "expert_used_count")):
        if k_hf in hp:
            kv[p + k_gg] = hp[k_hf]
    if "moe_intermediate_size" in hp:
        kv[p + "expert_feed_forward_length"] = hp["moe_intermediate_size"]
    if "shared_expert_intermediate_size" in hp:
        kv[p + "expert_shared_feed_forward_length"] = hp["shared_expert_intermediate_size"]
    if arch == "gpt-oss":
        kv[p + "attention.sliding_window"] = hp["sliding_window"]
        kv[p + "expert_feed_forward_length"] = hp["intermediate_size"]
        if rope.get("rope_type") == "yarn":
            kv[p + "rope.scaling.type"] = "yarn"
            kv[p + "rope.scaling.factor"] = np.float32(rope["factor"])
            kv[p + "rope.scaling.original_context_length"] = rope["original_max_position_embeddings"]
            if "beta_fast" in rope:
                kv[p + "rope.scaling.yarn_beta_fast"] = np.float32(rope["beta_fast"])
            if "beta_slow" in rope:
                kv[p + "rope.scaling.yarn_beta_slow"] = np.float32(rope["beta_slow"])
    if arch in ("qwen35", "qwen35moe"):
        kv[p + "ssm.conv_kernel"] = hp["linear_conv_kernel_dim"]
        kv[p + "ssm.state_size"] = hp["linear_key_head_dim"]
        kv[p + "ssm.group_count"] = hp["linear_num_key_heads"]
        kv[p + "ssm.time_step_rank"] = hp["linear_num_value_heads"]
        kv[p + "ssm.inner_size"] = hp["linear_value_head_dim"] * hp["linear_num_value_heads"]
        kv[p + "full_attention_interval"] = hp.get("full_attention_interval", 4)
        kv[p + "rope.dimension_count"] = int(hp["head_dim"] * rope.get("partial_rotary_factor", 0.25))
        sec = list(rope.get("mrope_section", [11, 11, 10]))
        kv[p + "rope.dimension_sections"] = (sec + [0] * 4)[:4]
        if hp.get("layer_types") is not None:
            interval = kv[p + "full_attention_interval"]
            want = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                    for i in range(hp["num_hidden_layers"])]
            if list(hp["layer_types"]) != want:
                raise ConvError("round trip: layer_types disagree with full_attention_interval")
    if arch == "gpt-oss" and hp.get("layer_types") is not None:
        want = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(hp["num_hidden_layers"])]
        if list(hp["layer_types"]) != want:
            raise ConvError("round trip: gpt-oss layer_types are not llama.cpp's period-2 pattern")
    return kv


# keys the goldens carry that no HF config of that class can give back (see the docstring)
KV_NOT_EXPRESSIBLE = {"qwen35moe": {"qwen35moe.feed_forward_length"}}
KV_IGNORED_SUFFIXES = (".vocab_size",)


def round_trip(gguf_path, hf_dir, verbose=True):
    """Re-applies HF->GGUF to hf_dir and compares with gguf_path. Returns (ok, lines)."""
    kv, tensors = read_gguf(gguf_path)
    arch, kvs, produced = hf_to_gguf(hf_dir)
    lines, ok = [], True
    if arch != _arch_of(kv):
        return False, [f"FAIL architecture: HF gives {arch}, GGUF is {_arch_of(kv)}"]

    missing = [n for n in tensors if n not in produced]
    extra = [n for n in produced if n not in tensors]
    if missing or extra:
        ok = False
        lines.append(f"FAIL names: missing {missing[:6]} extra {extra[:6]}")
    n_exact = n_tol = 0
    for name, t in tensors.items():
        if name not in produced:
            continue
        kind, arr = produced[name]
        if t.ggml_type == GGML_MXFP4:
            if kind == "mxfp4":
                a = np.ascontiguousarray(arr, np.uint8)
                if a.shape != t.data.shape or not np.array_equal(a, t.data):
                    ok = False
                    lines.append(f"FAIL {name}: MXFP4 bytes differ")
                    continue
                n_exact += 1
                continue
            ref = gguf_mxfp4_dequant(t.data)       # HF side is dequantized floats (--experts-f32)
        else:
            if kind != "f32":
                ok = False
                lines.append(f"FAIL {name}: produced MXFP4 for a {t.type_name} tensor")
                continue
            ref = t.data
        a = np.ascontiguousarray(arr, np.float32)
        if rest_ne(tuple(reversed(a.shape))) != rest_ne(t.ne):
            ok = False
            lines.append(f"FAIL {name}: ne {tuple(reversed(a.shape))} vs GGUF {t.ne}")
            continue
        a = a.reshape(ref.shape)
        if np.array_equal(a.view(np.uint32), ref.view(np.uint32)):
            n_exact += 1
            continue
        # arithmetic transforms: report, and bound by float32 rounding
        diff = np.abs(a.astype(np.float64) - ref.astype(np.float64))
        bits = int(np.count_nonzero(a.view(np.uint32) == ref.view(np.uint32)))
        if name.endswith("norm.weight") and arch in ("qwen35", "qwen35moe") and not name.endswith("ssm_norm.weight"):
            bound, what = diff.max() <= 2.0 ** -24, "abs"
            worst = diff.max()
        elif name.endswith("ssm_a"):
            rel = diff / np.abs(ref.astype(np.float64))
            bound, what, worst = rel.max() <= 2.0 ** -21, "rel", rel.max()
        else:
            bound, what, worst = False, "abs", diff.max()
        if bound:
            n_tol += 1
            if verbose:
                lines.append(f"  float rounding {name}: {bits}/{a.size} bit-exact, max {what} diff {worst:.3g}")
        else:
            ok = False
            lines.append(f"FAIL {name}: {bits}/{a.size} bit-exact, max {what} diff {worst:.3g}")
    # MXFP4: the HF-rule dequantization must equal the GGUF-rule one, value for value
    n_mx = 0
    st = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    for name in sorted(st):
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            hf_vals = hf_mxfp4_dequant(st[name], st[base + "_scales"])    # [E, out, in]
            bid = int(re.search(r"layers\.(\d+)\.", name).group(1))
            if base.endswith("gate_up_proj"):
                g = gguf_mxfp4_dequant(tensors[f"blk.{bid}.ffn_gate_exps.weight"].data)
                u = gguf_mxfp4_dequant(tensors[f"blk.{bid}.ffn_up_exps.weight"].data)
                same = np.array_equal(hf_vals[:, 0::2], g) and np.array_equal(hf_vals[:, 1::2], u)
            else:
                same = np.array_equal(hf_vals, gguf_mxfp4_dequant(tensors[f"blk.{bid}.ffn_down_exps.weight"].data))
            n_mx += 1
            if not same:
                ok = False
                lines.append(f"FAIL {name}: HF-rule dequantization differs from the GGUF-rule one")
    # metadata
    skip = KV_NOT_EXPRESSIBLE.get(arch, set())
    kv_bad, kv_ok = [], 0
    for key, (vtype, val) in kv.items():
        if not key.startswith(arch + ".") or key in skip or key.endswith(KV_IGNORED_SUFFIXES):
            continue
        if key not in kvs:
            kv_bad.append(f"{key} (not produced)")
            continue
        want = kvs[key]
        if isinstance(val, list):
            same = [int(x) for x in val] == [int(x) for x in want]
        elif vtype == GGUF_F32:
            same = np.float32(want) == val
        else:
            same = want == val
        if same:
            kv_ok += 1
        else:
            kv_bad.append(f"{key}: GGUF {val!r}, from config {want!r}")
    if kv_bad:
        ok = False
        lines.append("FAIL metadata: " + "; ".join(kv_bad))
    extra_kv = sorted(k for k in kvs if k not in kv)
    lines.insert(0, f"{'OK  ' if ok else 'FAIL'} {os.path.basename(gguf_path)} <- {hf_dir}: "
                    f"{n_exact} tensors bit-exact, {n_tol} within float32 rounding, of {len(tensors)}; "
                    f"{n_mx} MXFP4 dequant cross-checks; {kv_ok} metadata keys equal"
                    + (f" (not compared, absent from the GGUF: {', '.join(extra_kv)})" if extra_kv else "")
                    + (f" (not expressible in HF config: {', '.join(sorted(skip))})" if skip else ""))
    return ok, lines


# ------------------------------------------------------------------------------------------------
# Semantic check: the same layer computed from the GGUF tensors by llama.cpp's rules and from the
# HF tensors by transformers' rules (float64). Unlike the round trip, this does not use the mapping.
# ------------------------------------------------------------------------------------------------
def _silu(x):
    return x / (1.0 + np.exp(-x))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def _rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _d(a):
    return np.asarray(a, np.float64)


def _gguf_moe(x, t, b, k_used, renorm, oai):
    """llama.cpp build_moe_ffn for one token x [H] (README: qwen3moe / gpt-oss)."""
    def w(name):
        tt = t[b + name]
        return _d(gguf_mxfp4_dequant(tt.data) if tt.ggml_type == GGML_MXFP4 else tt.data)
    logits = w("ffn_gate_inp.weight") @ x
    if oai:
        logits = logits + w("ffn_gate_inp.bias")
        top = np.argsort(-logits, kind="stable")[:k_used]
        wt = _softmax(logits[top])
    else:
        p = _softmax(logits)
        top = np.argsort(-p, kind="stable")[:k_used]
        wt = p[top] / p[top].sum() if renorm else p[top]
    G, U, D = w("ffn_gate_exps.weight"), w("ffn_up_exps.weight"), w("ffn_down_exps.weight")
    out = np.zeros_like(x)
    for e, we in zip(top, wt):
        g, u = G[e] @ x, U[e] @ x
        if oai:
            g = np.minimum(g + w("ffn_gate_exps.bias")[e], 7.0)
            u = np.clip(u + w("ffn_up_exps.bias")[e], -7.0, 7.0)
            y = D[e] @ (g * _sigmoid(1.702 * g) * (u + 1.0)) + w("ffn_down_exps.bias")[e]
        else:
            y = D[e] @ (_silu(g) * u)
        out += we * y
    return out


def _hf_experts(hf, lp, n_exp):
    """transformers' expert weights as (gate [E,F,H], up [E,F,H], down [E,H,F]) for Qwen MoE."""
    if lp + "mlp.experts.gate_up_proj" in hf:        # Qwen2MoeExperts: linear(x, gate_up).chunk(2)
        gu = _d(hf[lp + "mlp.experts.gate_up_proj"])
        nf = gu.shape[1] // 2
        return gu[:, :nf], gu[:, nf:], _d(hf[lp + "mlp.experts.down_proj"])
    st = [np.stack([_d(hf[lp + f"mlp.experts.{e}.{w}_proj.weight"]) for e in range(n_exp)])
          for w in ("gate", "up", "down")]
    return st[0], st[1], st[2]


def semantic_check(gguf_path, hf_dir, n_tokens=6, seed=7):
    kv, t = read_gguf(gguf_path)
    arch = _arch_of(kv)
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    c = dict(cfg, **cfg.get("text_config", {}))
    hf = {n.replace("model.language_model.", "model."): a
          for n, a in read_safetensors(os.path.join(hf_dir, "model.safetensors")).items()}
    rng = np.random.default_rng(seed)
    H = c["hidden_size"]
    xs = rng.standard_normal((n_tokens, H))
    eps = float(c["rms_norm_eps"])
    p = arch + "."
    checks = []

    def cmp(label, a, b):
        err = np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))
        checks.append((label, err))

    # embeddings / output head / final norm (qwen35*: HF (1 + w), GGUF w)
    ids = rng.integers(0, c["vocab_size"], 4)
    cmp("embed rows", _d(t["token_embd.weight"].data)[ids], _d(hf["model.embed_tokens.weight"])[ids])
    if "output.weight" in t:
        cmp("lm_head", _d(t["output.weight"].data) @ xs[0], _d(hf["lm_head.weight"]) @ xs[0])
    one = 1.0 if arch in ("qwen35", "qwen35moe") else 0.0
    cmp("final norm", _rms(xs, eps) * _d(t["output_norm.weight"].data),
        _rms(xs, eps) * (one + _d(hf["model.norm.weight"])))

    if arch in ("qwen3moe", "gpt-oss", "qwen35moe"):
        lp, b = "model.layers.0.", "blk.0."
        k_used = int(kv_get(kv, p + "expert_used_count"))
        for x in xs[:3]:
            ref = _gguf_moe(x, t, b, k_used, renorm=True, oai=(arch == "gpt-oss"))
            if arch == "gpt-oss":
                # GptOssTopKRouter + GptOssExperts (MXFP4: convert_moe_packed_tensors, then transposed)
                logits = _d(hf[lp + "mlp.router.weight"]) @ x + _d(hf[lp + "mlp.router.bias"])
                top = np.argsort(-logits, kind="stable")[:c["num_experts_per_tok"]]
                wt = _softmax(logits[top])
                if lp + "mlp.experts.gate_up_proj_blocks" in hf:
                    gu = _d(hf_mxfp4_dequant(hf[lp + "mlp.experts.gate_up_proj_blocks"],
                                             hf[lp + "mlp.experts.gate_up_proj_scales"])).transpose(0, 2, 1)
                    dn = _d(hf_mxfp4_dequant(hf[lp + "mlp.experts.down_proj_blocks"],
                                             hf[lp + "mlp.experts.down_proj_scales"])).transpose(0, 2, 1)
                else:
                    gu, dn = _d(hf[lp + "mlp.experts.gate_up_proj"]), _d(hf[lp + "mlp.experts.down_proj"])
                gub, dnb = _d(hf[lp + "mlp.experts.gate_up_proj_bias"]), _d(hf[lp + "mlp.experts.down_proj_bias"])
                out = np.zeros_like(x)
                for e, we in zip(top, wt):
                    h = x @ gu[e] + gub[e]
                    g = np.minimum(h[0::2], c.get("swiglu_limit", 7.0))
                    u = np.clip(h[1::2], -c.get("swiglu_limit", 7.0), c.get("swiglu_limit", 7.0))
                    out += we * ((u + 1.0) * g * _sigmoid(g * 1.702) @ dn[e] + dnb[e])
            else:
                # Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock (+ shared expert for Qwen3.5 MoE)
                p_all = _softmax(_d(hf[lp + "mlp.gate.weight"]) @ x)
                top = np.argsort(-p_all, kind="stable")[:c["num_experts_per_tok"]]
                wt = p_all[top]
                if c.get("norm_topk_prob", True):
                    wt = wt / wt.sum()
                G, U, D = _hf_experts(hf, lp, c["num_experts"])
                out = np.zeros_like(x)
                for e, we in zip(top, wt):
                    out += we * (D[e] @ (_silu(G[e] @ x) * (U[e] @ x)))
            if arch == "qwen35moe":
                sh = _d(t[b + "ffn_down_shexp.weight"].data) @ (
                    _silu(_d(t[b + "ffn_gate_shexp.weight"].data) @ x) * (_d(t[b + "ffn_up_shexp.weight"].data) @ x))
                ref = ref + sh * _sigmoid(_d(t[b + "ffn_gate_inp_shexp.weight"].data).reshape(-1) @ x)
                shh = _d(hf[lp + "mlp.shared_expert.down_proj.weight"]) @ (
                    _silu(_d(hf[lp + "mlp.shared_expert.gate_proj.weight"]) @ x)
                    * (_d(hf[lp + "mlp.shared_expert.up_proj.weight"]) @ x))
                out = out + _sigmoid(_d(hf[lp + "mlp.shared_expert_gate.weight"]) @ x)[0] * shh
            cmp("MoE block, layer 0", ref, out)

    if arch in ("qwen35", "qwen35moe"):
        il = c["layer_types"].index("linear_attention")
        b, lp = f"blk.{il}.", f"model.layers.{il}."
        # llama.cpp (README, delta-net-base.cpp): tiled v heads, ssm_a = -exp(A_log), plain norms
        Hk, Hv = int(kv_get(kv, p + "ssm.group_count")), int(kv_get(kv, p + "ssm.time_step_rank"))
        dk = int(kv_get(kv, p + "ssm.state_size"))
        dv = int(kv_get(kv, p + "ssm.inner_size")) // Hv
        K = int(kv_get(kv, p + "ssm.conv_kernel"))

        def gguf_layer(xs):
            T = lambda n: _d(t[b + n].data)
            xn = _rms(xs, eps) * T("attn_norm.weight")
            qkv = xn @ T("attn_qkv.weight").T
            conv = T("ssm_conv1d.weight")                       # [C, K], tap K-1 = current
            pad = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv], axis=0)
            qkv = _silu(np.stack([(pad[i:i + K] * conv.T).sum(0) for i in range(len(xs))]))
            q = qkv[:, :Hk * dk].reshape(-1, Hk, dk)
            k = qkv[:, Hk * dk:2 * Hk * dk].reshape(-1, Hk, dk)
            v = qkv[:, 2 * Hk * dk:].reshape(-1, Hv, dv)
            q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-6)
            k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), 1e-6)
            z = (xn @ T("attn_gate.weight").T).reshape(-1, Hv, dv)
            beta = _sigmoid(xn @ T("ssm_beta.weight").T)
            g = _softplus(xn @ T("ssm_alpha.weight").T + T("ssm_dt.bias")) * T("ssm_a")
            S = np.zeros((Hv, dv, dk))
            o = np.zeros((len(xs), Hv, dv))
            for i in range(len(xs)):
                for h in range(Hv):
                    kh, qh = k[i, h % Hk], q[i, h % Hk]              # tiled: q/k head h mod Hk
                    S[h] *= np.exp(g[i, h])
                    S[h] += np.outer(beta[i, h] * (v[i, h] - S[h] @ kh), kh)
                    o[i, h] = S[h] @ qh / np.sqrt(dk)
            o = _rms(o, eps) * T("ssm_norm.weight") * _silu(z)
            return xs + o.reshape(len(xs), -1) @ T("ssm_out.weight").T

        def hf_layer(xs):
            W = lambda n: _d(hf[lp + n])
            hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
            dkk, dvv, KK = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
            xn = _rms(xs, eps) * (1.0 + W("input_layernorm.weight"))   # Qwen3_5RMSNorm
            qkv = xn @ W("linear_attn.in_proj_qkv.weight").T
            w = W("linear_attn.conv1d.weight")[:, 0, :]                 # F.conv1d, padding K-1
            pad = np.concatenate([np.zeros((KK - 1, qkv.shape[1])), qkv], axis=0)
            qkv = _silu(np.stack([(pad[i:i + KK] * w.T).sum(0) for i in range(len(xs))]))
            q = qkv[:, :hk * dkk].reshape(-1, hk, dkk)
            k = qkv[:, hk * dkk:2 * hk * dkk].reshape(-1, hk, dkk)
            v = qkv[:, 2 * hk * dkk:].reshape(-1, hv, dvv)
            z = (xn @ W("linear_attn.in_proj_z.weight").T).reshape(-1, hv, dvv)
            beta = _sigmoid(xn @ W("linear_attn.in_proj_b.weight").T)
            g = -np.exp(W("linear_attn.A_log")) * _softplus(xn @ W("linear_attn.in_proj_a.weight").T
                                                            + W("linear_attn.dt_bias"))
            q = np.repeat(q, hv // hk, axis=1)                          # repeat_interleave
            k = np.repeat(k, hv // hk, axis=1)
            q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dkk)   # l2norm, scale
            k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
            S = np.zeros((hv, dkk, dvv))
            o = np.zeros((len(xs), hv, dvv))
            for i in range(len(xs)):
                S *= np.exp(g[i])[:, None, None]
                kv_mem = np.einsum("hk,hkv->hv", k[i], S)
                delta = (v[i] - kv_mem) * beta[i][:, None]
                S += k[i][:, :, None] * delta[:, None, :]
                o[i] = np.einsum("hk,hkv->hv", q[i], S)
            o = _rms(o, eps) * W("linear_attn.norm.weight") * _silu(z)  # Qwen3NextRMSNormGated
            return xs + o.reshape(len(xs), -1) @ W("linear_attn.out_proj.weight").T

        cmp(f"Gated DeltaNet layer {il}, {n_tokens} tokens", gguf_layer(xs), hf_layer(xs))
        # full-attention layer: per-head [query | gate] split and (1 + w) q/k norms
        il = c["layer_types"].index("full_attention")
        b, lp = f"blk.{il}.", f"model.layers.{il}."
        D, Hq = c["head_dim"], c["num_attention_heads"]
        qg = (xs @ _d(t[b + "attn_q.weight"].data).T).reshape(-1, Hq, 2 * D)
        ref_q, ref_g = _rms(qg[..., :D], eps) * _d(t[b + "attn_q_norm.weight"].data), qg[..., D:]
        qh = (xs @ _d(hf[lp + "self_attn.q_proj.weight"]).T).reshape(-1, Hq, 2 * D)
        q_h, g_h = np.split(qh, 2, axis=-1)                             # Qwen3NextAttention: chunk(2)
        cmp(f"attention query, layer {il}", ref_q, _rms(q_h, eps) * (1.0 + _d(hf[lp + "self_attn.q_norm.weight"])))
        cmp(f"attention output gate, layer {il}", ref_g, g_h)

    tol = 1e-6           # float32 storage: HF 1 + (w - 1) can differ from w by 2^-25
    tol_dn = 1e-5        # and the two sides' l2-norm epsilons differ (max(|x|,1e-6) vs sqrt(|x|^2+1e-6))
    ok = True
    lines = []
    for label, err in checks:
        good = err <= (tol_dn if "DeltaNet" in label else tol)
        ok &= good
        lines.append(f"  {'ok  ' if good else 'FAIL'} {label}: max rel diff {err:.2e}")
    lines.insert(0, f"{'OK  ' if ok else 'FAIL'} semantic check {os.path.basename(gguf_path)}: "
                    f"{len(checks)} computations, llama.cpp rules on the GGUF vs transformers rules on the HF dir")
    return ok, lines


# ------------------------------------------------------------------------------------------------
# Synthetic Qwen3.5 files for the self-test. In the goldens Hk = 2 and r = Hv / Hk = 2, and the
# v-head permutation is then its own inverse, so they cannot tell its direction; these files use
# Hk = 2, Hv = 6 (r = 3), as real checkpoints do (Hk = 16, Hv = 32: r != Hk).
# ------------------------------------------------------------------------------------------------
def write_gguf(path, kv, tensors, alignment=32):
    """Minimal GGUF v3 writer: kv {key: (type, value)}, tensors {name: float32 array (numpy shape)}."""
    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def val(vtype, v):
        if vtype == GGUF_STRING:
            return s(v)
        if vtype == GGUF_ARRAY:
            at = 5 if all(isinstance(e, int) for e in v) else GGUF_STRING
            return struct.pack("<IQ", at, len(v)) + b"".join(val(at, e) for e in v)
        return struct.pack(_GGUF_SCALARS[vtype], v)

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, (vt, v) in kv.items():
        head += s(k) + struct.pack("<I", vt) + val(vt, v)
    data, offs = b"", []
    for name, a in tensors.items():
        data += b"\0" * (-len(data) % alignment)
        offs.append(len(data))
        data += np.ascontiguousarray(a, "<f4").tobytes()
    for (name, a), off in zip(tensors.items(), offs):
        ne = list(reversed(a.shape))
        head += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", GGML_F32, off)
    head += b"\0" * (-len(head) % alignment)
    with open(path, "wb") as f:
        f.write(head + data)


def synth_qwen35(path, moe, seed=11, H=32, V=64, L=4, Hq=2, Hkv=1, D=16, Hk=2, Hv=6, dk=8, dv=8,
                 K=4, E=4, F=16, Fs=24, Fd=48):
    rng = np.random.default_rng(seed)
    a = "qwen35moe" if moe else "qwen35"
    U32, F32_ = 4, GGUF_F32
    kv = {"general.architecture": (GGUF_STRING, a),
          a + ".context_length": (U32, 4096), a + ".embedding_length": (U32, H),
          a + ".block_count": (U32, L), a + ".feed_forward_length": (U32, Fd),
          a + ".attention.head_count": (U32, Hq), a + ".attention.head_count_kv": (U32, Hkv),
          a + ".attention.key_length": (U32, D), a + ".attention.value_length": (U32, D),
          a + ".rope.freq_base": (F32_, 1e7), a + ".attention.layer_norm_rms_epsilon": (F32_, 1e-6),
          a + ".rope.dimension_count": (U32, D // 4), a + ".rope.dimension_sections": (GGUF_ARRAY, [1, 1, 0, 0]),
          a + ".ssm.conv_kernel": (U32, K), a + ".ssm.state_size": (U32, dk),
          a + ".ssm.group_count": (U32, Hk), a + ".ssm.time_step_rank": (U32, Hv),
          a + ".ssm.inner_size": (U32, Hv * dv), a + ".full_attention_interval": (U32, 4)}
    if moe:
        kv.update({a + ".expert_count": (U32, E), a + ".expert_used_count": (U32, 2),
                   a + ".expert_feed_forward_length": (U32, F),
                   a + ".expert_shared_feed_forward_length": (U32, Fs)})
    r = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
    nrm = lambda n: (1 + 0.25 * rng.standard_normal(n)).astype(np.float32)
    t = {"token_embd.weight": rng.standard_normal((V, H)).astype(np.float32),
         "output_norm.weight": nrm(H), "output.weight": r(V, H)}
    C = 2 * Hk * dk + Hv * dv
    for il in range(L):
        b = f"blk.{il}."
        t[b + "attn_norm.weight"] = nrm(H)
        t[b + "post_attention_norm.weight"] = nrm(H)
        if (il + 1) % 4:
            t.update({b + "attn_qkv.weight": r(C, H), b + "attn_gate.weight": r(Hv * dv, H),
                      b + "ssm_conv1d.weight": (rng.standard_normal((C, K)) / 2).astype(np.float32),
                      b + "ssm_dt.bias": (1 + 0.5 * rng.standard_normal(Hv)).astype(np.float32),
                      b + "ssm_a": (-np.exp(rng.uniform(-4, 0.7, Hv))).astype(np.float32),
                      b + "ssm_beta.weight": r(Hv, H), b + "ssm_alpha.weight": r(Hv, H),
                      b + "ssm_norm.weight": nrm(dv), b + "ssm_out.weight": r(H, Hv * dv)})
        else:
            t.update({b + "attn_q.weight": r(2 * Hq * D, H), b + "attn_k.weight": r(Hkv * D, H),
                      b + "attn_v.weight": r(Hkv * D, H), b + "attn_output.weight": r(H, Hq * D),
                      b + "attn_q_norm.weight": nrm(D), b + "attn_k_norm.weight": nrm(D)})
        if moe:
            t.update({b + "ffn_gate_inp.weight": r(E, H), b + "ffn_gate_exps.weight": r(E, F, H),
                      b + "ffn_up_exps.weight": r(E, F, H), b + "ffn_down_exps.weight": r(E, H, F),
                      b + "ffn_gate_inp_shexp.weight": r(H), b + "ffn_gate_shexp.weight": r(Fs, H),
                      b + "ffn_up_shexp.weight": r(Fs, H), b + "ffn_down_shexp.weight": r(H, Fs)})
        else:
            t.update({b + "ffn_gate.weight": r(Fd, H), b + "ffn_up.weight": r(Fd, H),
                      b + "ffn_down.weight": r(H, Fd)})
    write_gguf(path, kv, t)


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def default_golden_dir():
    return os.path.join(shared_dir(), "golden", "arch")


def self_test(golden_dir):
    files = []
    for sub in sorted(os.listdir(golden_dir)):
        d = os.path.join(golden_dir, sub)
        if os.path.isdir(d):
            files += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".gguf")]
    if not files:
        raise ConvError(f"no .gguf files under {golden_dir}")
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for moe in (False, True):
            path = os.path.join(tmp, f"synthetic-qwen35{'moe' if moe else ''}-hk2-hv6.gguf")
            synth_qwen35(path, moe)
            files.append(path)
        for path in files:
            arch = _arch_of(read_gguf(path)[0])
            variants = [("default", Options())]
            if arch == "gpt-oss" and "mxfp4" in os.path.basename(path):
                variants.append(("--experts-f32", Options(experts_f32=True)))
            if arch == "qwen3moe":
                variants.append(("--experts-layout fused", Options(experts_layout="fused")))
            if arch in ("qwen35", "qwen35moe"):
                variants.append(("--text-only", Options(text_only=True)))
            if arch == "qwen35moe":
                variants.append(("--experts-layout per-expert", Options(experts_layout="per-expert")))
            for label, opts in variants:
                out = os.path.join(tmp, f"{os.path.basename(path)}.{len(os.listdir(tmp))}")
                convert(path, out, opts)
                ok, lines = round_trip(path, out)
                ok2, lines2 = semantic_check(path, out)
                all_ok &= ok and ok2
                print(f"[{label}] " + lines[0])
                for ln in lines[1:]:
                    print("    " + ln)
                print(f"[{label}] " + lines2[0])
                if not ok2:
                    print("\n".join(lines2[1:]))
    print("self-test: " + ("all checks passed" if all_ok else "FAILED"))
    return all_ok


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write the Hugging Face checkpoint (config.json + "
                                 "model.safetensors) that llama.cpp's converter turns into a given "
                                 "qwen3moe / gpt-oss / qwen35 / qwen35moe GGUF file. See the module docstring.")
    ap.add_argument("input", nargs="?", help="IN.gguf")
    ap.add_argument("output", nargs="?", help="OUT_DIR (or HF_DIR with --to-gguf-check)")
    ap.add_argument("--experts-f32", action="store_true", help="gpt-oss: dequantize MXFP4 experts to float32")
    ap.add_argument("--experts-layout", choices=("per-expert", "fused"),
                    help="qwen3moe/qwen35moe routed experts (default per-expert / fused)")
    ap.add_argument("--text-only", action="store_true", help="qwen35*: write the *ForCausalLM layout")
    ap.add_argument("--check", action="store_true", help="after writing, verify the HF->GGUF round trip")
    ap.add_argument("--to-gguf-check", action="store_true", help="only verify HF_DIR against IN.gguf")
    ap.add_argument("--self-test", nargs="?", const="", metavar="GOLDEN_ARCH_DIR",
                    help="convert and round-trip every golden GGUF with every option")
    args = ap.parse_args(argv)
    try:
        if args.self_test is not None:
            return 0 if self_test(args.self_test or default_golden_dir()) else 1
        if not args.input or not args.output:
            ap.error("IN.gguf and OUT_DIR are required")
        if args.to_gguf_check:
            ok, lines = round_trip(args.input, args.output)
            ok2, lines2 = semantic_check(args.input, args.output)
            print("\n".join(lines + lines2))
            return 0 if ok and ok2 else 1
        opts = Options(args.experts_f32, args.experts_layout, args.text_only)
        cfg, hf = convert(args.input, args.output, opts)
        print(f"wrote {args.output}/config.json ({(cfg.get('text_config') or cfg)['model_type']}) and "
              f"model.safetensors ({len(hf)} tensors)")
        if args.check:
            ok, lines = round_trip(args.input, args.output)
            ok2, lines2 = semantic_check(args.input, args.output)
            print("\n".join(lines + lines2))
            return 0 if ok and ok2 else 1
        return 0
    except ConvError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
