// The forward pass, once for every backend (run_forward), and its steps on the CPU (CpuOps), all in
// float32. Rows of many sequences go through the matrix products together, so the weights are read
// once per pass (DESIGN.md property 5).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/attention.h"
#include "model/model.h"

namespace rkv {

namespace {

// y = w * x / sqrt(mean(x^2) + eps), HF's LlamaRMSNorm in float32.
void rms_norm_row(const float* x, const float* w, float* y, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float variance = static_cast<float>(ss / n);
  const float inv = 1.0f / std::sqrt(variance + eps);
  for (int i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}

// Rotate-half RoPE: pairs (j, j + d/2), out = x*cos + rotate_half(x)*sin.
void apply_rope(float* x, int d, const float* cos, const float* sin) {
  const int half = d / 2;
  for (int j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    x[j] = a * cos[j] - b * sin[j];
    x[j + half] = b * cos[j] + a * sin[j];
  }
}

// Attention with a sink logit s per query head (gpt-oss): p_j = e^{z_j} / (sum_i e^{z_i} + e^s),
// from the plain softmax the kernels compute. Each of the G heads' output and probabilities are
// scaled by sum e^z / (sum e^z + e^s) = 1 / (1 + e^{s - lse}), where lse = log sum_i e^{z_i}
// comes from the largest probability p_m = e^{z_m - lse}: lse = z_m - log p_m, with z_m the
// logit of that key (key(j) gives key j as n float32 values).
template <typename KeyFn>
void apply_sinks(const float* q, int G, int d, float scale, const float* sinks, int n, float* probs,
                 float* out, const KeyFn& key) {
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n);
    const int m = static_cast<int>(std::max_element(p, p + n) - p);
    const float* k = key(m);
    const float* qg = q + static_cast<std::size_t>(g) * d;
    float z = 0.0f;
    for (int i = 0; i < d; ++i) z += qg[i] * k[i];
    const double lse = static_cast<double>(z) * scale - std::log(static_cast<double>(p[m]));
    const auto f = static_cast<float>(1.0 / (1.0 + std::exp(static_cast<double>(sinks[g]) - lse)));
    float* og = out + static_cast<std::size_t>(g) * d;
    for (int i = 0; i < d; ++i) og[i] *= f;
    for (int j = 0; j < n; ++j) p[j] *= f;
  }
}

// Adds the bias to rows [r0, r1) of y.
void add_bias(float* y, const std::vector<float>& bias, std::size_t r0, std::size_t r1) {
  if (bias.empty()) return;
  const std::size_t n = bias.size();
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
}

}  // namespace

void Model::rope_rotation(std::int32_t position, float* cos, float* sin) const {
  for (std::size_t f = 0; f < inv_freq_.size(); ++f) {
    const float angle = static_cast<float>(position) * inv_freq_[f];
    cos[f] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin[f] = static_cast<float>(std::sin(static_cast<double>(angle)));
    if (rope_mscale_ != 1.0f) {
      cos[f] *= rope_mscale_;
      sin[f] *= rope_mscale_;
    }
  }
}

void ForwardOps::gate_attention() {
  throw Error("this backend has no gated attention output (Qwen3.5): run with --device cpu");
}
void ForwardOps::moe(int, Act, Act) {
  throw Error("this backend has no mixture-of-experts layers: run with --device cpu");
}
void ForwardOps::delta_net(int, std::span<const ForwardRow>, Act, Act) {
  throw Error("this backend has no Gated DeltaNet layers (Qwen3.5): run with --device cpu");
}

kernels::WeightView expert_matrix(const kernels::WeightView& stacked, int experts, int e) {
  const std::size_t rows = stacked.rows / static_cast<std::size_t>(experts);
  kernels::WeightView w = stacked;
  w.rows = rows;
  w.data = static_cast<const std::byte*>(stacked.data) +
           static_cast<std::size_t>(e) * rows * dtype_row_bytes(stacked.dtype, stacked.cols);
  return w;
}

void Model::embed(std::int32_t token, float* out) const {
  if (token < 0 || token >= config_.vocab_size)
    throw Error("token id " + std::to_string(token) + " is outside the vocabulary (size " +
                std::to_string(config_.vocab_size) + ")");
  const std::size_t H = static_cast<std::size_t>(config_.hidden_size);
  if (dtype_is_quantized(embed_tokens_.dtype)) {
    quant::dequantize_row(
        embed_tokens_.dtype,
        static_cast<const std::uint8_t*>(embed_tokens_.data) +
            static_cast<std::size_t>(token) * dtype_row_bytes(embed_tokens_.dtype, H),
        H, out);
    return;
  }
  for (std::size_t i = 0; i < H; ++i)
    out[i] = load_as_f32(embed_tokens_.data, embed_tokens_.dtype,
                         static_cast<std::size_t>(token) * H + i);
}

