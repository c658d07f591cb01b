// Attention importance as G-KV's reference computes it (ALGORITHMS.md 2, last paragraph; golden
// README 6.3 steps 2-3), and G-KV's prefill seed of the score cache (6.3, "Prefill seeding").
#include <cmath>
#include <vector>

#include "compress/stages.h"
#include "compress/vec_math.h"
#include "core/error.h"

namespace rkv::compress {

void causal_group_attention(const QueryGroup& q, const float* keys, int n_all, int n_out,
                            float* rows_out, float* col_sum) {
  const int rows = q.window;
  const int d = q.head_dim;
  // G-KV scales the keys by 1/sqrt(d) BEFORE the matmul (R-KV scales the product).
  const float sqrt_d = std::sqrt(static_cast<float>(d));
  std::vector<float> scaled(static_cast<std::size_t>(n_all) * d);
  for (std::size_t i = 0; i < scaled.size(); ++i) scaled[i] = keys[i] / sqrt_d;

  // [G][rows][n_all] logits of every query against every key (the masked ones are not used).
  std::vector<float> probs(static_cast<std::size_t>(q.heads) * rows * n_all);
  group_logits(q.first, q.heads * rows, scaled.data(), n_all, d, probs.data());
  std::vector<const float*> group(q.heads);
  std::vector<float> pooled(n_out);
  std::fill(col_sum, col_sum + n_out, 0.0f);
  for (int r = 0; r < rows; ++r) {
    // Query r is entry n_all - rows + r and sees entries 0..itself (the causal mask inside the
    // window); the softmax runs over all of those, window keys included.
    const int visible = n_all - rows + r + 1;
    for (int g = 0; g < q.heads; ++g) {
      float* p = probs.data() + (static_cast<std::size_t>(g) * rows + r) * n_all;
      softmax_inplace(p, visible);
      std::fill(p + visible, p + n_all, 0.0f);  // masked: probability 0
      group[g] = p;
    }
    group_max(group, n_out, pooled.data());  // GQA max AFTER the softmax
    if (rows_out != nullptr) {
      std::copy(pooled.begin(), pooled.end(), rows_out + static_cast<std::size_t>(r) * n_out);
    }
    for (int j = 0; j < n_out; ++j) col_sum[j] += pooled[j];
  }
}

void attention_gkv(const QueryGroup& q, const float* keys, int n_all, float* probs_out,
                   float* mean_out) {
  const int n = n_all - q.window;  // the window columns are dropped after the softmax
  causal_group_attention(q, keys, n_all, n, probs_out, mean_out);
  const float inv_w = 1.0f / static_cast<float>(q.window);
  for (int j = 0; j < n; ++j) mean_out[j] *= inv_w;
}

}  // namespace rkv::compress

namespace rkv {

void gkv_prefill_scores(const float* queries, std::span<const float* const> keys, int q_heads,
                        int kv_heads, int head_dim, int n, std::span<float* const> out) {
  if (kv_heads < 1 || q_heads < kv_heads || q_heads % kv_heads != 0 || head_dim < 1 || n < 0) {
    throw Error("gkv_prefill_scores: invalid shape (q_heads " + std::to_string(q_heads) +
                ", kv_heads " + std::to_string(kv_heads) + ", head_dim " +
                std::to_string(head_dim) + ", n " + std::to_string(n) + ")");
  }
  if (keys.size() != static_cast<std::size_t>(kv_heads) ||
      out.size() != static_cast<std::size_t>(kv_heads)) {
    throw Error("gkv_prefill_scores: need one key array and one output array per KV head");
  }
  const int group = q_heads / kv_heads;
  for (int h = 0; h < kv_heads; ++h) {
    compress::QueryGroup q{queries + static_cast<std::size_t>(h) * group * n * head_dim, group, n,
                           head_dim};
    // Every prompt query is a "window" row; nothing is dropped; the rows are SUMMED.
    compress::causal_group_attention(q, keys[h], n, n, nullptr, out[h]);
  }
}

}  // namespace rkv
