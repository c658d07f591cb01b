// AVX-512 helpers shared by the per-ISA kernels. Include only from translation units compiled
// with AVX-512 flags (the *_avx512*.cpp files); everything is internal to each of them.
#pragma once

#include <immintrin.h>

#include <cstddef>

namespace rkv::kernels {
namespace {

// Lanes [0, min(16, n)).
inline __mmask16 tail_mask16(std::size_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : ((1u << n) - 1u));
}

// In-place transpose of a 16x16 matrix of 32-bit elements (r[i] = row i on entry, column i on
// exit). Always inlined: called out of line (as GCC chose in the decode attention's scores), the
// 16 rows go through memory on the way in and out.
__attribute__((always_inline)) inline void transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g + 0] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  // u[4g + c], 128-bit lane q, holds rows 4g..4g+3 of column 4q + c.
  for (int c = 0; c < 4; ++c) {
    const __m512i x02 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i y02 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i x13 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i y13 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
    r[c] = _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(2, 0, 2, 0));
    r[8 + c] = _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(3, 1, 3, 1));
    r[4 + c] = _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + c] = _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

}  // namespace
}  // namespace rkv::kernels