ForwardPass::ForwardPass(const ModelConfig& c, ForwardOps& ops, std::span<const ForwardRow> rows)
    : config_(c), ops_(ops), rows_(rows), on_host_(ops.on_host()) {
  const std::size_t T = rows.size();
  if (T == 0) throw Error("forward: a pass needs at least one row");
  // Validate before touching any cache, so a bad request leaves every sequence as it was.
  for (std::size_t r = 0; r < T; ++r) {
    const ForwardRow& row = rows[r];
    if (row.cache == nullptr) throw Error("forward: row without a KV cache");
    if (row.token < 0 || row.token >= c.vocab_size)
      throw Error("token id " + std::to_string(row.token) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
    std::size_t same = 0;
    for (std::size_t q = r; q < T && rows[q].cache == row.cache; ++q) ++same;
    if (r == 0 || rows[r - 1].cache != row.cache) {
      if (row.cache->length(0) + static_cast<int>(same) > row.cache->capacity())
        throw Error("KV cache is full: " + std::to_string(row.cache->length(0)) + " + " +
                    std::to_string(same) + " tokens exceed its capacity of " +
                    std::to_string(row.cache->capacity()) + " entries");
    }
  }
  ops_.begin(rows_);
}

void ForwardPass::expect(int step, const char* what) {
  if (next_ != step)
    throw Error(std::string("forward: ") + what + " out of order (step " + std::to_string(step) +
                ", expected " + std::to_string(next_) + ")");
  ++next_;
}

void ForwardPass::append_kv(int l) {
  expect(2 * l, "append_kv");
  using P = ForwardOps::Product;
  static constexpr P qkv[] = {{Proj::Q, Act::Q}, {Proj::K, Act::K}, {Proj::V, Act::V}};
  static constexpr P gate[] = {{Proj::QGate, Act::QGate}};
  ops_.rms_norm(Norm::Input, l, Act::X, Act::XN);
  const LayerKind kind = config_.layer_kind(l);
  if (kind == LayerKind::DeltaNet) return;  // its mixer runs in attend
  ops_.project(l, Act::XN, qkv);
  if (config_.attention_gate) ops_.project(l, Act::XN, gate);
  ops_.prepare_qkv(l);
  if (kind == LayerKind::Attention) ops_.append_kv(l, rows_);
}

void ForwardPass::attend(int l, AttentionProbs* probs) {
  expect(2 * l + 1, "attend");
  using P = ForwardOps::Product;
  static constexpr P o[] = {{Proj::O, Act::XN}};
  static constexpr P gate_up[] = {{Proj::Gate, Act::Gate}, {Proj::Up, Act::Up}};
  static constexpr P down[] = {{Proj::Down, Act::XN}};
  const LayerKind kind = config_.layer_kind(l);
  if (kind == LayerKind::DeltaNet) {
    ops_.delta_net(l, rows_, Act::XN, Act::X);
  } else {
    ops_.attention(l, rows_, kind == LayerKind::Attention ? probs : nullptr);
    if (config_.attention_gate) ops_.gate_attention();
    ops_.project(l, Act::Attn, o);
    ops_.add(Act::X, Act::XN);
  }
  ops_.rms_norm(Norm::Post, l, Act::X, Act::XN);
  if (config_.moe.experts > 0) {
    ops_.moe(l, Act::XN, Act::X);
    return;
  }
  ops_.project(l, Act::XN, gate_up);
  ops_.silu_mul();
  ops_.project(l, Act::Gate, down);
  ops_.add(Act::X, Act::XN);
}

float* ForwardPass::hidden() {
  return on_host_ ? ops_.host(Act::X) : nullptr;
}

void ForwardPass::finish(float* logits) {
  expect(2 * config_.num_layers, "finish");
  ops_.rms_norm(Norm::Final, 0, Act::X, Act::XN);
  bool any_logits = false;
  for (const ForwardRow& row : rows_) any_logits = any_logits || row.want_logits;
  if (any_logits && logits != nullptr) ops_.logits(rows_, Act::XN, logits);
  ops_.end(rows_);
}

const float* ForwardPass::final_hidden() {
  return on_host_ && next_ > 2 * config_.num_layers ? ops_.host(Act::XN) : nullptr;
}

void run_forward(const ModelConfig& c, ForwardOps& ops, std::span<const ForwardRow> rows,
                 float* logits) {
  if (rows.empty()) return;
  ForwardPass pass(c, ops, rows);
  for (int l = 0; l < c.num_layers; ++l) {
    pass.append_kv(l);
    pass.attend(l);
  }
  pass.finish(logits);
}

const kernels::WeightView& projection(const LayerWeights& w, Proj p) {
  switch (p) {
    case Proj::Q:
      return w.q;
    case Proj::K:
      return w.k;
    case Proj::V:
      return w.v;
    case Proj::O:
      return w.o;
    case Proj::Gate:
      return w.gate;
    case Proj::Up:
      return w.up;
    case Proj::Down:
      return w.down;
    case Proj::QGate:
      return w.q_gate;
  }
  return w.q;
}

std::size_t act_width(const ModelConfig& c, Act a) {
  switch (a) {
    case Act::X:
    case Act::XN:
      return static_cast<std::size_t>(c.hidden_size);
    case Act::Q:
    case Act::Attn:
      return static_cast<std::size_t>(c.num_heads) * static_cast<std::size_t>(c.head_dim);
    case Act::K:
    case Act::V:
      return static_cast<std::size_t>(c.num_kv_heads) * static_cast<std::size_t>(c.head_dim);
    case Act::Gate:
    case Act::Up:
      return static_cast<std::size_t>(c.intermediate_size);
    case Act::QGate:
      return c.attention_gate
                 ? static_cast<std::size_t>(c.num_heads) * static_cast<std::size_t>(c.head_dim)
                 : 0;
  }
  return 0;
}

namespace {

// The steps on the CPU: the activations in a ForwardScratch, the matrix products and attention
// by the kernels of kernels.h and attention.h over the thread pool.
class CpuOps final : public ForwardOps {
 public:
  CpuOps(const Model& model, ForwardScratch& scratch, ThreadPool& pool)
      : m_(model), c_(model.config()), s_(scratch), pool_(pool) {}

  void begin(std::span<const ForwardRow> rows) override {
    T_ = rows.size();
    const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
    const int half = c_.rotary_dim() / 2;
    for (Act a : kActs) vec(a).resize(T_ * act_width(c_, a));
    s_.rope_cos.resize(T_ * half);
    s_.rope_sin.resize(T_ * half);
    for (std::size_t r = 0; r < T_; ++r) {
      m_.embed(rows[r].token, s_.x.data() + r * H);
      m_.rope_rotation(rows[r].position, s_.rope_cos.data() + r * half,
                       s_.rope_sin.data() + r * half);
    }
    visible_.resize(T_);
  }

  void rms_norm(Norm norm, int layer, Act in, Act out) override {
    const std::vector<float>& w = norm == Norm::Final   ? m_.final_norm()
                                  : norm == Norm::Input ? m_.layer(layer).input_norm
                                                        : m_.layer(layer).post_norm;
    const float* x = buf(in);
    float* y = buf(out);
    const int H = c_.hidden_size;
    for_rows([&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r)
        rms_norm_row(x + r * H, w.data(), y + r * H, H, c_.rms_norm_eps);
    });
  }

  void project(int layer, Act in, std::span<const Product> products) override {
    const LayerWeights& w = m_.layer(layer);
    std::array<kernels::MatmulProduct, 3> mp;
    if (products.size() > mp.size()) throw Error("forward: too many products in one step");
    for (std::size_t i = 0; i < products.size(); ++i)
      mp[i] = {projection(w, products[i].proj), buf(products[i].out)};
    if (products.size() == 1)
      kernels::matmul(buf(in), T_, mp[0].w, mp[0].y, pool_);
    else
      kernels::matmul_many(buf(in), T_, std::span(mp.data(), products.size()), pool_);
    for (const Product& p : products)
      if (p.proj == Proj::O && !w.o_bias.empty()) {
        float* y = buf(p.out);
        for_rows([&](std::size_t r0, std::size_t r1) { add_bias(y, w.o_bias, r0, r1); });
      }
  }

  void prepare_qkv(int layer) override {
    const LayerWeights& w = m_.layer(layer);
    const int D = c_.head_dim, Hq = c_.num_heads, Hkv = c_.num_kv_heads, R = c_.rotary_dim();
    const int half = R / 2;
    const std::size_t QD = static_cast<std::size_t>(Hq) * D, KD = static_cast<std::size_t>(Hkv) * D;
    for_rows([&](std::size_t r0, std::size_t r1) {
      add_bias(s_.q.data(), w.q_bias, r0, r1);
      add_bias(s_.k.data(), w.k_bias, r0, r1);
      add_bias(s_.v.data(), w.v_bias, r0, r1);
      for (std::size_t r = r0; r < r1; ++r) {
        const float* cs = s_.rope_cos.data() + r * half;
        const float* sn = s_.rope_sin.data() + r * half;
        for (int h = 0; h < Hq; ++h) {
          float* qh = s_.q.data() + r * QD + static_cast<std::size_t>(h) * D;
          if (c_.qk_norm) rms_norm_row(qh, w.q_norm.data(), qh, D, c_.rms_norm_eps);
          apply_rope(qh, R, cs, sn);
        }
        for (int h = 0; h < Hkv; ++h) {
          float* kh = s_.k.data() + r * KD + static_cast<std::size_t>(h) * D;
          if (c_.qk_norm) rms_norm_row(kh, w.k_norm.data(), kh, D, c_.rms_norm_eps);
          apply_rope(kh, R, cs, sn);
        }
      }
    });
  }

  void append_kv(int layer, std::span<const ForwardRow> rows) override {
    const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * c_.head_dim;
    const std::size_t KD = static_cast<std::size_t>(c_.num_kv_heads) * c_.head_dim;
    const int kl = c_.kv_layer(layer);
    for (std::size_t r = 0; r < T_; ++r) {
      rows[r].cache->append(kl, s_.k.data() + r * KD, s_.v.data() + r * KD, rows[r].position);
      rows[r].cache->push_query(kl, s_.q.data() + r * QD);
    }
  }

  void attention(int l, std::span<const ForwardRow> rows, AttentionProbs* probs) override;
  void gate_attention() override;
  void moe(int layer, Act in, Act residual) override;
  void delta_net(int layer, std::span<const ForwardRow> rows, Act in, Act residual) override;

  void add(Act dst, Act src) override {
    float* y = buf(dst);
    const float* x = buf(src);
    const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
    for_rows([&](std::size_t r0, std::size_t r1) {
      for (std::size_t i = r0 * H; i < r1 * H; ++i) y[i] += x[i];
    });
  }

  void silu_mul() override {
    const std::size_t I = static_cast<std::size_t>(c_.intermediate_size);
    for_rows([&](std::size_t r0, std::size_t r1) {
      kernels::silu_mul(s_.gate.data() + r0 * I, s_.up.data() + r0 * I, (r1 - r0) * I);
    });
  }

  bool on_host() const override { return true; }
  float* host(Act a) override { return buf(a); }

  void logits(std::span<const ForwardRow> rows, Act in, float* out) override {
    const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
    std::size_t n_logits = 0;
    s_.logits_hidden.resize(T_ * H);
    for (std::size_t r = 0; r < T_; ++r) {
      if (!rows[r].want_logits) continue;
      std::memcpy(s_.logits_hidden.data() + n_logits * H, buf(in) + r * H, H * sizeof(float));
      ++n_logits;
    }
    kernels::matmul(s_.logits_hidden.data(), n_logits, m_.lm_head(), out, pool_);
  }

 private:
  std::vector<float>& vec(Act a) {
    switch (a) {
      case Act::X:
        return s_.x;
      case Act::XN:
        return s_.xn;
      case Act::Q:
        return s_.q;
      case Act::K:
        return s_.k;
      case Act::V:
        return s_.v;
      case Act::Attn:
        return s_.attn;
      case Act::Gate:
        return s_.gate;
      case Act::Up:
        return s_.up;
      case Act::QGate:
        return s_.q_gate;
    }
    return s_.x;
  }
  float* buf(Act a) { return vec(a).data(); }

  // The per-row work between the matrix products (norms, bias, RoPE, SiLU, residuals) runs on
  // the pool in prefill-sized passes; each row is computed exactly as on one thread. Decode steps
  // of a few rows stay on the calling thread, where a parallel region would cost more than it
  // saves.
  template <typename Fn>
  void for_rows(const Fn& fn) {
    constexpr std::size_t kRowParallelMin = 16;
    if (T_ >= kRowParallelMin)
      pool_.parallel_ranges(T_, 1, fn);
    else
      fn(0, T_);
  }

  const Model& m_;
  const ModelConfig& c_;
  ForwardScratch& s_;
  ThreadPool& pool_;
  std::size_t T_ = 0;
  // Per row, how many cache entries it attends to (its own included).
  std::vector<int> visible_;
  struct RowBlock {
    std::size_t r0, R;
  };
  std::vector<RowBlock> blocks_;
  // The first row of each sequence in the pass, then T.
  std::vector<std::size_t> seq_begin_;
  void find_sequences(std::span<const ForwardRow> rows) {
    seq_begin_.clear();
    for (std::size_t r = 0; r < T_; ++r)
      if (r == 0 || rows[r].cache != rows[r - 1].cache) seq_begin_.push_back(r);
    seq_begin_.push_back(T_);
  }
  void window_attention(int l, std::span<const ForwardRow> rows);
};

void CpuOps::attention(int l, std::span<const ForwardRow> rows, AttentionProbs* out) {
  if (c_.layer_kind(l) == LayerKind::SlidingWindow) {
    window_attention(l, rows);
    return;
  }
  const int kl = c_.kv_layer(l);
  const std::vector<float>& sinks = m_.layer(l).sinks;
  const int D = c_.head_dim, Hkv = c_.num_kv_heads, G = c_.group_size();
  const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * D;
  const std::size_t T = T_;
  // Rows of one sequence that attend together (attention_rows_fn).
  constexpr std::size_t kAttentionRowBlock = 16;
  const kernels::AttentionPrecision precision = m_.attention_precision();
  const std::array<kernels::AttentionRowsFn, 4> rows_fns = {
      kernels::attention_rows_fn(KvDtype::f32, precision),
      kernels::attention_rows_fn(KvDtype::bf16, precision),
      kernels::attention_rows_fn(KvDtype::f16, precision),
      kernels::attention_rows_fn(KvDtype::q8_0, precision)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<int>& visible = visible_;
  // Row r sees its cache up to and including its own entry: the cache length minus the rows
  // of its sequence that come after it in this pass.
  for (std::size_t r = T; r-- > 0;) {
    const bool last_of_seq = r + 1 == T || rows[r + 1].cache != rows[r].cache;
    visible[r] = last_of_seq ? rows[r].cache->length(kl) : visible[r + 1] - 1;
  }
  bool want_probs = false;
  if (out != nullptr) {
    // Row r's [Hkv][G][visible[r]] probabilities, for the rows that asked.
    out->offset.assign(T, 0);
    out->entries.assign(T, 0);
    std::size_t total = 0;
    for (std::size_t r = 0; r < T; ++r) {
      if (!rows[r].want_attention) continue;
      want_probs = true;
      out->offset[r] = total;
      out->entries[r] = visible[r];
      total += static_cast<std::size_t>(Hkv) * G * static_cast<std::size_t>(visible[r]);
    }
    out->data.resize(total);
  }
  auto attend = [&](std::size_t r, int h) {
    const int n = visible[r];
    const std::size_t size = static_cast<std::size_t>(G) * static_cast<std::size_t>(n);
    thread_local std::vector<float> scratch;
    float* probs = nullptr;
    if (rows[r].want_attention) {
      probs = out->data.data() + out->offset[r] + static_cast<std::size_t>(h) * size;
    } else {
      scratch.resize(size);
      probs = scratch.data();
    }
    // Each cache stores its own dtype; the kernel reads it directly.
    const KvCache& cache = *rows[r].cache;
    const float* q = s_.q.data() + r * QD + static_cast<std::size_t>(h) * G * D;
    float* o = s_.attn.data() + r * QD + static_cast<std::size_t>(h) * G * D;
    const KvRows keys = cache.keys(kl, h);
    kernels::attention_fn(cache.dtype(), precision)(q, G, D, keys.data, cache.values(kl, h).data, n,
                                                    scale, o, probs);
    if (!sinks.empty()) {
      thread_local std::vector<float> key;
      key.resize(static_cast<std::size_t>(D));
      apply_sinks(q, G, D, scale, sinks.data() + static_cast<std::size_t>(h) * G, n, probs, o,
                  [&](int j) {
                    kernels::kv_to_f32(keys.dtype, keys.row(j), 1, D, key.data());
                    return key.data();
                  });
    }
  };
  if (!want_probs && sinks.empty()) {
    // Consecutive rows of one sequence in blocks (row i of a block sees one more entry than
    // row i - 1), each block's rows against one KV head at once: the kernel shares its key
    // transposes and value conversions across them. A block's scratch probabilities,
    // rows x G x n floats, are kept to about 256 KiB (L2). Blocks are listed from each
    // sequence's end, so the longest go first to the pool.
    std::vector<RowBlock>& blocks = blocks_;
    blocks.clear();
    for (std::size_t b = T; b > 0;) {
      std::size_t a = b - 1;
      while (a > 0 && rows[a - 1].cache == rows[b - 1].cache) --a;  // this sequence: [a, b)
      for (std::size_t e = b; e > a;) {
        const auto n_last = static_cast<std::size_t>(visible[e - 1]);
        const std::size_t fit = (std::size_t{256} << 10) / (sizeof(float) * G * n_last + 1);
        const std::size_t len = std::clamp<std::size_t>(fit, 1, kAttentionRowBlock);
        const std::size_t s0 = e - a > len ? e - len : a;
        blocks.push_back({s0, e - s0});
        e = s0;
      }
      b = a;
    }
    pool_.parallel_for(blocks.size() * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
      const RowBlock& blk = blocks[task / static_cast<std::size_t>(Hkv)];
      const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
      const KvCache& cache = *rows[blk.r0].cache;
      const int n0 = visible[blk.r0];
      thread_local std::vector<float> probs;
      probs.resize(blk.R * static_cast<std::size_t>(G) *
                   static_cast<std::size_t>(n0 + static_cast<int>(blk.R) - 1));
      const std::size_t off = blk.r0 * QD + static_cast<std::size_t>(h) * G * D;
      rows_fns[static_cast<int>(cache.dtype())](s_.q.data() + off, QD, static_cast<int>(blk.R), G,
                                                D, cache.keys(kl, h).data, cache.values(kl, h).data,
                                                n0, scale, s_.attn.data() + off, QD, probs.data());
    });
  } else {
    // Rows one by one (the one-row kernel hands back its probabilities; each row's output is
    // bit for bit the blocked kernel's), one task per (sequence, KV head).
    std::vector<std::size_t> seq_begin;
    for (std::size_t r = 0; r < T; ++r)
      if (r == 0 || rows[r].cache != rows[r - 1].cache) seq_begin.push_back(r);
    seq_begin.push_back(T);
    const std::size_t n_seq = seq_begin.size() - 1;
    pool_.parallel_for(n_seq * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
      const std::size_t sq = task / static_cast<std::size_t>(Hkv);
      const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
      for (std::size_t r = seq_begin[sq]; r < seq_begin[sq + 1]; ++r) attend(r, h);
    });
  }
}

