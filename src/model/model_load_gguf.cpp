// Loading a GGUF file (llama.cpp's format): the {arch}.* metadata to a ModelConfig, and the
// GGUF tensor names (token_embd, blk.N.attn_q, ...) to the model's weights, used in place.
// Architectures: llama, qwen2, qwen3, and the mixture-of-experts and hybrid qwen3moe, gpt-oss,
// qwen35 and qwen35moe (docs/ARCHITECTURES.md; their tensors as llama.cpp's converter names them).
//
// Dimensions in GGUF are listed fastest-varying first, so a Linear weight [out][in] appears as
// [in, out]. llama.cpp's "llama" architecture applies RoPE to adjacent pairs (x[2j], x[2j+1]),
// and its converters permute Hugging Face's Q/K rows to match; the forward pass here rotates
// halves (x[j], x[j + d/2]) as Hugging Face does, so the Q/K rows of each head are put back in
// Hugging Face's order on load (rows 0,2,4,... then 1,3,5,...) into memory the model owns.
// qwen2 and qwen3 GGUF files already use the rotate-half ("NEOX") order and are used as they are.
//
// Rope: {arch}.rope.freq_base, and Llama-3.1's scaling from the rope_freqs.weight tensor
// llama.cpp's converter writes (divisors of each frequency); {arch}.rope.scaling.type other than
// none is refused.
//
// Weight types: F32, F16, BF16, and the block-quantized Q8_0, Q4_0, Q5_0, Q4_K and Q6_K (every type
// llama-quantize's Q4_K_M preset writes) and MXFP4 (gpt-oss's experts), kept quantized in the
// mapped file and multiplied by the quantized kernels (kernels.h); other quantized types are
// refused naming the type and tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model.h"

namespace rkv {

namespace {

using Shape = std::vector<std::int64_t>;

constexpr const char* kSupportedTypes = "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4";

struct GgufLoader {
  const GgufFile& g;
  std::string where;
  std::string arch;

  [[noreturn]] void fail(const std::string& what) const { throw Error(where + ": " + what); }

  std::string key(const std::string& suffix) const { return arch + "." + suffix; }

  int get_int(const std::string& k, std::optional<int> fallback) const {
    const auto v = g.get_uint(k);
    if (!v) {
      if (!fallback) fail("missing metadata '" + k + "'");
      return *fallback;
    }
    if (*v == 0 || *v > 0x7fffffffu)
      fail("metadata '" + k + "' is " + std::to_string(*v) + ", expected a positive integer");
    return static_cast<int>(*v);
  }

  DType dtype_of(const GgufTensor& t) const {
    if (const auto dt = dtype_of_ggml_type(t.type->id)) return *dt;
    if (t.type->block_elements > 1)
      fail("tensor " + t.name + " has the quantized type " + std::string(t.type->name) +
           ", which this build does not read (supported: " + kSupportedTypes + ")");
    fail("tensor " + t.name + " has type " + std::string(t.type->name) +
         ", which is not a weight type (supported: " + kSupportedTypes + ")");
  }

  // The tensor `name` with the Hugging Face shape `hf` ([out][in]), i.e. GGUF dims reversed.
  const GgufTensor& get(const std::string& name, const Shape& hf) const {
    const GgufTensor* t = g.find_tensor(name);
    if (t == nullptr) fail("missing tensor " + name);
    const Shape want(hf.rbegin(), hf.rend());
    if (t->dims != want)
      fail("tensor " + name + " has dimensions " + t->dims_string() + ", expected " +
           shape_to_string(want) + " (GGUF order, fastest-varying first)");
    const DType dt = dtype_of(*t);
    // Quantized blocks are read with unaligned loads; float elements must be aligned.
    if (!dtype_is_quantized(dt) && reinterpret_cast<std::uintptr_t>(t->data) % dtype_size(dt) != 0)
      fail("tensor " + name + ": data is not aligned to its element size");
    // The file's blocks were sized (and bounds-checked) by GgufFile from ggml's table; the kernels
    // read them with dtype.h's: the two must agree.
    if (t->type->block_elements != dtype_block_elements(dt) ||
        t->type->block_bytes != dtype_size(dt))
      fail("tensor " + name + ": internal error: block size of " + std::string(t->type->name) +
           " disagrees with the kernels'");
    return *t;
  }

