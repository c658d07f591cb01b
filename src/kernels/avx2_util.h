// AVX2 helpers shared by the per-ISA kernels. Include only from translation units compiled with
// AVX2 flags (the *_avx2.cpp files, and the AVX-512 ones, which have them too); everything is
// internal to each of them.
#pragma once

#include <immintrin.h>

namespace rkv::kernels {
namespace {

// In-place transpose of an 8x8 matrix of floats.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {
    u[g + 0] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // u[4g + c], 128-bit lane q, holds rows 4g..4g+3 of column 4q + c.
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

}  // namespace
}  // namespace rkv::kernels
