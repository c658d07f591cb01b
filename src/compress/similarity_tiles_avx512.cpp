// AVX-512 similarity tile kernel (see similarity_tiles.h). CMake compiles files named
// *_avx512.cpp with AVX-512 flags; similarity_block_fn() picks this where kernels::active_isa()
// is AVX-512 (with or without BF16).
//
// The AVX2 kernel's arithmetic on 16 lanes: every cosine is the same chain of FMAs over c in the
// same order (one lane each), so the sums, and therefore the tallies, are the AVX2 kernel's bit
// for bit; a tile is kSimRows x 32 (two panels, 12 accumulators), where the AVX2 kernel's is
// kSimRows x 16 in 12 vectors of 8, so one instruction does twice the products.
#include "compress/similarity_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace rkv::compress {

namespace {

// The lanes of one tile row above the threshold, among the pairs that count: row < column < n.
inline __mmask16 above(__m512 s, __m512 threshold, __m512i cols, __m512i row, __m512i n) {
  const __mmask16 valid = _mm512_cmpgt_epi32_mask(cols, row) & _mm512_cmpgt_epi32_mask(n, cols);
  return _mm512_cmp_ps_mask(s, threshold, _CMP_GT_OQ) & valid;
}

// The tallies of one panel's 16 columns from j on (similarity_tiles_avx2.cpp's, on masks).
inline void tally_panel(const __m512 s[kSimRows], int j, int i0, const __m512i rows[kSimRows],
                        __m512 threshold, __m512i n, const SimilarityTally& t) {
  const __m512i cols =
      _mm512_add_epi32(_mm512_set1_epi32(j),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __mmask16 hit[kSimRows];
  __mmask16 any = 0;
  for (int r = 0; r < kSimRows; ++r) {
    hit[r] = above(s[r], threshold, cols, rows[r], n);
    any = static_cast<__mmask16>(any | hit[r]);
  }
  if (any == 0) return;  // the common case for unrelated keys
  // Column side: rows ascend, so each row's hits overwrite the earlier rows'.
  __m512i last = _mm512_loadu_si512(t.lower_last + j);
  __m512i count = _mm512_loadu_si512(t.lower_above + j);
  const __m512i one = _mm512_set1_epi32(1);
  for (int r = 0; r < kSimRows; ++r) {
    const unsigned bits = hit[r];
    if (bits == 0) continue;
    // Row side: columns ascend, so the highest hit of the newest panel is the largest.
    t.upper_last[i0 + r] = j + 31 - __builtin_clz(bits);
    t.upper_above[i0 + r] += __builtin_popcount(bits);
    last = _mm512_mask_mov_epi32(last, hit[r], rows[r]);
    count = _mm512_mask_add_epi32(count, hit[r], count, one);
  }
  _mm512_storeu_si512(t.lower_last + j, last);
  _mm512_storeu_si512(t.lower_above + j, count);
}

// The kSimRows x (16 * NP) tile of panels j .. in registers, then its tallies panel by panel.
template <int NP>
inline void tile(const float* a, const float* knt, int d, int j, int i0,
                 const __m512i rows[kSimRows], __m512 threshold, __m512i n,
                 const SimilarityTally& t) {
  __m512 s[NP][kSimRows];
  for (int p = 0; p < NP; ++p)
    for (int r = 0; r < kSimRows; ++r) s[p][r] = _mm512_setzero_ps();
  const float* b = knt + static_cast<std::size_t>(j) * d;  // panel j / 16; the next at + 16 d
  const std::size_t next = static_cast<std::size_t>(kSimCols) * d;
  for (int c = 0; c < d; ++c, b += kSimCols) {
    __m512 v[NP];
    for (int p = 0; p < NP; ++p) v[p] = _mm512_loadu_ps(b + p * next);
#pragma GCC unroll 8
    for (int r = 0; r < kSimRows; ++r) {
      const __m512 x = _mm512_set1_ps(a[static_cast<std::size_t>(r) * d + c]);
      for (int p = 0; p < NP; ++p) s[p][r] = _mm512_fmadd_ps(x, v[p], s[p][r]);
    }
  }
  for (int p = 0; p < NP; ++p) tally_panel(s[p], j + kSimCols * p, i0, rows, threshold, n, t);
}

}  // namespace

void similarity_block_avx512(const float* kn, const float* knt, int d, int cols_pad, int i0,
                             const SimilarityTally& t) {
  static_assert(kSimCols == 16, "a panel is one vector of 16 lanes");
  const float* a = kn + static_cast<std::size_t>(i0) * d;
  const __m512 threshold = _mm512_set1_ps(t.threshold);
  const __m512i n = _mm512_set1_epi32(t.n);
  __m512i rows[kSimRows];
  for (int r = 0; r < kSimRows; ++r) rows[r] = _mm512_set1_epi32(i0 + r);
  int j = (i0 + 1) / kSimCols * kSimCols;
  for (; j + 2 * kSimCols <= cols_pad; j += 2 * kSimCols)
    tile<2>(a, knt, d, j, i0, rows, threshold, n, t);
  if (j < cols_pad) tile<1>(a, knt, d, j, i0, rows, threshold, n, t);
}

}  // namespace rkv::compress
#endif