  kernels::WeightView matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    const GgufTensor& t = get(name, {rows, cols});
    return {t.data, dtype_of(t), static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
  }

  // A 3-D stack of expert matrices ([experts][rows][cols] in Hugging Face order) as one matrix
  // of experts * rows rows (expert_matrix picks one).
  kernels::WeightView experts(const std::string& name, std::int64_t experts, std::int64_t rows,
                              std::int64_t cols) const {
    const GgufTensor& t = get(name, {experts, rows, cols});
    return {t.data, dtype_of(t), static_cast<std::size_t>(experts * rows),
            static_cast<std::size_t>(cols)};
  }

  std::vector<float> vector_f32(const std::string& name, std::int64_t n) const {
    return vector_f32(name, Shape{n});
  }
  // Any float tensor of Hugging Face shape `hf`, as float32 in row-major order.
  std::vector<float> vector_f32(const std::string& name, const Shape& hf) const {
    const GgufTensor& t = get(name, hf);
    const DType dt = dtype_of(t);
    if (dtype_is_quantized(dt))
      fail("tensor " + name + " is quantized (" + std::string(t.type->name) +
           "); it must be F32, F16 or BF16");
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t.data, dt, i);
    return v;
  }
};

// llama.cpp's permutation undone: within each head of `head_dim` rows, row 2j goes to j and row
// 2j+1 to j + head_dim/2. Returns a copy (the mapped file is read-only) kept alive by `owner`.
kernels::WeightView unpermute_rows(const kernels::WeightView& w, int head_dim,
                                   std::vector<std::shared_ptr<const void>>& owner) {
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  auto buffer = std::make_shared<std::vector<std::uint64_t>>((w.rows * row_bytes + 7) / 8);
  auto* out = reinterpret_cast<std::byte*>(buffer->data());
  const auto* in = static_cast<const std::byte*>(w.data);
  const std::size_t D = static_cast<std::size_t>(head_dim), half = D / 2;
  for (std::size_t head = 0; head < w.rows / D; ++head)
    for (std::size_t j = 0; j < half; ++j) {
      const std::size_t base = head * D;
      std::memcpy(out + (base + j) * row_bytes, in + (base + 2 * j) * row_bytes, row_bytes);
      std::memcpy(out + (base + half + j) * row_bytes, in + (base + 2 * j + 1) * row_bytes,
                  row_bytes);
    }
  owner.push_back(buffer);
  return {out, w.dtype, w.rows, w.cols};
}

// Qwen3.5's attn_q rows, per head [query (head_dim rows) | gate (head_dim rows)], split into the
// query rows (q, in place) and the gate rows (gate), copies kept alive by `owner`.
void split_gate_rows(kernels::WeightView& q, int head_dim, kernels::WeightView& gate,
                     std::vector<std::shared_ptr<const void>>& owner) {
  const std::size_t row_bytes = dtype_row_bytes(q.dtype, q.cols);
  const std::size_t D = static_cast<std::size_t>(head_dim), heads = q.rows / (2 * D);
  auto buffer = std::make_shared<std::vector<std::uint64_t>>((q.rows * row_bytes + 7) / 8);
  auto* out = reinterpret_cast<std::byte*>(buffer->data());
  const auto* in = static_cast<const std::byte*>(q.data);
  for (std::size_t h = 0; h < heads; ++h) {
    std::memcpy(out + h * D * row_bytes, in + 2 * h * D * row_bytes, D * row_bytes);
    std::memcpy(out + (heads + h) * D * row_bytes, in + (2 * h + 1) * D * row_bytes, D * row_bytes);
  }
  owner.push_back(buffer);
  q = {out, q.dtype, heads * D, q.cols, q.precision};
  gate = {out + heads * D * row_bytes, q.dtype, heads * D, q.cols, q.precision};
}

std::vector<float> unpermute_vector(const std::vector<float>& v, int head_dim) {
  std::vector<float> out(v.size());
  const std::size_t D = static_cast<std::size_t>(head_dim), half = D / 2;
  for (std::size_t head = 0; head < v.size() / D; ++head)
    for (std::size_t j = 0; j < half; ++j) {
      out[head * D + j] = v[head * D + 2 * j];
      out[head * D + half + j] = v[head * D + 2 * j + 1];
    }
  return out;
}

}  // namespace

