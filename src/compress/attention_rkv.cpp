// Attention importance as the R-KV reference computes it (SnapKV adapted to decoding,
// ALGORITHMS.md 2.1-2.4; golden README 6.1 steps 2-4).
#include <cmath>
#include <vector>

#include "compress/stages.h"
#include "compress/vec_math.h"

namespace rkv::compress {

void attention_rkv(const QueryGroup& q, const float* keys, int n_all, float* logits_out,
                   float* mean_out) {
  const int w = q.window;
  const int d = q.head_dim;
  const int n = n_all - w;  // candidates: the window's own keys never enter the softmax (2.3)
  // The reference scales after the matmul: (Q K^T) / sqrt(d).
  const float sqrt_d = std::sqrt(static_cast<float>(d));

  // [G][w][n] logits of every query head of the group, then their element-wise max (2.2: the
  // group is pooled on the LOGITS, before the softmax).
  std::vector<float> per_head(static_cast<std::size_t>(q.heads) * w * n);
  std::vector<const float*> rows(q.heads);
  std::vector<float> pooled(static_cast<std::size_t>(w) * n);
  group_logits(q.first, q.heads * w, keys, n, d, per_head.data());
  for (float& x : per_head) x /= sqrt_d;
  for (int r = 0; r < w; ++r) {
    for (int g = 0; g < q.heads; ++g)
      rows[g] = per_head.data() + (static_cast<std::size_t>(g) * w + r) * n;
    group_max(rows, n, pooled.data() + static_cast<std::size_t>(r) * n);
  }
  if (logits_out != nullptr) std::copy(pooled.begin(), pooled.end(), logits_out);

  // Softmax of every row over the n candidates (float32), then the mean over the w rows.
  std::fill(mean_out, mean_out + n, 0.0f);
  for (int r = 0; r < w; ++r) {
    float* row = pooled.data() + static_cast<std::size_t>(r) * n;
    softmax_inplace(row, n);
    for (int j = 0; j < n; ++j) mean_out[j] += row[j];
  }
  const float inv_w = 1.0f / static_cast<float>(w);
  for (int j = 0; j < n; ++j) mean_out[j] *= inv_w;
}

}  // namespace rkv::compress