// A sliding-window layer (gpt-oss): each sequence's ring (its last sliding_window keys and values,
// float32, oldest first) and this pass's rows side by side, row i of the pass seeing the
// sliding_window keys that end at its own; then the ring keeps the newest of them. Rows of a
// sequence have consecutive positions, the ring's newest entry just before the first.
void CpuOps::window_attention(int l, std::span<const ForwardRow> rows) {
  const int wl = c_.window_layer(l), W = c_.sliding_window;
  const int D = c_.head_dim, Hkv = c_.num_kv_heads, G = c_.group_size();
  const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * D;
  const std::size_t KD = static_cast<std::size_t>(Hkv) * D;
  const std::size_t d = static_cast<std::size_t>(D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<float>& sinks = m_.layer(l).sinks;
  const kernels::AttentionFn attend = kernels::attention_fn(KvDtype::f32, m_.attention_precision());
  find_sequences(rows);
  const std::size_t n_seq = seq_begin_.size() - 1;
  pool_.parallel_for(n_seq * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
    const std::size_t sq = task / static_cast<std::size_t>(Hkv);
    const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
    const std::size_t a = seq_begin_[sq], b = seq_begin_[sq + 1];
    KvCache& cache = *rows[a].cache;
    const auto m = static_cast<std::size_t>(cache.window_length(wl));
    const std::size_t n = m + (b - a);
    float* ring_k = cache.window_keys(wl) + static_cast<std::size_t>(h) * W * d;
    float* ring_v = cache.window_values(wl) + static_cast<std::size_t>(h) * W * d;
    thread_local std::vector<float> keys, values, probs;
    keys.resize(n * d);
    values.resize(n * d);
    probs.resize(static_cast<std::size_t>(G) * static_cast<std::size_t>(W));
    std::copy(ring_k, ring_k + m * d, keys.begin());
    std::copy(ring_v, ring_v + m * d, values.begin());
    for (std::size_t r = a; r < b; ++r) {
      const float* k = s_.k.data() + r * KD + static_cast<std::size_t>(h) * d;
      const float* v = s_.v.data() + r * KD + static_cast<std::size_t>(h) * d;
      std::copy(k, k + d, keys.begin() + static_cast<std::ptrdiff_t>((m + r - a) * d));
      std::copy(v, v + d, values.begin() + static_cast<std::ptrdiff_t>((m + r - a) * d));
    }
    for (std::size_t r = a; r < b; ++r) {
      const std::size_t end = m + r - a + 1;  // keys up to and including this row's
      const std::size_t seen = std::min(end, static_cast<std::size_t>(W));
      const float* k0 = keys.data() + (end - seen) * d;
      const float* q = s_.q.data() + r * QD + static_cast<std::size_t>(h) * G * d;
      float* o = s_.attn.data() + r * QD + static_cast<std::size_t>(h) * G * d;
      attend(q, G, D, k0, values.data() + (end - seen) * d, static_cast<int>(seen), scale, o,
             probs.data());
      if (!sinks.empty())
        apply_sinks(q, G, D, scale, sinks.data() + static_cast<std::size_t>(h) * G,
                    static_cast<int>(seen), probs.data(), o,
                    [&](int j) { return k0 + static_cast<std::size_t>(j) * d; });
    }
    const std::size_t keep = std::min(n, static_cast<std::size_t>(W));
    std::copy(keys.end() - static_cast<std::ptrdiff_t>(keep * d), keys.end(), ring_k);
    std::copy(values.end() - static_cast<std::ptrdiff_t>(keep * d), values.end(), ring_v);
  });
  for (std::size_t sq = 0; sq < n_seq; ++sq) {
    KvCache& cache = *rows[seq_begin_[sq]].cache;
    const int n = cache.window_length(wl) + static_cast<int>(seq_begin_[sq + 1] - seq_begin_[sq]);
    cache.set_window_length(wl, std::min(n, W));
  }
}

