// Loading a checkpoint: every tensor the architecture needs is looked up, its shape and dtype
// checked, and its memory-mapped data used in place (small vectors are converted to f32).
#include <algorithm>
#include <cmath>
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
