// The forward pass (golden models README, "Architecture details"): per layer
//   h += o_proj(attention(rope(q), rope(k), v)) of input_layernorm(h)
//   h += down_proj(silu(gate_proj(x)) * up_proj(x)) of post_attention_layernorm(h)
// then the final norm and lm_head, all in float32. Rows of many sequences go through the matrix
// products together, so the weights are read once per pass (DESIGN.md property 5).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/attention.h"
#include "model/model.h"

namespace rkv {

namespace {

// y = w * x / sqrt(mean(x^2) + eps), HF's LlamaRMSNorm in float32.
void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
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

void Model::forward(std::span<const ForwardRow> rows, ForwardScratch& s, ThreadPool& pool,
                    float* logits, ForwardObserver* observer) const {
  const ModelConfig& c = config_;
  const std::size_t T = rows.size();
  if (T == 0) return;
  const std::size_t H = static_cast<std::size_t>(c.hidden_size);
  const std::size_t I = static_cast<std::size_t>(c.intermediate_size);
  const int D = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads, G = c.group_size();
  const std::size_t QD = static_cast<std::size_t>(Hq) * D, KD = static_cast<std::size_t>(Hkv) * D;
  const int half = D / 2;

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

  s.x.resize(T * H);
  s.xn.resize(T * H);
  s.q.resize(T * QD);
  s.k.resize(T * KD);
  s.v.resize(T * KD);
  s.attn.resize(T * QD);
  s.gate.resize(T * I);
  s.up.resize(T * I);
  s.rope_cos.resize(T * half);
  s.rope_sin.resize(T * half);

  for (std::size_t r = 0; r < T; ++r) {
    embed(rows[r].token, s.x.data() + r * H);
    // angle = float32(position) * inv_freq in float32, as HF computes it.
    for (int j = 0; j < half; ++j) {
      const float angle =
          static_cast<float>(rows[r].position) * inv_freq_[static_cast<std::size_t>(j)];
      s.rope_cos[r * half + j] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s.rope_sin[r * half + j] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }

  // The per-row work between the matrix products (norms, bias, RoPE, SiLU, residuals) runs on
  // the pool in prefill-sized passes; each row is computed exactly as on one thread. Decode steps
  // of a few rows stay on the calling thread, where a parallel region would cost more than it
  // saves.
  constexpr std::size_t kRowParallelMin = 16;
  // Rows of one sequence that attend together (attention_rows_fn).
  constexpr std::size_t kAttentionRowBlock = 16;
  auto for_rows = [&](const auto& fn) {
    if (T >= kRowParallelMin)
      pool.parallel_ranges(T, 1, fn);
    else
      fn(0, T);
  };

  // Where each row's own entry lands in its cache, and how many entries it may attend to.
  std::vector<int> visible(T);
  struct RowBlock {
    std::size_t r0, R;
  };
  std::vector<RowBlock> blocks;
  const std::array<kernels::AttentionRowsFn, 4> rows_fns = {
      kernels::attention_rows_fn(KvDtype::f32, attention_precision_),
      kernels::attention_rows_fn(KvDtype::bf16, attention_precision_),
      kernels::attention_rows_fn(KvDtype::f16, attention_precision_),
      kernels::attention_rows_fn(KvDtype::q8_0, attention_precision_)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool want_probs = observer != nullptr && observer->wants_attention_probs();

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<std::size_t>(l)];
    for_rows([&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r)
        rms_norm(s.x.data() + r * H, w.input_norm.data(), s.xn.data() + r * H, static_cast<int>(H),
                 c.rms_norm_eps);
    });
    const kernels::MatmulProduct qkv[] = {{w.q, s.q.data()}, {w.k, s.k.data()}, {w.v, s.v.data()}};
    kernels::matmul_many(s.xn.data(), T, qkv, pool);
    for_rows([&](std::size_t r0, std::size_t r1) {
      add_bias(s.q.data(), w.q_bias, r0, r1);
      add_bias(s.k.data(), w.k_bias, r0, r1);
      add_bias(s.v.data(), w.v_bias, r0, r1);
      for (std::size_t r = r0; r < r1; ++r) {
        const float* cs = s.rope_cos.data() + r * half;
        const float* sn = s.rope_sin.data() + r * half;
        for (int h = 0; h < Hq; ++h) {
          float* qh = s.q.data() + r * QD + static_cast<std::size_t>(h) * D;
          if (c.qk_norm) rms_norm(qh, w.q_norm.data(), qh, D, c.rms_norm_eps);
          apply_rope(qh, D, cs, sn);
        }
        for (int h = 0; h < Hkv; ++h) {
          float* kh = s.k.data() + r * KD + static_cast<std::size_t>(h) * D;
          if (c.qk_norm) rms_norm(kh, w.k_norm.data(), kh, D, c.rms_norm_eps);
          apply_rope(kh, D, cs, sn);
        }
      }
    });
    for (std::size_t r = 0; r < T; ++r) {
      rows[r].cache->append(l, s.k.data() + r * KD, s.v.data() + r * KD, rows[r].position);
      rows[r].cache->push_query(l, s.q.data() + r * QD);
    }
    if (observer != nullptr) observer->after_kv_append(l, rows);
    // Row r sees its cache up to and including its own entry: the cache length minus the rows
    // of its sequence that come after it in this pass.
    for (std::size_t r = T; r-- > 0;) {
      const bool last_of_seq = r + 1 == T || rows[r + 1].cache != rows[r].cache;
      visible[r] = last_of_seq ? rows[r].cache->length(l) : visible[r + 1] - 1;
    }
    auto attend = [&](std::size_t r, int h) {
      const int n = visible[r];
      thread_local std::vector<float> probs;
      probs.resize(static_cast<std::size_t>(G) * static_cast<std::size_t>(n));
      // Each cache stores its own dtype; the kernel reads it directly.
      const KvCache& cache = *rows[r].cache;
      kernels::attention_fn(cache.dtype(), attention_precision_)(
          s.q.data() + r * QD + static_cast<std::size_t>(h) * G * D, G, D, cache.keys(l, h).data,
          cache.values(l, h).data, n, scale,
          s.attn.data() + r * QD + static_cast<std::size_t>(h) * G * D, probs.data());
      if (want_probs) observer->attention_probs(l, rows, r, h, probs.data(), G, n);
    };
    if (!want_probs) {
      // Consecutive rows of one sequence in blocks (row i of a block sees one more entry than
      // row i - 1), each block's rows against one KV head at once: the kernel shares its key
      // transposes and value conversions across them. A block's scratch probabilities,
      // rows x G x n floats, are kept to about 256 KiB (L2). Blocks are listed from each
      // sequence's end, so the longest go first to the pool.
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
      pool.parallel_for(blocks.size() * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
        const RowBlock& blk = blocks[task / static_cast<std::size_t>(Hkv)];
        const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
        const KvCache& cache = *rows[blk.r0].cache;
        const int n0 = visible[blk.r0];
        thread_local std::vector<float> probs;
        probs.resize(blk.R * static_cast<std::size_t>(G) *
                     static_cast<std::size_t>(n0 + static_cast<int>(blk.R) - 1));
        const std::size_t off = blk.r0 * QD + static_cast<std::size_t>(h) * G * D;
        rows_fns[static_cast<int>(cache.dtype())](s.q.data() + off, QD, static_cast<int>(blk.R), G,
                                                  D, cache.keys(l, h).data, cache.values(l, h).data,
                                                  n0, scale, s.attn.data() + off, QD, probs.data());
      });
    } else {
      // The observer accumulates into per-(sequence, head) arrays: one task per (sequence, KV
      // head) runs that sequence's rows in order, so no two threads touch the same array.
      std::vector<std::size_t> seq_begin;
      for (std::size_t r = 0; r < T; ++r)
        if (r == 0 || rows[r].cache != rows[r - 1].cache) seq_begin.push_back(r);
      seq_begin.push_back(T);
      const std::size_t n_seq = seq_begin.size() - 1;
      pool.parallel_for(n_seq * static_cast<std::size_t>(Hkv), [&](std::size_t task) {
        const std::size_t sq = task / static_cast<std::size_t>(Hkv);
        const int h = static_cast<int>(task % static_cast<std::size_t>(Hkv));
        for (std::size_t r = seq_begin[sq]; r < seq_begin[sq + 1]; ++r) attend(r, h);
      });
    }
    kernels::matmul(s.attn.data(), T, w.o, s.xn.data(), pool);
    for_rows([&](std::size_t r0, std::size_t r1) {
      for (std::size_t i = r0 * H; i < r1 * H; ++i) s.x[i] += s.xn[i];
      for (std::size_t r = r0; r < r1; ++r)
        rms_norm(s.x.data() + r * H, w.post_norm.data(), s.xn.data() + r * H, static_cast<int>(H),
                 c.rms_norm_eps);
    });
    const kernels::MatmulProduct gate_up[] = {{w.gate, s.gate.data()}, {w.up, s.up.data()}};
    kernels::matmul_many(s.xn.data(), T, gate_up, pool);
    for_rows([&](std::size_t r0, std::size_t r1) {
      kernels::silu_mul(s.gate.data() + r0 * I, s.up.data() + r0 * I, (r1 - r0) * I);
    });
    kernels::matmul(s.gate.data(), T, w.down, s.xn.data(), pool);
    for_rows([&](std::size_t r0, std::size_t r1) {
      for (std::size_t i = r0 * H; i < r1 * H; ++i) s.x[i] += s.xn[i];
    });
    if (observer != nullptr) observer->after_layer(l, rows, s.x.data());
  }

  for_rows([&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r)
      rms_norm(s.x.data() + r * H, final_norm_.data(), s.xn.data() + r * H, static_cast<int>(H),
               c.rms_norm_eps);
  });
  if (observer != nullptr) observer->final_hidden(rows, s.xn.data());
  std::size_t n_logits = 0;
  s.logits_hidden.resize(T * H);
  for (std::size_t r = 0; r < T; ++r) {
    if (!rows[r].want_logits) continue;
    std::memcpy(s.logits_hidden.data() + n_logits * H, s.xn.data() + r * H, H * sizeof(float));
    ++n_logits;
  }
  if (n_logits > 0 && logits != nullptr)
    kernels::matmul(s.logits_hidden.data(), n_logits, lm_head_, logits, pool);
}

}  // namespace rkv