void CpuOps::gate_attention() {
  const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * c_.head_dim;
  for_rows([&](std::size_t r0, std::size_t r1) {
    for (std::size_t i = r0 * QD; i < r1 * QD; ++i)
      s_.attn[i] *= 1.0f / (1.0f + std::exp(-s_.q_gate[i]));
  });
}

// The mixture of experts (ModelConfig::moe): router logits for every row, each row's top-k
// experts and weights, then expert by expert the rows that chose it through one GEMM each (as
// llama.cpp's mul_mat_id), a decode step reading only its chosen experts' rows.
void CpuOps::moe(int layer, Act in, Act residual) {
  const ExpertWeights& w = m_.layer(layer).moe;
  const MoeConfig& mc = c_.moe;
  const int E = mc.experts, K = mc.experts_used, F = mc.expert_ff;
  const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
  const std::size_t Ff = static_cast<std::size_t>(F);
  const float* x = buf(in);
  const bool oai = mc.routing == MoeConfig::Routing::TopKSoftmax;
  s_.router.resize(T_ * static_cast<std::size_t>(E));
  kernels::matmul(x, T_, w.router, s_.router.data(), pool_);
  add_bias(s_.router.data(), w.router_bias, 0, T_);
  s_.expert_ids.resize(T_ * static_cast<std::size_t>(K));
  s_.expert_weights.resize(T_ * static_cast<std::size_t>(K));
  for (std::size_t r = 0; r < T_; ++r) {
    float* z = s_.router.data() + r * static_cast<std::size_t>(E);
    if (!oai) {  // p = softmax(z) over all experts, selected by p
      const float mx = *std::max_element(z, z + E);
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) sum += z[e] = std::exp(z[e] - mx);
      for (int e = 0; e < E; ++e) z[e] /= sum;
    }
    int* ids = s_.expert_ids.data() + r * static_cast<std::size_t>(K);
    float* wt = s_.expert_weights.data() + r * static_cast<std::size_t>(K);
    for (int k = 0; k < K; ++k) {  // the k-th largest, the lowest id on ties
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (std::find(ids, ids + k, e) != ids + k) continue;
        if (best < 0 || z[e] > z[best]) best = e;
      }
      ids[k] = best;
      wt[k] = z[best];
    }
    if (oai) {  // softmax over the selected logits
      const float mx = *std::max_element(wt, wt + K);
      for (int k = 0; k < K; ++k) wt[k] = std::exp(wt[k] - mx);
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += wt[k];
    for (int k = 0; k < K; ++k) wt[k] /= sum;
  }
  s_.moe_out.assign(T_ * H, 0.0f);
  // Each expert's rows (those that chose it, in order) and their weights, experts in id order.
  std::vector<std::size_t> first(static_cast<std::size_t>(E) + 1, 0);
  for (const int e : s_.expert_ids) ++first[static_cast<std::size_t>(e) + 1];
  for (std::size_t e = 0; e < static_cast<std::size_t>(E); ++e) first[e + 1] += first[e];
  std::vector<std::size_t> picked(s_.expert_ids.size());
  std::vector<float> weight(s_.expert_ids.size());
  {
    std::vector<std::size_t> next(first.begin(), first.end() - 1);
    for (std::size_t r = 0; r < T_; ++r)
      for (std::size_t k = 0; k < static_cast<std::size_t>(K); ++k) {
        const std::size_t i = r * static_cast<std::size_t>(K) + k;
        const std::size_t at = next[static_cast<std::size_t>(s_.expert_ids[i])]++;
        picked[at] = r;
        weight[at] = s_.expert_weights[i];
      }
  }
  // Experts in batches of at most kMoeBatchRows rows (or one expert with more): each batch's
  // gate and up products are one call of matmul_jobs and its down products another, so that a
  // decode step's 2 K products take 2 parallel regions instead of 2 K (and the buffers stay
  // small in prefill). An expert every row chose (every expert of a one-row step) reads x in
  // place, so that its products share x's quantization.
  // The shared expert's products (Qwen3.5 MoE) join the first batch's two calls; its output is
  // added after the routed experts', as before.
  constexpr std::size_t kMoeBatchRows = 256;
  const std::size_t Fs = static_cast<std::size_t>(mc.shared_ff);
  if (Fs > 0) {
    s_.shared_gate.resize(T_ * Fs);
    s_.shared_up.resize(T_ * Fs);
    s_.shared_out.resize(T_ * H);
  }
  // A batch is the experts [e0, e1): their rows are picked[base, first[e1]), and expert e's
  // start at row first[e] - base of the batch's buffers.
  const std::size_t nE = static_cast<std::size_t>(E);
  std::vector<kernels::MatmulJob> jobs;
  for (std::size_t e0 = 0; e0 < nE;) {
    const bool with_shared = Fs > 0 && e0 == 0;
    const std::size_t base = first[e0];
    std::size_t e1 = e0 + 1;
    while (e1 < nE && first[e1 + 1] - base <= kMoeBatchRows) ++e1;
    const std::size_t rows = first[e1] - base;
    s_.expert_in.resize(rows * H);
    s_.expert_gate.resize(rows * Ff);
    s_.expert_up.resize(rows * Ff);
    s_.expert_out.resize(rows * H);
    jobs.clear();
    for (std::size_t e = e0; e < e1; ++e) {
      const std::size_t at = first[e] - base, n = first[e + 1] - first[e];
      if (n == 0) continue;
      const float* rows_in = x;
      if (n != T_) {
        float* copy = s_.expert_in.data() + at * H;
        for (std::size_t i = 0; i < n; ++i)
          std::copy(x + picked[first[e] + i] * H, x + (picked[first[e] + i] + 1) * H, copy + i * H);
        rows_in = copy;
      }
      const int ei = static_cast<int>(e);
      jobs.push_back({rows_in, n, expert_matrix(w.gate, E, ei), s_.expert_gate.data() + at * Ff});
      jobs.push_back({rows_in, n, expert_matrix(w.up, E, ei), s_.expert_up.data() + at * Ff});
    }
    if (with_shared) {
      jobs.push_back({x, T_, w.shared_gate, s_.shared_gate.data()});
      jobs.push_back({x, T_, w.shared_up, s_.shared_up.data()});
    }
    kernels::matmul_jobs(jobs, pool_);
    if (with_shared) kernels::silu_mul(s_.shared_gate.data(), s_.shared_up.data(), T_ * Fs);
    if (oai) {
      for (std::size_t e = e0; e < e1; ++e) {
        const float* bg = w.gate_bias.data() + e * Ff;
        const float* bu = w.up_bias.data() + e * Ff;
        for (std::size_t i = first[e] - base; i < first[e + 1] - base; ++i)
          for (std::size_t j = 0; j < Ff; ++j) {
            const float g = std::min(s_.expert_gate[i * Ff + j] + bg[j], 7.0f);
            const float u = std::clamp(s_.expert_up[i * Ff + j] + bu[j], -7.0f, 7.0f);
            s_.expert_gate[i * Ff + j] = g / (1.0f + std::exp(-1.702f * g)) * (u + 1.0f);
          }
      }
    } else {
      kernels::silu_mul(s_.expert_gate.data(), s_.expert_up.data(), rows * Ff);
    }
    jobs.clear();
    for (std::size_t e = e0; e < e1; ++e) {
      const std::size_t at = first[e] - base, n = first[e + 1] - first[e];
      if (n > 0)
        jobs.push_back({s_.expert_gate.data() + at * Ff, n,
                        expert_matrix(w.down, E, static_cast<int>(e)),
                        s_.expert_out.data() + at * H});
    }
    if (with_shared)
      jobs.push_back({s_.shared_gate.data(), T_, w.shared_down, s_.shared_out.data()});
    kernels::matmul_jobs(jobs, pool_);
    // Expert by expert in id order, each one's rows in order: the order of the additions is the
    // same as when the experts ran one at a time.
    for (std::size_t e = e0; e < e1; ++e) {
      const float* bd = w.down_bias.empty() ? nullptr : w.down_bias.data() + e * H;
      for (std::size_t i = first[e]; i < first[e + 1]; ++i) {
        float* y = s_.moe_out.data() + picked[i] * H;
        const float* o = s_.expert_out.data() + (i - base) * H;
        for (std::size_t j = 0; j < H; ++j) y[j] += weight[i] * (bd ? o[j] + bd[j] : o[j]);
      }
    }
    e0 = e1;
  }
  if (Fs > 0) {  // the shared expert, gated per row by sigmoid(shared_router . x)
    for (std::size_t r = 0; r < T_; ++r) {
      float dot = 0.0f;
      for (std::size_t j = 0; j < H; ++j) dot += x[r * H + j] * w.shared_router[j];
      const float gate = 1.0f / (1.0f + std::exp(-dot));
      for (std::size_t j = 0; j < H; ++j) s_.moe_out[r * H + j] += gate * s_.shared_out[r * H + j];
    }
  }
  float* y = buf(residual);
  for_rows([&](std::size_t r0, std::size_t r1) {
    for (std::size_t i = r0 * H; i < r1 * H; ++i) y[i] += s_.moe_out[i];
  });
}