std::unique_ptr<Model> Model::load_gguf(const std::filesystem::path& path) {
  auto file = std::make_shared<GgufFile>(path);
  std::unique_ptr<Model> m(new Model());
  m->dir_ = path;
  m->keep_alive_.push_back(file);
  GgufLoader L{*file, path.string(), ""};
  const GgufFile& g = *file;

  const auto arch = g.get_string("general.architecture");
  if (!arch) L.fail("missing metadata 'general.architecture'");
  L.arch = *arch;
  ModelConfig& c = m->config_;
  struct ArchName {
    const char* gguf;
    Architecture arch;
    const char* hf;
  };
  static constexpr ArchName kArchs[] = {
      {"llama", Architecture::Llama, "LlamaForCausalLM"},
      {"qwen2", Architecture::Qwen2, "Qwen2ForCausalLM"},
      {"qwen3", Architecture::Qwen3, "Qwen3ForCausalLM"},
      {"qwen3moe", Architecture::Qwen3Moe, "Qwen3MoeForCausalLM"},
      {"gpt-oss", Architecture::GptOss, "GptOssForCausalLM"},
      {"qwen35", Architecture::Qwen35, "Qwen3_5ForCausalLM"},
      {"qwen35moe", Architecture::Qwen35Moe, "Qwen3_5MoeForCausalLM"}};
  const ArchName* found = nullptr;
  for (const ArchName& a : kArchs)
    if (L.arch == a.gguf) found = &a;
  if (found == nullptr)
    L.fail("unsupported GGUF architecture '" + L.arch +
           "' (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, qwen35, qwen35moe)");
  c.arch = found->arch;
  c.architecture_name = found->hf;
  const bool gpt_oss = c.arch == Architecture::GptOss;
  const bool qwen35 = c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe;
  const bool moe = c.arch == Architecture::Qwen3Moe || gpt_oss || c.arch == Architecture::Qwen35Moe;

  // Every tensor's type must be one the model reads, named with the first that is not.
  for (const GgufTensor& t : g.tensors()) L.dtype_of(t);

  c.hidden_size = L.get_int(L.key("embedding_length"), std::nullopt);
  c.num_layers = L.get_int(L.key("block_count"), std::nullopt);
  c.num_heads = L.get_int(L.key("attention.head_count"), std::nullopt);
  c.num_kv_heads = L.get_int(L.key("attention.head_count_kv"), c.num_heads);
  c.intermediate_size =
      L.get_int(L.key("feed_forward_length"), moe ? std::optional(1) : std::nullopt);
  c.max_position_embeddings = L.get_int(L.key("context_length"), std::nullopt);
  if (c.num_heads > c.hidden_size)
    L.fail(L.key("attention.head_count") + " exceeds embedding_length");
  c.head_dim = L.get_int(L.key("attention.key_length"), c.hidden_size / c.num_heads);
  if (L.get_int(L.key("attention.value_length"), c.head_dim) != c.head_dim)
    L.fail(L.key("attention.value_length") + " differs from key_length, which is not supported");
  if (c.num_heads % c.num_kv_heads != 0)
    L.fail(L.key("attention.head_count") + " (" + std::to_string(c.num_heads) +
           ") is not a multiple of head_count_kv (" + std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0)
    L.fail("the head dimension must be even, got " + std::to_string(c.head_dim));
  const int rope_dims = L.get_int(L.key("rope.dimension_count"), c.head_dim);
  if (rope_dims > c.head_dim || rope_dims % 2 != 0)
    L.fail(L.key("rope.dimension_count") + " is " + std::to_string(rope_dims) +
           ", expected an even number no larger than the head dimension " +
           std::to_string(c.head_dim));
  if (rope_dims != c.head_dim) {
    if (!qwen35)
      L.fail(L.key("rope.dimension_count") + " is " + std::to_string(rope_dims) +
             " but the head dimension is " + std::to_string(c.head_dim) +
             ": partial rotary embeddings are supported for qwen35 only");
    c.rope_dim = rope_dims;
  }
  if (const auto* sections = g.get_int_array(L.key("rope.dimension_sections"))) {
    // IMRoPE (Qwen3.5): text positions are equal in every section, so the sections reduce to
    // plain RoPE as long as they cover every frequency pair.
    std::int64_t pairs = 0;
    for (std::int64_t v : *sections) pairs += v;
    if (pairs != rope_dims / 2)
      L.fail(L.key("rope.dimension_sections") + " cover " + std::to_string(pairs) +
             " frequency pairs, but rope.dimension_count has " + std::to_string(rope_dims / 2));
  }
  const auto eps = g.get_real(L.key("attention.layer_norm_rms_epsilon"));
  if (!eps) L.fail("missing metadata '" + L.key("attention.layer_norm_rms_epsilon") + "'");
  if (!(*eps > 0.0 && *eps < 1.0))
    L.fail(L.key("attention.layer_norm_rms_epsilon") + " must lie in (0, 1)");
  c.rms_norm_eps = static_cast<float>(*eps);
  c.rope_theta = static_cast<float>(g.get_real(L.key("rope.freq_base")).value_or(10000.0));
  if (!(c.rope_theta > 0.0f)) L.fail(L.key("rope.freq_base") + " must be positive");
  if (const auto scaling = g.get_string(L.key("rope.scaling.type"));
      scaling && *scaling != "none") {
    if (*scaling != "yarn")
      L.fail("rope scaling '" + *scaling + "' (" + L.key("rope.scaling.type") +
             ") is not supported for GGUF files (supported: yarn)");
    RopeScaling& y = c.rope_scaling;
    y.yarn = true;
    y.factor = static_cast<float>(g.get_real(L.key("rope.scaling.factor")).value_or(1.0));
    y.original_max_position_embeddings =
        L.get_int(L.key("rope.scaling.original_context_length"), c.max_position_embeddings);
    // llama.cpp reads yarn_beta_fast/slow but uses its defaults, 32 and 1, whatever they say.
    y.beta_fast = 32.0f;
    y.beta_slow = 1.0f;
    if (!(y.factor >= 1.0f) || !std::isfinite(y.factor))
      L.fail(L.key("rope.scaling.factor") + " must be at least 1");
  }
  if (moe) {
    c.moe.experts = L.get_int(L.key("expert_count"), std::nullopt);
    c.moe.experts_used = L.get_int(L.key("expert_used_count"), std::nullopt);
    c.moe.expert_ff = L.get_int(L.key("expert_feed_forward_length"), std::nullopt);
    if (c.arch == Architecture::Qwen35Moe)
      c.moe.shared_ff = L.get_int(L.key("expert_shared_feed_forward_length"), std::nullopt);
    if (c.moe.experts_used > c.moe.experts)
      L.fail(L.key("expert_used_count") + " exceeds expert_count");
    c.moe.routing = gpt_oss ? MoeConfig::Routing::TopKSoftmax : MoeConfig::Routing::SoftmaxTopK;
  }
  c.layer_kinds.assign(static_cast<std::size_t>(c.num_layers), LayerKind::Attention);
  if (gpt_oss) {
    c.sliding_window = L.get_int(L.key("attention.sliding_window"), std::nullopt);
    // Each sequence holds a ring of this many keys per window layer: bounded by the context.
    if (c.sliding_window > c.max_position_embeddings)
      L.fail(L.key("attention.sliding_window") + " (" + std::to_string(c.sliding_window) +
             ") exceeds context_length (" + std::to_string(c.max_position_embeddings) + ")");
    c.attention_sinks = true;
    c.output_bias = true;
    for (int l = 0; l < c.num_layers; l += 2)  // llama.cpp's swa pattern 2: the even layers
      c.layer_kinds[static_cast<std::size_t>(l)] = LayerKind::SlidingWindow;
  }
  if (qwen35) {
    DeltaNetConfig& d = c.delta_net;
    d.k_heads = L.get_int(L.key("ssm.group_count"), std::nullopt);
    d.v_heads = L.get_int(L.key("ssm.time_step_rank"), std::nullopt);
    d.head_k_dim = L.get_int(L.key("ssm.state_size"), std::nullopt);
    const int inner = L.get_int(L.key("ssm.inner_size"), std::nullopt);
    d.conv_kernel = L.get_int(L.key("ssm.conv_kernel"), std::nullopt);
    if (inner % d.v_heads != 0 || d.v_heads % d.k_heads != 0)
      L.fail(L.key("ssm.inner_size") +
             " must divide into time_step_rank heads, and those into "
             "group_count groups");
    d.head_v_dim = inner / d.v_heads;
    const int interval = L.get_int(L.key("full_attention_interval"), 4);
    for (int l = 0; l < c.num_layers; ++l)
      if ((l + 1) % interval != 0) c.layer_kinds[static_cast<std::size_t>(l)] = LayerKind::DeltaNet;
    c.attention_gate = true;
  }
  if (c.kv_layers() == 0) L.fail("the model has no full-attention layer");

  if (const auto* tokens = g.get_string_array("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int>(tokens->size());
  } else {
    c.vocab_size = L.get_int(L.key("vocab_size"), std::nullopt);
  }
  if (c.vocab_size <= 0) L.fail("the vocabulary is empty");
  if (const auto bos = g.get_uint("tokenizer.ggml.bos_token_id");
      bos && *bos < static_cast<std::uint64_t>(c.vocab_size))
    c.bos_token_id = static_cast<int>(*bos);
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const auto eos = g.get_uint(k); eos && *eos < static_cast<std::uint64_t>(c.vocab_size))
      c.eos_token_ids.push_back(static_cast<int>(*eos));
  std::sort(c.eos_token_ids.begin(), c.eos_token_ids.end());
  c.eos_token_ids.erase(std::unique(c.eos_token_ids.begin(), c.eos_token_ids.end()),
                        c.eos_token_ids.end());
  c.qk_norm = c.arch == Architecture::Qwen3 || c.arch == Architecture::Qwen3Moe || qwen35;
  c.attention_bias =
      c.arch == Architecture::Qwen2 || gpt_oss || g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;

  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const std::int64_t QD = static_cast<std::int64_t>(c.num_heads) * D;
  const std::int64_t KD = static_cast<std::int64_t>(c.num_kv_heads) * D;
  const bool unpermute = c.arch == Architecture::Llama;

  m->embed_tokens_ = L.matrix("token_embd.weight", V, H);
  m->lm_head_ = c.tie_word_embeddings ? m->embed_tokens_ : L.matrix("output.weight", V, H);
  m->final_norm_ = L.vector_f32("output_norm.weight", H);
  // Llama-3.1's rope scaling, as llama.cpp's converter stores it: one divisor per frequency.
  if (g.find_tensor("rope_freqs.weight") != nullptr) {
    m->rope_freq_divisors_ = L.vector_f32("rope_freqs.weight", D / 2);
    for (std::size_t j = 0; j < m->rope_freq_divisors_.size(); ++j) {
      const float f = m->rope_freq_divisors_[j];
      if (!(f > 0.0f) || !std::isfinite(f))
        L.fail("rope_freqs.weight[" + std::to_string(j) + "] is " + std::to_string(f) +
               ", expected a positive finite divisor");
    }
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    const LayerKind kind = c.layer_kind(l);
    w.input_norm = L.vector_f32(p + "attn_norm.weight", H);
    w.post_norm =
        L.vector_f32(p + (gpt_oss || qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight"), H);
    if (kind == LayerKind::DeltaNet) {
      const DeltaNetConfig& d = c.delta_net;
      const std::int64_t C = d.conv_channels(), Hv = d.v_heads;
      const std::int64_t Vd = static_cast<std::int64_t>(d.v_heads) * d.head_v_dim;
      DeltaNetWeights& n = w.delta_net;
      n.qkv = L.matrix(p + "attn_qkv.weight", C, H);
      n.z = L.matrix(p + "attn_gate.weight", Vd, H);
      n.beta = L.matrix(p + "ssm_beta.weight", Hv, H);
      n.alpha = L.matrix(p + "ssm_alpha.weight", Hv, H);
      n.out = L.matrix(p + "ssm_out.weight", H, Vd);
      n.conv = L.vector_f32(p + "ssm_conv1d.weight", {C, d.conv_kernel});
      n.dt_bias = L.vector_f32(p + "ssm_dt.bias", Hv);
      n.a = L.vector_f32(p + "ssm_a", Hv);
      n.norm = L.vector_f32(p + "ssm_norm.weight", d.head_v_dim);
    } else {
      // Qwen3.5's q projection holds each head's query and its output gate side by side.
      w.q = L.matrix(p + "attn_q.weight", c.attention_gate ? 2 * QD : QD, H);
      if (c.attention_gate) split_gate_rows(w.q, c.head_dim, w.q_gate, m->keep_alive_);
      w.k = L.matrix(p + "attn_k.weight", KD, H);
      if (unpermute) {
        w.q = unpermute_rows(w.q, c.head_dim, m->keep_alive_);
        w.k = unpermute_rows(w.k, c.head_dim, m->keep_alive_);
      }
      w.v = L.matrix(p + "attn_v.weight", KD, H);
      w.o = L.matrix(p + "attn_output.weight", H, QD);
      if (c.attention_bias) {
        w.q_bias = L.vector_f32(p + "attn_q.bias", QD);
        w.k_bias = L.vector_f32(p + "attn_k.bias", KD);
        w.v_bias = L.vector_f32(p + "attn_v.bias", KD);
        if (unpermute) {
          w.q_bias = unpermute_vector(w.q_bias, c.head_dim);
          w.k_bias = unpermute_vector(w.k_bias, c.head_dim);
        }
      }
      if (c.output_bias) w.o_bias = L.vector_f32(p + "attn_output.bias", H);
      if (c.attention_sinks) w.sinks = L.vector_f32(p + "attn_sinks.weight", c.num_heads);
      if (c.qk_norm) {
        w.q_norm = L.vector_f32(p + "attn_q_norm.weight", D);
        w.k_norm = L.vector_f32(p + "attn_k_norm.weight", D);
      }
    }
    if (moe) {
      const std::int64_t E = c.moe.experts, F = c.moe.expert_ff;
      ExpertWeights& x = w.moe;
      x.router = L.matrix(p + "ffn_gate_inp.weight", E, H);
      x.gate = L.experts(p + "ffn_gate_exps.weight", E, F, H);
      x.up = L.experts(p + "ffn_up_exps.weight", E, F, H);
      x.down = L.experts(p + "ffn_down_exps.weight", E, H, F);
      if (gpt_oss) {
        x.router_bias = L.vector_f32(p + "ffn_gate_inp.bias", E);
        x.gate_bias = L.vector_f32(p + "ffn_gate_exps.bias", {E, F});
        x.up_bias = L.vector_f32(p + "ffn_up_exps.bias", {E, F});
        x.down_bias = L.vector_f32(p + "ffn_down_exps.bias", {E, H});
      }
      if (c.moe.shared_ff > 0) {
        const std::int64_t Fs = c.moe.shared_ff;
        x.shared_gate = L.matrix(p + "ffn_gate_shexp.weight", Fs, H);
        x.shared_up = L.matrix(p + "ffn_up_shexp.weight", Fs, H);
        x.shared_down = L.matrix(p + "ffn_down_shexp.weight", H, Fs);
        x.shared_router = L.vector_f32(p + "ffn_gate_inp_shexp.weight", H);
      }
    } else {
      w.gate = L.matrix(p + "ffn_gate.weight", I, H);
      w.up = L.matrix(p + "ffn_up.weight", I, H);
      w.down = L.matrix(p + "ffn_down.weight", H, I);
    }
    m->layers_.push_back(std::move(w));
  }
  for (const GgufTensor& t : g.tensors()) m->weight_bytes_ += t.nbytes;
  return m;
}

}  // namespace rkv
