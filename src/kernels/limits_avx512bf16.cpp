// AVX512-BF16 loops of the machine-limit measurements (limits.h): the compute limit of a bf16
// GEMM is vdpbf16ps, a dot product of two bf16 pairs into each of 16 f32 lanes (4 flops a lane).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>

#include "kernels/limits.h"

namespace rkv::kernels {

const LimitLoops* limit_loops_avx512bf16();
// The streaming read is AVX-512's (limits_avx512.cpp).
float limits_read_sum_avx512(const float* p, std::size_t n);

namespace {

float compute(std::size_t iterations, float seed) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(seed + static_cast<float>(j));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(seed));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  for (std::size_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

constexpr LimitLoops kLoops{&limits_read_sum_avx512, &compute, 12.0 * 16 * 4,
                            "bf16 dot products into f32, 16 lanes (AVX512-BF16)"};

}  // namespace

const LimitLoops* limit_loops_avx512bf16() {
  return &kLoops;
}

}  // namespace rkv::kernels