// Gated DeltaNet (Qwen3.5; docs/ARCHITECTURES.md): the projections of every row, then per
// sequence its causal conv over the channels (the conv window in the state) and, per v head, the
// delta-rule recurrence over its rows in order; the gated norm; the output projection.
// The recurrence's dot products over a head's k dimension as 16 interleaved partial sums
// (element j into sum j % 16) added pairwise at the end: the compiler vectorises them in portable
// code, where one running sum stays scalar (it may not reorder float additions).
constexpr std::size_t kDeltaLanes = 16;
inline float lanes_sum(float (&p)[kDeltaLanes]) {
  for (std::size_t w = kDeltaLanes / 2; w >= 1; w /= 2)
    for (std::size_t l = 0; l < w; ++l) p[l] += p[l + w];
  return p[0];
}

void CpuOps::delta_net(int layer, std::span<const ForwardRow> rows, Act in, Act residual) {
  const DeltaNetWeights& w = m_.layer(layer).delta_net;
  const DeltaNetConfig& dc = c_.delta_net;
  const int dl = c_.delta_net_layer(layer);
  const std::size_t C = static_cast<std::size_t>(dc.conv_channels());
  const std::size_t Kc = static_cast<std::size_t>(dc.conv_kernel);
  const int Hk = dc.k_heads, Hv = dc.v_heads;
  const std::size_t dk = static_cast<std::size_t>(dc.head_k_dim);
  const std::size_t dv = static_cast<std::size_t>(dc.head_v_dim);
  const std::size_t V = static_cast<std::size_t>(Hv) * dv;
  const std::size_t H = static_cast<std::size_t>(c_.hidden_size);
  const float eps = c_.rms_norm_eps;
  s_.dn_qkv.resize(T_ * C);
  s_.dn_z.resize(T_ * V);
  s_.dn_beta.resize(T_ * static_cast<std::size_t>(Hv));
  s_.dn_alpha.resize(T_ * static_cast<std::size_t>(Hv));
  s_.dn_out.resize(T_ * V);
  const kernels::MatmulProduct products[] = {{w.qkv, s_.dn_qkv.data()},
                                             {w.z, s_.dn_z.data()},
                                             {w.beta, s_.dn_beta.data()},
                                             {w.alpha, s_.dn_alpha.data()}};
  kernels::matmul_many(buf(in), T_, products, pool_);
  find_sequences(rows);
  const std::size_t n_seq = seq_begin_.size() - 1;
  const std::size_t per_layer = dc.state_floats();
  // The conv, then SiLU and the L2 norms of q and k, per sequence.
  pool_.parallel_for(n_seq, [&](std::size_t sq) {
    float* conv_state =
        rows[seq_begin_[sq]].cache->recurrent() + static_cast<std::size_t>(dl) * per_layer;
    for (std::size_t r = seq_begin_[sq]; r < seq_begin_[sq + 1]; ++r) {
      float* x = s_.dn_qkv.data() + r * C;
      for (std::size_t ch = 0; ch < C; ++ch) {
        const float* tap = w.conv.data() + ch * Kc;
        float y = tap[Kc - 1] * x[ch];
        for (std::size_t k = 0; k + 1 < Kc; ++k) y += tap[k] * conv_state[k * C + ch];
        for (std::size_t k = 0; k + 2 < Kc; ++k)
          conv_state[k * C + ch] = conv_state[(k + 1) * C + ch];
        if (Kc > 1) conv_state[(Kc - 2) * C + ch] = x[ch];
        x[ch] = y / (1.0f + std::exp(-y));
      }
      for (int h = 0; h < 2 * Hk; ++h) {  // q heads, then k heads
        float* v = x + static_cast<std::size_t>(h) * dk;
        float ss = 0.0f;
        for (std::size_t i = 0; i < dk; ++i) ss += v[i] * v[i];
        const float inv = 1.0f / std::max(std::sqrt(ss), eps);
        for (std::size_t i = 0; i < dk; ++i) v[i] *= inv;
      }
    }
  });
  // The recurrence, per (sequence, v head): v head h reads q/k head h mod k_heads.
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  pool_.parallel_for(n_seq * static_cast<std::size_t>(Hv), [&](std::size_t task) {
    const std::size_t sq = task / static_cast<std::size_t>(Hv);
    const int h = static_cast<int>(task % static_cast<std::size_t>(Hv));
    const std::size_t kh = static_cast<std::size_t>(h % Hk);
    float* S = rows[seq_begin_[sq]].cache->recurrent() + static_cast<std::size_t>(dl) * per_layer +
               (Kc - 1) * C + static_cast<std::size_t>(h) * dv * dk;
    for (std::size_t r = seq_begin_[sq]; r < seq_begin_[sq + 1]; ++r) {
      const float* x = s_.dn_qkv.data() + r * C;
      const float* q = x + kh * dk;
      const float* k = x + static_cast<std::size_t>(Hk) * dk + kh * dk;
      const float* v = x + 2 * static_cast<std::size_t>(Hk) * dk + static_cast<std::size_t>(h) * dv;
      const float a = s_.dn_alpha[r * static_cast<std::size_t>(Hv) + static_cast<std::size_t>(h)] +
                      w.dt_bias[static_cast<std::size_t>(h)];
      const float softplus = a > 20.0f ? a : std::log1p(std::exp(a));
      const float decay = std::exp(softplus * w.a[static_cast<std::size_t>(h)]);
      const float b = s_.dn_beta[r * static_cast<std::size_t>(Hv) + static_cast<std::size_t>(h)];
      const float beta = 1.0f / (1.0f + std::exp(-b));
      float* o = s_.dn_out.data() + r * V + static_cast<std::size_t>(h) * dv;
      for (std::size_t i = 0; i < dv; ++i) {
        float* Si = S + i * dk;
        float p[kDeltaLanes] = {};
        std::size_t j = 0;
        for (; j + kDeltaLanes <= dk; j += kDeltaLanes)
          for (std::size_t l = 0; l < kDeltaLanes; ++l) {
            Si[j + l] *= decay;
            p[l] += Si[j + l] * k[j + l];
          }
        for (; j < dk; ++j) p[j % kDeltaLanes] += (Si[j] *= decay) * k[j];
        const float delta = beta * (v[i] - lanes_sum(p));
        float p2[kDeltaLanes] = {};
        for (j = 0; j + kDeltaLanes <= dk; j += kDeltaLanes)
          for (std::size_t l = 0; l < kDeltaLanes; ++l) {
            Si[j + l] += delta * k[j + l];
            p2[l] += Si[j + l] * q[j + l];
          }
        for (; j < dk; ++j) p2[j % kDeltaLanes] += (Si[j] += delta * k[j]) * q[j];
        o[i] = lanes_sum(p2) * q_scale;
      }
      // The gated norm: RMSNorm(o) * norm, times silu(z).
      float ss = 0.0f;
      for (std::size_t i = 0; i < dv; ++i) ss += o[i] * o[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dv) + eps);
      const float* z = s_.dn_z.data() + r * V + static_cast<std::size_t>(h) * dv;
      for (std::size_t i = 0; i < dv; ++i)
        o[i] = o[i] * inv * w.norm[i] * (z[i] / (1.0f + std::exp(-z[i])));
    }
  });
  s_.moe_out.resize(T_ * H);
  kernels::matmul(s_.dn_out.data(), T_, w.out, s_.moe_out.data(), pool_);
  float* y = buf(residual);
  for_rows([&](std::size_t r0, std::size_t r1) {
    for (std::size_t i = r0 * H; i < r1 * H; ++i) y[i] += s_.moe_out[i];
  });
}

}  // namespace

