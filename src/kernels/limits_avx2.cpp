// AVX2 + FMA loops of the machine-limit measurements (limits.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>

#include "kernels/limits.h"

namespace rkv::kernels {

const LimitLoops* limit_loops_avx2();

namespace {

float hsum(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

float read_sum(const float* p, std::size_t n) {
  const std::size_t part = n / kReadStreams;
  __m256 s[kReadStreams];
  for (__m256& v : s) v = _mm256_setzero_ps();
  for (std::size_t i = 0; i < part; i += 8)
    for (std::size_t k = 0; k < kReadStreams; ++k)
      s[k] = _mm256_add_ps(s[k], _mm256_loadu_ps(p + k * part + i));
  __m256 t = s[0];
  for (std::size_t k = 1; k < kReadStreams; ++k) t = _mm256_add_ps(t, s[k]);
  return hsum(t);
}

// 12 independent chains: enough to cover the FMA latency (4-5 cycles) on two FMA pipes.
float compute(std::size_t iterations, float seed) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(seed + static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  for (std::size_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  return hsum(s);
}

constexpr LimitLoops kLoops{&read_sum, &compute, 12.0 * 8 * 2, "f32 FMA, 8 lanes (AVX2)"};

}  // namespace

const LimitLoops* limit_loops_avx2() {
  return &kLoops;
}

}  // namespace rkv::kernels
