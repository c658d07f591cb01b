// Attention-shift indicator (CAKE-like, G-KV's `attention_shift_indicator`; ALGORITHMS.md 4):
// the unbiased standard deviation of each candidate's attention over the window rows. A token
// whose attention varies across the window is gaining or losing relevance, so gkv adds
// gamma * std to its local score before the normalisation.
#include <cmath>
#include <vector>

#include "compress/stages.h"

namespace rkv::compress {

void column_std_unbiased(const float* rows, int window, int n, float* std_out) {
  std::vector<float> mean(n, 0.0f);
  for (int r = 0; r < window; ++r) {
    for (int j = 0; j < n; ++j) mean[j] += rows[static_cast<std::size_t>(r) * n + j];
  }
  for (int j = 0; j < n; ++j) mean[j] /= static_cast<float>(window);
  std::vector<float> ss(n, 0.0f);
  for (int r = 0; r < window; ++r) {
    for (int j = 0; j < n; ++j) {
      const float dev = rows[static_cast<std::size_t>(r) * n + j] - mean[j];
      ss[j] += dev * dev;
    }
  }
  // N - 1 denominator, as torch.std; window >= 2 is checked by CompressionParams::validate.
  const float denom = static_cast<float>(window - 1);
  for (int j = 0; j < n; ++j) std_out[j] = std::sqrt(ss[j] / denom);
}

}  // namespace rkv::compress