namespace {

// A device's steps, one pass at a time: holds the device's lock while the pass lives.
class LockedOps final : public ForwardOps {
 public:
  LockedOps(ForwardOps& ops, std::mutex& mutex) : ops_(ops), lock_(mutex) {}
  void begin(std::span<const ForwardRow> rows) override { ops_.begin(rows); }
  void rms_norm(Norm norm, int layer, Act in, Act out) override {
    ops_.rms_norm(norm, layer, in, out);
  }
  void project(int layer, Act in, std::span<const Product> products) override {
    ops_.project(layer, in, products);
  }
  void prepare_qkv(int layer) override { ops_.prepare_qkv(layer); }
  void append_kv(int layer, std::span<const ForwardRow> rows) override {
    ops_.append_kv(layer, rows);
  }
  void attention(int layer, std::span<const ForwardRow> rows, AttentionProbs* probs) override {
    ops_.attention(layer, rows, probs);
  }
  void add(Act dst, Act src) override { ops_.add(dst, src); }
  void silu_mul() override { ops_.silu_mul(); }
  void gate_attention() override { ops_.gate_attention(); }
  void moe(int layer, Act in, Act residual) override { ops_.moe(layer, in, residual); }
  void delta_net(int layer, std::span<const ForwardRow> rows, Act in, Act residual) override {
    ops_.delta_net(layer, rows, in, residual);
  }
  bool on_host() const override { return ops_.on_host(); }
  float* host(Act a) override { return ops_.host(a); }
  void logits(std::span<const ForwardRow> rows, Act in, float* out) override {
    ops_.logits(rows, in, out);
  }
  void end(std::span<const ForwardRow> rows) override { ops_.end(rows); }

 private:
  ForwardOps& ops_;
  std::lock_guard<std::mutex> lock_;
};

}  // namespace

std::unique_ptr<ForwardOps> Model::ops(ForwardScratch& scratch, ThreadPool& pool) const {
  // One forward pass at a time on the device: its activations are the backend's.
  if (device_ops_) return std::make_unique<LockedOps>(*device_ops_, device_mutex_);
  return std::make_unique<CpuOps>(*this, scratch, pool);
}

void Model::forward(std::span<const ForwardRow> rows, ForwardScratch& scratch, ThreadPool& pool,
                    float* logits) const {
  const std::unique_ptr<ForwardOps> steps = ops(scratch, pool);
  run_forward(config_, *steps, rows, logits);
}

}  // namespace rkv
