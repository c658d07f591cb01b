"""Random-weight GGUF files of the qwen3moe, gpt-oss, qwen35 and qwen35moe architectures at any
shape, for llamacpp-crosscheck (no vocabulary: tokenizer.ggml.model = "no_vocab").

The tensors and distributions follow ../shared/golden/arch/README.md ("How they were made"):
embeddings N(0, 1), linear weights N(0, 1/fan_in), norm weights 1 + 0.25 N(0, 1), the untied
output matrix 2 N(0, 1/n_embd); gpt-oss biases 0.2 N(0, 1), sinks N(0, 1), expert gate/up x3 and
down x0.125; DeltaNet A = -exp(U(-4, 0.7)), dt bias 1 + 0.5 N(0, 1). Tensors are drawn in the
order they are written, from numpy.random.default_rng(seed). Needs numpy and gguf-py (from the
llama.cpp tree; crosscheck.py puts it on the path).
"""
import numpy as np
import gguf


def write(path, arch, c, seed, expert_type=None, quant=None):
    """c: the shape (see crosscheck.py). expert_type: a gguf.GGMLQuantizationType for the expert
    matrices (e.g. MXFP4). quant: {name substring: type} for other matrices."""
    rng = np.random.default_rng(seed)
    quant = quant or {}
    w = gguf.GGUFWriter(path, arch)
    E, L, V = c["n_embd"], c["layers"], c["vocab"]
    H, Hkv, hd = c["heads"], c["kv_heads"], c["head_dim"]
    hybrid = arch in ("qwen35", "qwen35moe")
    w.add_string("general.name", f"crosscheck-{arch}-{seed}")
    w.add_uint32(f"{arch}.context_length", c.get("ctx", 4096))
    w.add_uint32(f"{arch}.embedding_length", E)
    w.add_uint32(f"{arch}.block_count", L)
    w.add_uint32(f"{arch}.feed_forward_length", c.get("ff", 96))
    w.add_uint32(f"{arch}.attention.head_count", H)
    w.add_uint32(f"{arch}.attention.head_count_kv", Hkv)
    w.add_uint32(f"{arch}.attention.key_length", hd)
    w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_float32(f"{arch}.rope.freq_base", c["rope_base"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c["eps"])
    w.add_uint32("general.file_type", 0)
    w.add_string("tokenizer.ggml.model", "no_vocab")
    w.add_uint32(f"{arch}.vocab_size", V)
    if "experts" in c:
        w.add_uint32(f"{arch}.expert_count", c["experts"])
        w.add_uint32(f"{arch}.expert_used_count", c["used"])
        w.add_uint32(f"{arch}.expert_feed_forward_length", c["eff"])
    if arch == "gpt-oss":
        w.add_uint32(f"{arch}.attention.sliding_window", c["window"])
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", c["yarn_factor"])
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", c["yarn_orig"])
        w.add_float32(f"{arch}.rope.scaling.yarn_beta_fast", 32.0)
        w.add_float32(f"{arch}.rope.scaling.yarn_beta_slow", 1.0)
    if hybrid:
        w.add_uint32(f"{arch}.rope.dimension_count", c["rope_dims"])
        w.add_array(f"{arch}.rope.dimension_sections", c["sections"])
        w.add_uint32(f"{arch}.ssm.conv_kernel", c["conv"])
        w.add_uint32(f"{arch}.ssm.state_size", c["state"])
        w.add_uint32(f"{arch}.ssm.group_count", c["groups"])
        w.add_uint32(f"{arch}.ssm.time_step_rank", c["dt_rank"])
        w.add_uint32(f"{arch}.ssm.inner_size", c["inner"])
        w.add_uint32(f"{arch}.full_attention_interval", c["interval"])
        if arch == "qwen35moe":
            w.add_uint32(f"{arch}.expert_shared_feed_forward_length", c["shared_ff"])

    def normal(scale, shape):
        return (scale * rng.normal(0, 1, shape)).astype(np.float32)

    def lin(out, inp, scale=1.0):
        return normal(scale / np.sqrt(inp), (out, inp))

    def norm(n):
        return (1 + 0.25 * rng.normal(0, 1, n)).astype(np.float32)

    def put(name, a, qtype=None):
        if qtype is None and name.endswith(".weight") and a.ndim >= 2:
            qtype = next((t for pat, t in quant.items() if pat in name), None)
        if qtype is None:
            w.add_tensor(name, a)
        else:
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    put("token_embd.weight", normal(1.0, (V, E)))
    put("output_norm.weight", norm(E))
    put("output.weight", normal(2 / np.sqrt(E), (V, E)))
    for layer in range(L):
        b = f"blk.{layer}."
        put(b + "attn_norm.weight", norm(E))
        if arch != "qwen3moe":
            put(b + "post_attention_norm.weight", norm(E))
        if hybrid and (layer + 1) % c["interval"] != 0:  # a Gated DeltaNet layer
            Hk, Hv, dk, inner = c["groups"], c["dt_rank"], c["state"], c["inner"]
            channels = 2 * Hk * dk + inner
            put(b + "attn_qkv.weight", lin(channels, E))
            put(b + "attn_gate.weight", lin(inner, E))
            put(b + "ssm_conv1d.weight", normal(0.5, (channels, c["conv"])))
            put(b + "ssm_dt.bias", (1 + 0.5 * rng.normal(0, 1, Hv)).astype(np.float32))
            put(b + "ssm_a", (-np.exp(rng.uniform(-4, 0.7, Hv))).astype(np.float32))
            put(b + "ssm_beta.weight", lin(Hv, E))
            put(b + "ssm_alpha.weight", lin(Hv, E))
            put(b + "ssm_norm.weight", norm(inner // Hv))
            put(b + "ssm_out.weight", lin(E, inner))
        else:
            q_rows = H * hd * (2 if hybrid else 1)  # Qwen3.5: each head's query and gate
            put(b + "attn_q.weight", lin(q_rows, E))
            if arch == "gpt-oss":
                put(b + "attn_q.bias", normal(0.2, q_rows))
            put(b + "attn_k.weight", lin(Hkv * hd, E))
            if arch == "gpt-oss":
                put(b + "attn_k.bias", normal(0.2, Hkv * hd))
            put(b + "attn_v.weight", lin(Hkv * hd, E))
            if arch == "gpt-oss":
                put(b + "attn_v.bias", normal(0.2, Hkv * hd))
            put(b + "attn_output.weight", lin(E, H * hd))
            if arch == "gpt-oss":
                put(b + "attn_output.bias", normal(0.2, E))
                put(b + "attn_sinks.weight", normal(1.0, H))
            else:
                put(b + "attn_q_norm.weight", norm(hd))
                put(b + "attn_k_norm.weight", norm(hd))
        if arch == "qwen3moe":
            put(b + "ffn_norm.weight", norm(E))
        if arch == "qwen35":
            ff = c["ff"]
            put(b + "ffn_gate.weight", lin(ff, E))
            put(b + "ffn_up.weight", lin(ff, E))
            put(b + "ffn_down.weight", lin(E, ff))
            continue
        X, F = c["experts"], c["eff"]
        put(b + "ffn_gate_inp.weight", lin(X, E))
        if arch == "gpt-oss":
            put(b + "ffn_gate_inp.bias", normal(0.2, X))
        gs, us, ds = (3.0, 3.0, 0.125) if arch == "gpt-oss" else (1.0, 1.0, 1.0)
        for part, rows, cols, scale in (("gate", F, E, gs), ("up", F, E, us), ("down", E, F, ds)):
            put(b + f"ffn_{part}_exps.weight", np.stack([lin(rows, cols, scale) for _ in range(X)]),
                expert_type)
            if arch == "gpt-oss":
                put(b + f"ffn_{part}_exps.bias", normal(0.2, (X, rows)))
        if arch == "qwen35moe":
            S = c["shared_ff"]
            put(b + "ffn_gate_inp_shexp.weight", normal(1 / np.sqrt(E), E))
            put(b + "ffn_gate_shexp.weight", lin(S, E))
            put(b + "ffn_up_shexp.weight", lin(S, E))
            put(b + "ffn_down_shexp.weight", lin(E, S))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
