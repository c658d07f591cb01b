// AVX-512 loops of the machine-limit measurements (limits.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>

#include "kernels/limits.h"

namespace rkv::kernels {

const LimitLoops* limit_loops_avx512();
float limits_read_sum_avx512(const float* p, std::size_t n);

float limits_read_sum_avx512(const float* p, std::size_t n) {
  const std::size_t part = n / kReadStreams;
  __m512 s[kReadStreams];
  for (__m512& v : s) v = _mm512_setzero_ps();
  for (std::size_t i = 0; i < part; i += 16)
    for (std::size_t k = 0; k < kReadStreams; ++k)
      s[k] = _mm512_add_ps(s[k], _mm512_loadu_ps(p + k * part + i));
  __m512 t = s[0];
  for (std::size_t k = 1; k < kReadStreams; ++k) t = _mm512_add_ps(t, s[k]);
  return _mm512_reduce_add_ps(t);
}

namespace {

float compute(std::size_t iterations, float seed) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(seed + static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  for (std::size_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

constexpr LimitLoops kLoops{&limits_read_sum_avx512, &compute, 12.0 * 16 * 2,
                            "f32 FMA, 16 lanes (AVX-512)"};

}  // namespace

const LimitLoops* limit_loops_avx512() {
  return &kLoops;
}

}  // namespace rkv::kernels
