// 1-D max pooling over neighbouring cache entries (ALGORITHMS.md 2.5): stride 1, same-size
// output, padding kernel/2 on each side that never wins (torch's max_pool1d pads with -inf).
#include <algorithm>

#include "compress/stages.h"

namespace rkv::compress {

void max_pool_1d(std::span<const float> in, int kernel, std::span<float> out) {
  const int n = static_cast<int>(in.size());
  const int half = kernel / 2;
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - half);
    const int hi = std::min(n - 1, i + half);
    float m = in[lo];
    for (int j = lo + 1; j <= hi; ++j) m = std::max(m, in[j]);
    out[i] = m;
  }
}

}  // namespace rkv::compress
