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
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (std::size_t i = 0; i < n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
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
