// Small float32 helpers shared by the scoring stages, written so that -O3 vectorises them
// without -ffast-math (eight independent partial sums instead of one serial reduction).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace rkv::compress {

inline float dot(const float* __restrict a, const float* __restrict b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// In-place softmax of v[0..n), max subtracted first, float32 as in the references.
inline void softmax_inplace(float* v, int n) {
  if (n <= 0) return;
  const float m = *std::max_element(v, v + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    v[i] = std::exp(v[i] - m);
    sum += v[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace rkv::compress
