// Loading a checkpoint: every tensor the architecture needs is looked up, its shape and dtype
// checked, and its memory-mapped data used in place (small vectors are converted to f32). Qwen3
// MoE, gpt-oss and Qwen3.5 checkpoints are turned into llama.cpp's conventions on the way (see
// "Qwen3 MoE, gpt-oss and Qwen3.5" below): their expert stacks (but a fused down_proj), and
// Qwen3.5's v-head matrices when it has more v heads than k heads, are copies the model owns,
// beside the files' bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model.h"

namespace rkv {

namespace {

using Shape = std::vector<std::int64_t>;

const TensorInfo& checked(const TensorStore& store, const std::string& name, const Shape& shape) {
  const TensorInfo& t = store.get(name);
  if (t.shape != shape)
    throw Error(t.file + ": tensor " + name + " has shape " + t.shape_string() + ", expected " +
                shape_to_string(shape));
  return t;
}

kernels::WeightView matrix(const TensorStore& store, const std::string& name, std::int64_t rows,
                           std::int64_t cols) {
  const TensorInfo& t = checked(store, name, {rows, cols});
  return {t.data, t.dtype, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
}

std::vector<float> vector_f32(const TensorStore& store, const std::string& name, std::int64_t n) {
  const TensorInfo& t = checked(store, name, {n});
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
  return v;
}

// inv_freq[j] = theta^(-2j/d) in float32 as HF computes it, then Llama-3.1's frequency-dependent
// scaling when configured (HF _compute_llama3_parameters; golden models README).
std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int rot = c.rotary_dim(), half = rot / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (int j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(rot);
    inv[static_cast<std::size_t>(j)] = 1.0f / std::pow(c.rope_theta, exponent);
  }
  if (c.rope_scaling.yarn) {
    // YaRN as llama.cpp's rope_yarn computes it: pair j's angle is interpolated (divided by the
    // factor) below the correction range, extrapolated (left as is) above it, and mixed by a
    // linear ramp inside [low, high]; the range is where beta_fast and beta_slow rotations fit
    // in the original context, floored and ceiled (golden arch README, gpt-oss).
    const auto& s = c.rope_scaling;
    const double n = rot, base = c.rope_theta, ctx = s.original_max_position_embeddings;
    auto corr = [&](double rotations) {
      return n * std::log(ctx / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
    };
    const float low = static_cast<float>(std::max(0.0, std::floor(corr(s.beta_fast))));
    const float high = static_cast<float>(std::min(n - 1, std::ceil(corr(s.beta_slow))));
    for (int j = 0; j < half; ++j) {
      const float y = (static_cast<float>(j) - low) / std::max(0.001f, high - low);
      const float ramp = 1.0f - std::clamp(y, 0.0f, 1.0f);
      inv[static_cast<std::size_t>(j)] *= (1.0f - ramp) / s.factor + ramp;
    }
  }
  if (c.rope_scaling.llama3) {
    const auto& s = c.rope_scaling;
    const float old_len = static_cast<float>(s.original_max_position_embeddings);
    const float low_wavelen = old_len / s.low_freq_factor;
    const float high_wavelen = old_len / s.high_freq_factor;
    for (float& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      float scaled = wavelen > low_wavelen ? f / s.factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

// ------------------------------------------------------------------------------------------------
// Qwen3 MoE, gpt-oss and Qwen3.5 (dense and MoE) from Hugging Face checkpoints. The forward pass
// runs on llama.cpp's conventions (model_load_gguf.cpp), so each Hugging Face convention is turned
// into llama.cpp's once here, into memory the model owns (tests/tools/gguf_to_hf.py documents
// every mapping, in the other direction):
//  * Qwen3.5's RMSNorm weights w compute (1 + w) x: 1 is added to each in float32 (not to
//    linear_attn.norm, a plain multiplier);
//  * Qwen3.5's Gated DeltaNet: A_log becomes a = -exp(A_log); conv1d [C, 1, K] is [C][K]; the v
//    heads, grouped by k head in Hugging Face's order (v head h reads k head h / r, r = v_heads /
//    k_heads), are put in llama.cpp's tiled order (v head g reads k head g mod k_heads): block g
//    of every axis made of v heads is Hugging Face's block (g mod k_heads) * r + g / k_heads;
//  * Qwen3.5's q_proj holds each head's query and output gate side by side, split as for GGUF;
//  * routed experts stacked into one [experts * rows][cols] matrix each (from the per-expert
//    tensors, or a fused gate_up_proj [E, 2F, H] whose first F rows are gate);
//  * gpt-oss's float experts are input-major with gate and up interleaved (gate_up_proj
//    [E, H, 2F]: gate column 2f, up 2f + 1; down_proj [E, F, H]): transposed per expert; its MXFP4
//    experts (U8 *_blocks [E, rows, cols / 32, 16] and *_scales [E, rows, cols / 32], rows of
//    gate_up interleaved) are repacked into ggml's MXFP4 blocks, the same codes and exponents
//    with the nibbles in ggml's positions (Hugging Face: value 2i is the low nibble of byte i,
//    2i + 1 its high nibble; ggml: value j < 16 the low nibble of byte j, j + 16 its high nibble).

namespace fs = std::filesystem;
using Owner = std::vector<std::shared_ptr<const void>>;

class Checkpoint {
 public:
  Checkpoint(fs::path dir, std::map<std::string, TensorInfo> tensors)
      : dir_(std::move(dir)), tensors_(std::move(tensors)) {}
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(dir_.string() + ": missing tensor " + name);
    used_.insert(name);
    return it->second;
  }
  std::size_t used_bytes() const {
    std::size_t n = 0;
    for (const std::string& name : used_) n += tensors_.at(name).nbytes;
    return n;
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::map<std::string, TensorInfo> tensors_;
  mutable std::set<std::string> used_;
};

Checkpoint from_store(const TensorStore& st) {
  std::map<std::string, TensorInfo> tensors;
  for (const auto& [name, info] : st.tensors()) tensors[name] = info;
  return {st.dir(), std::move(tensors)};
}

// Tensor lookups with their shapes checked, and buffers the model owns.
struct Loader {
  const Checkpoint& ck;
  Owner& owner;

  const TensorInfo& tensor(const std::string& name, const Shape& shape) const {
    const TensorInfo& t = ck.get(name);
    if (t.shape != shape)
      throw Error(t.file + ": tensor " + name + " has shape " + t.shape_string() + ", expected " +
                  shape_to_string(shape));
    if (t.bytes)
      throw Error(t.file + ": tensor " + name + " has dtype U8, expected F32, BF16 or F16");
    return t;
  }
  const std::uint8_t* bytes(const std::string& name, const Shape& shape) const {
    const TensorInfo& t = ck.get(name);
    if (t.shape != shape)
      throw Error(t.file + ": tensor " + name + " has shape " + t.shape_string() + ", expected " +
                  shape_to_string(shape));
    if (!t.bytes)
      throw Error(t.file + ": tensor " + name + " has dtype " + std::string(dtype_name(t.dtype)) +
                  ", expected U8 (MXFP4 blocks or scales)");
    return static_cast<const std::uint8_t*>(t.data);
  }
  kernels::WeightView matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    const TensorInfo& t = tensor(name, {rows, cols});
    return {t.data, t.dtype, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
  }
  std::vector<float> floats(const std::string& name, const Shape& shape) const {
    return to_floats(tensor(name, shape));
  }
  static std::vector<float> to_floats(const TensorInfo& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
    return v;
  }
  std::byte* alloc(std::size_t nbytes) const {
    auto buffer = std::make_shared<std::vector<std::uint64_t>>((nbytes + 7) / 8);
    owner.push_back(buffer);
    return reinterpret_cast<std::byte*>(buffer->data());
  }
};

std::size_t row_bytes(const kernels::WeightView& w) {
  return dtype_row_bytes(w.dtype, w.cols);
}

// The v-head permutation (see above): llama.cpp's block g is Hugging Face's block hf_v_head(g).
std::size_t hf_v_head(std::size_t g, const DeltaNetConfig& d) {
  const std::size_t hk = static_cast<std::size_t>(d.k_heads);
  const std::size_t r = static_cast<std::size_t>(d.v_heads / d.k_heads);
  return (g % hk) * r + g / hk;
}

// Rows [first, first + v_heads * s) of w, blocks of s rows, in llama.cpp's v-head order.
kernels::WeightView v_head_rows(const kernels::WeightView& w, std::size_t first, std::size_t s,
                                const DeltaNetConfig& d, const Loader& L) {
  if (d.k_heads == d.v_heads) return w;
  const std::size_t rb = row_bytes(w);
  auto* out = L.alloc(w.rows * rb);
  const auto* in = static_cast<const std::byte*>(w.data);
  std::memcpy(out, in, first * rb);
  for (std::size_t g = 0; g < static_cast<std::size_t>(d.v_heads); ++g)
    std::memcpy(out + (first + g * s) * rb, in + (first + hf_v_head(g, d) * s) * rb, s * rb);
  kernels::WeightView r = w;
  r.data = out;
  return r;
}

// The columns of w (v_heads blocks of s) in llama.cpp's v-head order.
kernels::WeightView v_head_cols(const kernels::WeightView& w, std::size_t s,
                                const DeltaNetConfig& d, const Loader& L) {
  if (d.k_heads == d.v_heads) return w;
  const std::size_t es = dtype_size(w.dtype), rb = row_bytes(w);
  auto* out = L.alloc(w.rows * rb);
  const auto* in = static_cast<const std::byte*>(w.data);
  for (std::size_t row = 0; row < w.rows; ++row)
    for (std::size_t g = 0; g < static_cast<std::size_t>(d.v_heads); ++g)
      std::memcpy(out + row * rb + g * s * es, in + row * rb + hf_v_head(g, d) * s * es, s * es);
  kernels::WeightView r = w;
  r.data = out;
  return r;
}

// Elements [first, first + v_heads * s) of v, blocks of s, in llama.cpp's v-head order.
void v_head_floats(std::vector<float>& v, std::size_t first, std::size_t s,
                   const DeltaNetConfig& d) {
  if (d.k_heads == d.v_heads) return;
  const std::vector<float> in = v;
  for (std::size_t g = 0; g < static_cast<std::size_t>(d.v_heads); ++g)
    std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(first + hf_v_head(g, d) * s), s,
                v.begin() + static_cast<std::ptrdiff_t>(first + g * s));
}

// Qwen3.5's norms, (1 + w) x in Hugging Face, w x in the forward pass.
std::vector<float> plus_one(std::vector<float> w) {
  for (float& x : w) x += 1.0f;
  return w;
}

// Qwen3.5's q_proj rows, per head [query | gate], as split_gate_rows splits attn_q for GGUF.
void split_query_gate(kernels::WeightView& q, int head_dim, kernels::WeightView& gate,
                      const Loader& L) {
  const std::size_t rb = row_bytes(q);
  const std::size_t D = static_cast<std::size_t>(head_dim), heads = q.rows / (2 * D);
  auto* out = L.alloc(q.rows * rb);
  const auto* in = static_cast<const std::byte*>(q.data);
  for (std::size_t h = 0; h < heads; ++h) {
    std::memcpy(out + h * D * rb, in + 2 * h * D * rb, D * rb);
    std::memcpy(out + (heads + h) * D * rb, in + (2 * h + 1) * D * rb, D * rb);
  }
  q = {out, q.dtype, heads * D, q.cols, q.precision};
  gate = {out + heads * D * rb, q.dtype, heads * D, q.cols, q.precision};
}

// Expert matrices given one tensor per expert ([rows, cols] each), stacked.
kernels::WeightView stack_experts(const Loader& L, const std::string& prefix,
                                  const std::string& suffix, std::int64_t experts,
                                  std::int64_t rows, std::int64_t cols) {
  std::vector<const TensorInfo*> parts;
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::string name = prefix + std::to_string(e) + suffix;
    parts.push_back(&L.tensor(name, {rows, cols}));
    if (parts.back()->dtype != parts.front()->dtype)
      throw Error(parts.back()->file + ": tensor " + name + " has dtype " +
                  std::string(dtype_name(parts.back()->dtype)) + ", but expert 0's is " +
                  std::string(dtype_name(parts.front()->dtype)));
  }
  const std::size_t bytes = parts.front()->nbytes;
  auto* out = L.alloc(bytes * parts.size());
  for (std::size_t e = 0; e < parts.size(); ++e)
    std::memcpy(out + e * bytes, parts[e]->data, bytes);
  return {out, parts.front()->dtype, static_cast<std::size_t>(experts * rows),
          static_cast<std::size_t>(cols)};
}

// A fused gate_up_proj [E, 2F, H] (gate rows first in each expert) split into stacked gate and up.
void split_fused_experts(const TensorInfo& t, std::int64_t experts, std::int64_t ff,
                         kernels::WeightView& gate, kernels::WeightView& up, const Loader& L) {
  const std::size_t E = static_cast<std::size_t>(experts), F = static_cast<std::size_t>(ff);
  const std::size_t H = static_cast<std::size_t>(t.shape[2]);
  const std::size_t block = F * dtype_row_bytes(t.dtype, H);
  auto* g = L.alloc(E * block);
  auto* u = L.alloc(E * block);
  const auto* in = static_cast<const std::byte*>(t.data);
  for (std::size_t e = 0; e < E; ++e) {
    std::memcpy(g + e * block, in + 2 * e * block, block);
    std::memcpy(u + e * block, in + (2 * e + 1) * block, block);
  }
  gate = {g, t.dtype, E * F, H};
  up = {u, t.dtype, E * F, H};
}

// Copies element src[i] of a float tensor to dst[j] for the index pairs `map` gives.
template <typename Map>
void copy_elements(const TensorInfo& t, std::byte* dst, std::size_t n, const Map& map) {
  const auto* in = static_cast<const std::byte*>(t.data);
  if (dtype_size(t.dtype) == 4) {
    for (std::size_t j = 0; j < n; ++j) std::memcpy(dst + 4 * j, in + 4 * map(j), 4);
  } else {
    for (std::size_t j = 0; j < n; ++j) std::memcpy(dst + 2 * j, in + 2 * map(j), 2);
  }
}

// gpt-oss's float experts: gate_up_proj [E, H, 2F] (input-major, gate and up interleaved) and
// down_proj [E, F, H] into stacked [E * F][H] gate and up and [E * H][F] down.
void gpt_oss_float_experts(const TensorInfo& gate_up, const TensorInfo& down, std::size_t E,
                           std::size_t H, std::size_t F, ExpertWeights& x, const Loader& L) {
  const std::size_t es = dtype_size(gate_up.dtype);
  for (int which = 0; which < 2; ++which) {
    auto* out = L.alloc(E * F * H * es);
    // out[(e F + f) H + h] = gate_up[(e H + h) 2F + 2f + which]
    copy_elements(gate_up, out, E * F * H, [&](std::size_t j) {
      const std::size_t h = j % H, f = (j / H) % F, e = j / (H * F);
      return (e * H + h) * 2 * F + 2 * f + static_cast<std::size_t>(which);
    });
    (which == 0 ? x.gate : x.up) = {out, gate_up.dtype, E * F, H};
  }
  auto* out = L.alloc(E * H * F * dtype_size(down.dtype));
  // out[(e H + h) F + f] = down[(e F + f) H + h]
  copy_elements(down, out, E * H * F, [&](std::size_t j) {
    const std::size_t f = j % F, h = (j / F) % H, e = j / (F * H);
    return (e * F + f) * H + h;
  });
  x.down = {out, down.dtype, E * H, F};
}

// Hugging Face's MXFP4 rows (blocks [rows][nb][16], scales [rows][nb]) as ggml's MXFP4 rows
// ([rows][nb] blocks of 17 bytes), row `pick(i)` of the source becoming row i.
template <typename Pick>
kernels::WeightView mxfp4_rows(const std::uint8_t* blocks, const std::uint8_t* scales,
                               std::size_t rows, std::size_t cols, const Pick& pick,
                               const Loader& L) {
  const std::size_t nb = cols / 32;
  auto* out = reinterpret_cast<std::uint8_t*>(L.alloc(rows * nb * 17));
  for (std::size_t i = 0; i < rows; ++i) {
    const std::size_t src = pick(i);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::uint8_t* hf = blocks + (src * nb + b) * 16;
      std::uint8_t* q = out + (i * nb + b) * 17;
      q[0] = scales[src * nb + b];
      auto code = [&](std::size_t k) { return (hf[k / 2] >> (4 * (k % 2))) & 15; };
      for (std::size_t j = 0; j < 16; ++j)
        q[1 + j] = static_cast<std::uint8_t>(code(j) | code(j + 16) << 4);
    }
  }
  return {out, DType::MXFP4, rows, cols};
}

// One layer of a Qwen3 MoE, gpt-oss or Qwen3.5 checkpoint (prefix "model.layers.N.").
LayerWeights load_layer(const Loader& L, const ModelConfig& c, int layer, const std::string& p) {
  const bool gpt_oss = c.arch == Architecture::GptOss;
  const bool qwen35 = c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe;
  const std::int64_t H = c.hidden_size, D = c.head_dim;
  const std::int64_t QD = static_cast<std::int64_t>(c.num_heads) * D;
  const std::int64_t KD = static_cast<std::int64_t>(c.num_kv_heads) * D;
  auto norm = [&](const std::string& name, std::int64_t n) {
    std::vector<float> w = L.floats(name, {n});
    return qwen35 ? plus_one(std::move(w)) : w;
  };
  LayerWeights w;
  w.input_norm = norm(p + "input_layernorm.weight", H);
  w.post_norm = norm(p + "post_attention_layernorm.weight", H);
  if (c.layer_kind(layer) == LayerKind::DeltaNet) {
    const DeltaNetConfig& d = c.delta_net;
    const std::int64_t C = d.conv_channels(), Hv = d.v_heads, K = d.conv_kernel;
    const std::int64_t Vd = static_cast<std::int64_t>(d.v_heads) * d.head_v_dim;
    const std::size_t qk = 2 * static_cast<std::size_t>(d.k_heads) * d.head_k_dim;
    const std::size_t dv = static_cast<std::size_t>(d.head_v_dim);
    const std::string a = p + "linear_attn.";
    DeltaNetWeights& n = w.delta_net;
    n.qkv = v_head_rows(L.matrix(a + "in_proj_qkv.weight", C, H), qk, dv, d, L);
    n.z = v_head_rows(L.matrix(a + "in_proj_z.weight", Vd, H), 0, dv, d, L);
    n.beta = v_head_rows(L.matrix(a + "in_proj_b.weight", Hv, H), 0, 1, d, L);
    n.alpha = v_head_rows(L.matrix(a + "in_proj_a.weight", Hv, H), 0, 1, d, L);
    n.out = v_head_cols(L.matrix(a + "out_proj.weight", H, Vd), dv, d, L);
    n.conv = L.floats(a + "conv1d.weight", {C, 1, K});
    v_head_floats(n.conv, qk * static_cast<std::size_t>(K), dv * static_cast<std::size_t>(K), d);
    n.dt_bias = L.floats(a + "dt_bias", {Hv});
    v_head_floats(n.dt_bias, 0, 1, d);
    n.a = L.floats(a + "A_log", {Hv});
    for (float& x : n.a) x = static_cast<float>(-std::exp(static_cast<double>(x)));
    v_head_floats(n.a, 0, 1, d);
    n.norm = L.floats(a + "norm.weight", {d.head_v_dim});  // a plain multiplier: no + 1
  } else {
    const std::string a = p + "self_attn.";
    w.q = L.matrix(a + "q_proj.weight", c.attention_gate ? 2 * QD : QD, H);
    if (c.attention_gate) split_query_gate(w.q, c.head_dim, w.q_gate, L);
    w.k = L.matrix(a + "k_proj.weight", KD, H);
    w.v = L.matrix(a + "v_proj.weight", KD, H);
    w.o = L.matrix(a + "o_proj.weight", H, QD);
    if (c.attention_bias) {
      w.q_bias = L.floats(a + "q_proj.bias", {QD});
      w.k_bias = L.floats(a + "k_proj.bias", {KD});
      w.v_bias = L.floats(a + "v_proj.bias", {KD});
    }
    if (c.output_bias) w.o_bias = L.floats(a + "o_proj.bias", {H});
    if (c.attention_sinks) w.sinks = L.floats(a + "sinks", {c.num_heads});
    if (c.qk_norm) {
      w.q_norm = norm(a + "q_norm.weight", D);
      w.k_norm = norm(a + "k_norm.weight", D);
    }
  }
  const std::string m = p + "mlp.";
  if (c.moe.experts == 0) {
    const std::int64_t I = c.intermediate_size;
    w.gate = L.matrix(m + "gate_proj.weight", I, H);
    w.up = L.matrix(m + "up_proj.weight", I, H);
    w.down = L.matrix(m + "down_proj.weight", H, I);
    return w;
  }
  const std::int64_t E = c.moe.experts, F = c.moe.expert_ff;
  ExpertWeights& x = w.moe;
  const std::string ex = m + "experts.";
  if (gpt_oss) {
    x.router = L.matrix(m + "router.weight", E, H);
    x.router_bias = L.floats(m + "router.bias", {E});
    const std::vector<float> gu_bias = L.floats(ex + "gate_up_proj_bias", {E, 2 * F});
    x.gate_bias.resize(static_cast<std::size_t>(E * F));
    x.up_bias.resize(static_cast<std::size_t>(E * F));
    for (std::size_t i = 0; i < x.gate_bias.size(); ++i) {
      x.gate_bias[i] = gu_bias[2 * i];
      x.up_bias[i] = gu_bias[2 * i + 1];
    }
    x.down_bias = L.floats(ex + "down_proj_bias", {E, H});
    const std::size_t e = static_cast<std::size_t>(E), h = static_cast<std::size_t>(H),
                      f = static_cast<std::size_t>(F);
    if (L.ck.contains(ex + "gate_up_proj_blocks")) {
      if (H % 32 != 0 || F % 32 != 0)
        throw Error(L.ck.dir().string() +
                    ": MXFP4 experts need hidden_size and intermediate_size " +
                    "to be multiples of 32");
      const auto* gub = L.bytes(ex + "gate_up_proj_blocks", {E, 2 * F, H / 32, 16});
      const auto* gus = L.bytes(ex + "gate_up_proj_scales", {E, 2 * F, H / 32});
      // Row f of expert e: gate is row 2f of the expert's gate_up, up row 2f + 1.
      x.gate = mxfp4_rows(
          gub, gus, e * f, h, [&](std::size_t i) { return 2 * i; }, L);
      x.up = mxfp4_rows(
          gub, gus, e * f, h, [&](std::size_t i) { return 2 * i + 1; }, L);
      const auto* db = L.bytes(ex + "down_proj_blocks", {E, H, F / 32, 16});
      const auto* ds = L.bytes(ex + "down_proj_scales", {E, H, F / 32});
      x.down = mxfp4_rows(
          db, ds, e * h, f, [](std::size_t i) { return i; }, L);
    } else {
      const TensorInfo& gu = L.tensor(ex + "gate_up_proj", {E, H, 2 * F});
      const TensorInfo& dn = L.tensor(ex + "down_proj", {E, F, H});
      gpt_oss_float_experts(gu, dn, e, h, f, x, L);
    }
    return w;
  }
  x.router = L.matrix(m + "gate.weight", E, H);
  if (L.ck.contains(ex + "gate_up_proj")) {  // transformers' fused layout
    split_fused_experts(L.tensor(ex + "gate_up_proj", {E, 2 * F, H}), E, F, x.gate, x.up, L);
    const TensorInfo& dn = L.tensor(ex + "down_proj", {E, H, F});
    x.down = {dn.data, dn.dtype, static_cast<std::size_t>(E * H), static_cast<std::size_t>(F)};
  } else {
    if (!L.ck.contains(ex + "0.gate_proj.weight"))
      throw Error(L.ck.dir().string() + ": missing tensor " + ex + "0.gate_proj.weight (or the " +
                  "fused " + ex + "gate_up_proj)");
    x.gate = stack_experts(L, ex, ".gate_proj.weight", E, F, H);
    x.up = stack_experts(L, ex, ".up_proj.weight", E, F, H);
    x.down = stack_experts(L, ex, ".down_proj.weight", E, H, F);
  }
  if (c.moe.shared_ff > 0) {
    const std::int64_t Fs = c.moe.shared_ff;
    x.shared_gate = L.matrix(m + "shared_expert.gate_proj.weight", Fs, H);
    x.shared_up = L.matrix(m + "shared_expert.up_proj.weight", Fs, H);
    x.shared_down = L.matrix(m + "shared_expert.down_proj.weight", H, Fs);
    // nn.Linear(hidden, 1): [1, H]
    x.shared_router = L.floats(m + "shared_expert_gate.weight", {1, H});
  }
  return w;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir) {
  if (is_gguf_path(dir)) {
    std::unique_ptr<Model> g = load_gguf(dir);
    g->inv_freq_ = rope_inv_freq(g->config_);
    if (g->config_.rope_scaling.yarn)
      g->rope_mscale_ = 1.0f + 0.1f * std::log(g->config_.rope_scaling.factor);
    // llama.cpp's rope_freqs: theta_j = position * theta^(-2j/d) / divisor_j.
    for (std::size_t j = 0; j < g->rope_freq_divisors_.size(); ++j)
      g->inv_freq_[j] /= g->rope_freq_divisors_[j];
    return g;
  }
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = ModelConfig::load(dir);
  if (!m->config_.is_dense_transformer()) {
    // Qwen3 MoE, gpt-oss, Qwen3.5: the weights in llama.cpp's conventions (see above). gpt-oss's
    // MXFP4 experts are U8 tensors, read as raw bytes.
    const ModelConfig& c = m->config_;
    m->store_ = std::make_unique<TensorStore>(dir, /*allow_bytes=*/c.arch == Architecture::GptOss);
    const Checkpoint ck = from_store(*m->store_);
    const Loader L{ck, m->keep_alive_};
    // Qwen3.5's published (image-text) checkpoints hold the text model under
    // model.language_model., the text-only classes under model.
    const std::string p = ck.contains("model.language_model.embed_tokens.weight")
                              ? "model.language_model."
                              : "model.";
    const std::int64_t H = c.hidden_size;
    m->embed_tokens_ = L.matrix(p + "embed_tokens.weight", c.vocab_size, H);
    if (ck.contains("lm_head.weight")) {
      m->lm_head_ = L.matrix("lm_head.weight", c.vocab_size, H);
    } else if (c.tie_word_embeddings) {
      m->lm_head_ = m->embed_tokens_;
    } else {
      throw Error(dir.string() +
                  ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
    }
    m->final_norm_ = L.floats(p + "norm.weight", {H});
    if (c.arch == Architecture::Qwen35 || c.arch == Architecture::Qwen35Moe)
      m->final_norm_ = plus_one(std::move(m->final_norm_));
    for (int l = 0; l < c.num_layers; ++l)
      m->layers_.push_back(load_layer(L, c, l, p + "layers." + std::to_string(l) + "."));
    m->weight_bytes_ = ck.used_bytes();
    m->inv_freq_ = rope_inv_freq(c);
    if (c.rope_scaling.yarn) m->rope_mscale_ = 1.0f + 0.1f * std::log(c.rope_scaling.factor);
    return m;
  }
  m->store_ = std::make_unique<TensorStore>(dir);
  const ModelConfig& c = m->config_;
  const TensorStore& st = *m->store_;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const std::int64_t QD = static_cast<std::int64_t>(c.num_heads) * D;
  const std::int64_t KD = static_cast<std::int64_t>(c.num_kv_heads) * D;

  m->embed_tokens_ = matrix(st, "model.embed_tokens.weight", V, H);
  if (st.contains("lm_head.weight")) {
    m->lm_head_ = matrix(st, "lm_head.weight", V, H);
  } else if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_tokens_;
  } else {
    throw Error(st.dir().string() +
                ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
  }
  m->final_norm_ = vector_f32(st, "model.norm.weight", H);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights w;
    w.q = matrix(st, p + "self_attn.q_proj.weight", QD, H);
    w.k = matrix(st, p + "self_attn.k_proj.weight", KD, H);
    w.v = matrix(st, p + "self_attn.v_proj.weight", KD, H);
    w.o = matrix(st, p + "self_attn.o_proj.weight", H, QD);
    w.gate = matrix(st, p + "mlp.gate_proj.weight", I, H);
    w.up = matrix(st, p + "mlp.up_proj.weight", I, H);
    w.down = matrix(st, p + "mlp.down_proj.weight", H, I);
    w.input_norm = vector_f32(st, p + "input_layernorm.weight", H);
    w.post_norm = vector_f32(st, p + "post_attention_layernorm.weight", H);
    if (c.attention_bias) {
      w.q_bias = vector_f32(st, p + "self_attn.q_proj.bias", QD);
      w.k_bias = vector_f32(st, p + "self_attn.k_proj.bias", KD);
      w.v_bias = vector_f32(st, p + "self_attn.v_proj.bias", KD);
    }
    if (c.qk_norm) {
      w.q_norm = vector_f32(st, p + "self_attn.q_norm.weight", D);
      w.k_norm = vector_f32(st, p + "self_attn.k_norm.weight", D);
    }
    m->layers_.push_back(std::move(w));
  }
  for (const auto& [name, t] : st.tensors()) m->weight_bytes_ += t.nbytes;
  m->inv_freq_ = rope_inv_freq(c);
  return m;
}

KvDtype Model::default_kv_dtype() const {
  for (const LayerWeights& l : layers_)
    if (l.k.data != nullptr) return l.k.dtype == DType::F32 ? KvDtype::f32 : KvDtype::bf16;
  return KvDtype::f32;
}

namespace {
// Every matrix of a layer, each with the share of it one token's forward pass reads (the
// chosen experts of a mixture: experts_used of experts).
template <typename W, typename Fn>
void for_each_matrix(W& l, const ModelConfig& c, const Fn& fn) {
  for (auto* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.q_gate, &l.delta_net.qkv,
                  &l.delta_net.z, &l.delta_net.beta, &l.delta_net.alpha, &l.delta_net.out,
                  &l.moe.router, &l.moe.shared_gate, &l.moe.shared_up, &l.moe.shared_down})
    if (w->data != nullptr) fn(*w, 1.0);
  const double used =
      c.moe.experts > 0 ? static_cast<double>(c.moe.experts_used) / c.moe.experts : 0.0;
  for (auto* w : {&l.moe.gate, &l.moe.up, &l.moe.down})
    if (w->data != nullptr) fn(*w, used);
}
}  // namespace

void Model::set_matmul_precision(kernels::MatmulPrecision precision) {
  for (LayerWeights& l : layers_)
    for_each_matrix(l, config_, [&](kernels::WeightView& w, double) { w.precision = precision; });
  lm_head_.precision = precision;
}

Model::MatmulFootprint Model::matmul_footprint() const {
  MatmulFootprint f;
  auto add = [&](const kernels::WeightView& w, double share) {
    f.params += static_cast<std::size_t>(static_cast<double>(w.rows * w.cols) * share);
    f.bytes += static_cast<std::size_t>(
        static_cast<double>(w.rows * dtype_row_bytes(w.dtype, w.cols)) * share);
  };
  for (const LayerWeights& l : layers_) for_each_matrix(l, config_, add);
  add(lm_head_, 1.0);
  f.head_params = lm_head_.rows * lm_head_.cols;
  return f;
}

}  // namespace rkv
