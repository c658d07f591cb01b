// Max-normalisation (G-KV, ALGORITHMS.md 4): local scores and redundancy are divided by their
// per-head maximum over the candidates, so windows of different lengths stay comparable.
#include <algorithm>

#include "compress/stages.h"

namespace rkv::compress {

void normalize_by_max(std::span<float> v) {
  if (v.empty()) return;
  const float m = *std::max_element(v.begin(), v.end());
  // The reference would divide by zero here; an all-zero (or negative) vector is left alone.
  if (!(m > 0.0f)) return;
  for (float& x : v) x /= m;
}

}  // namespace rkv::compress
