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
  }
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
  ops_.rms_norm(Norm::Input, l, Act::X, Act::XN);
  ops_.project(l, Act::XN, qkv);
  ops_.prepare_qkv(l);
  ops_.append_kv(l, rows_);
}

void ForwardPass::attend(int l, AttentionProbs* probs) {
  expect(2 * l + 1, "attend");
  using P = ForwardOps::Product;
  static constexpr P o[] = {{Proj::O, Act::XN}};
  static constexpr P gate_up[] = {{Proj::Gate, Act::Gate}, {Proj::Up, Act::Up}};
  static constexpr P down[] = {{Proj::Down, Act::XN}};
  ops_.attention(l, rows_, probs);
  ops_.project(l, Act::Attn, o);
  ops_.add(Act::X, Act::XN);
  ops_.rms_norm(Norm::Post, l, Act::X, Act::XN);
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
    const int half = c_.head_dim / 2;
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
  }

  void prepare_qkv(int layer) override {
    const LayerWeights& w = m_.layer(layer);
    const int D = c_.head_dim, Hq = c_.num_heads, Hkv = c_.num_kv_heads, half = D / 2;
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
          apply_rope(qh, D, cs, sn);
        }
        for (int h = 0; h < Hkv; ++h) {
          float* kh = s_.k.data() + r * KD + static_cast<std::size_t>(h) * D;
          if (c_.qk_norm) rms_norm_row(kh, w.k_norm.data(), kh, D, c_.rms_norm_eps);
          apply_rope(kh, D, cs, sn);
        }
      }
    });
  }

  void append_kv(int layer, std::span<const ForwardRow> rows) override {
    const std::size_t QD = static_cast<std::size_t>(c_.num_heads) * c_.head_dim;
    const std::size_t KD = static_cast<std::size_t>(c_.num_kv_heads) * c_.head_dim;
    for (std::size_t r = 0; r < T_; ++r) {
      rows[r].cache->append(layer, s_.k.data() + r * KD, s_.v.data() + r * KD, rows[r].position);
      rows[r].cache->push_query(layer, s_.q.data() + r * QD);
    }
  }

  void attention(int l, std::span<const ForwardRow> rows, AttentionProbs* probs) override;

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
};

void CpuOps::attention(int l, std::span<const ForwardRow> rows, AttentionProbs* out) {
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
    visible[r] = last_of_seq ? rows[r].cache->length(l) : visible[r + 1] - 1;
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
    kernels::attention_fn(cache.dtype(), precision)(
        s_.q.data() + r * QD + static_cast<std::size_t>(h) * G * D, G, D, cache.keys(l, h).data,
        cache.values(l, h).data, n, scale,
        s_.attn.data() + r * QD + static_cast<std::size_t>(h) * G * D, probs);
  };
  if (!want_probs) {
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
                                                D, cache.keys(l, h).data, cache.values(l, h).data,
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
