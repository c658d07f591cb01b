// AVX2 + FMA similarity tile kernel (see similarity_tiles.h). CMake compiles files named
// *_avx2.cpp with -mavx2 -mfma -mf16c; similarity_block_fn() picks this wherever
// kernels::active_isa() is above the reference.
#include "compress/similarity_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace rkv::compress {

namespace {

// One tile row's eight lanes above the threshold, among the pairs that count: row < column < n.
inline __m256 above(__m256 s, __m256 threshold, __m256i cols, __m256i row, __m256i n) {
  const __m256i valid =
      _mm256_and_si256(_mm256_cmpgt_epi32(cols, row), _mm256_cmpgt_epi32(n, cols));
  return _mm256_and_ps(_mm256_cmp_ps(s, threshold, _CMP_GT_OQ), _mm256_castsi256_ps(valid));
}

}  // namespace

void similarity_block_avx2(const float* kn, const float* knt, int d, int cols_pad, int i0,
                           const SimilarityTally& t) {
  const float* a = kn + static_cast<std::size_t>(i0) * d;
  const __m256 threshold = _mm256_set1_ps(t.threshold);
  const __m256i n = _mm256_set1_epi32(t.n);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i rows[kSimRows];
  for (int r = 0; r < kSimRows; ++r) rows[r] = _mm256_set1_epi32(i0 + r);
  for (int j = (i0 + 1) / kSimCols * kSimCols; j < cols_pad; j += 16) {
    // The kSimRows x 16 tile in registers, the panel's two vectors loaded per step of c.
    __m256 s[kSimRows][2];
#pragma GCC unroll 8
    for (int r = 0; r < kSimRows; ++r) s[r][0] = s[r][1] = _mm256_setzero_ps();
    const float* b = knt + static_cast<std::size_t>(j) * d;  // panel j / 16
    for (int c = 0; c < d; ++c, b += kSimCols) {
      const __m256 v0 = _mm256_loadu_ps(b);
      const __m256 v1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
      for (int r = 0; r < kSimRows; ++r) {
        const __m256 x = _mm256_broadcast_ss(a + static_cast<std::size_t>(r) * d + c);
        s[r][0] = _mm256_fmadd_ps(x, v0, s[r][0]);
        s[r][1] = _mm256_fmadd_ps(x, v1, s[r][1]);
      }
    }
    const __m256i cols0 = _mm256_add_epi32(_mm256_set1_epi32(j), iota);
    const __m256i cols1 = _mm256_add_epi32(cols0, _mm256_set1_epi32(8));
    __m256 hit[kSimRows][2];
    __m256 any = _mm256_setzero_ps();
    for (int r = 0; r < kSimRows; ++r) {
      hit[r][0] = above(s[r][0], threshold, cols0, rows[r], n);
      hit[r][1] = above(s[r][1], threshold, cols1, rows[r], n);
      any = _mm256_or_ps(any, _mm256_or_ps(hit[r][0], hit[r][1]));
    }
    if (_mm256_testz_ps(any, any)) continue;  // the common case for unrelated keys

    // Column side: rows ascend, so each row's hits overwrite the earlier rows'.
    auto* lower_last = reinterpret_cast<__m256i*>(t.lower_last + j);
    auto* lower_above = reinterpret_cast<__m256i*>(t.lower_above + j);
    __m256i last[2] = {_mm256_loadu_si256(lower_last), _mm256_loadu_si256(lower_last + 1)};
    __m256i count[2] = {_mm256_loadu_si256(lower_above), _mm256_loadu_si256(lower_above + 1)};
    for (int r = 0; r < kSimRows; ++r) {
      const unsigned bits = static_cast<unsigned>(_mm256_movemask_ps(hit[r][0])) |
                            static_cast<unsigned>(_mm256_movemask_ps(hit[r][1])) << 8;
      if (bits == 0) continue;
      // Row side: columns ascend, so the highest hit of the newest tile is the largest.
      t.upper_last[i0 + r] = j + 31 - __builtin_clz(bits);
      t.upper_above[i0 + r] += __builtin_popcount(bits);
      for (int h = 0; h < 2; ++h) {
        const __m256i mask = _mm256_castps_si256(hit[r][h]);
        last[h] = _mm256_blendv_epi8(last[h], rows[r], mask);
        count[h] = _mm256_sub_epi32(count[h], mask);  // a hit's mask is -1
      }
    }
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_si256(lower_last + h, last[h]);
      _mm256_storeu_si256(lower_above + h, count[h]);
    }
  }
}

}  // namespace rkv::compress
#endif
