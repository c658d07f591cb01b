// AVX2 + FMA similarity tile kernel (see similarity_tiles.h). CMake compiles files named
// *_avx2.cpp with -mavx2 -mfma -mf16c; similarity_rows_fn() picks this wherever
// kernels::active_isa() is above the reference.
#include "compress/similarity_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace rkv::compress {

void similarity_rows_avx2(const float* kn, const float* knt, int d, int cols_pad, int i0, int j0,
                          float* out) {
  const float* a0 = kn + static_cast<std::size_t>(i0) * d;
  const float* a1 = a0 + d;
  const float* a2 = a1 + d;
  const float* a3 = a2 + d;
  const std::size_t ld = static_cast<std::size_t>(cols_pad);
  // A 4 x 16 register tile: eight accumulators, two column vectors loaded per step of c.
  for (int j = j0; j < cols_pad; j += 16) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    const float* b = knt + j;
    for (int c = 0; c < d; ++c, b += ld) {
      const __m256 v0 = _mm256_loadu_ps(b);
      const __m256 v1 = _mm256_loadu_ps(b + 8);
      __m256 x = _mm256_broadcast_ss(a0 + c);
      c00 = _mm256_fmadd_ps(x, v0, c00);
      c01 = _mm256_fmadd_ps(x, v1, c01);
      x = _mm256_broadcast_ss(a1 + c);
      c10 = _mm256_fmadd_ps(x, v0, c10);
      c11 = _mm256_fmadd_ps(x, v1, c11);
      x = _mm256_broadcast_ss(a2 + c);
      c20 = _mm256_fmadd_ps(x, v0, c20);
      c21 = _mm256_fmadd_ps(x, v1, c21);
      x = _mm256_broadcast_ss(a3 + c);
      c30 = _mm256_fmadd_ps(x, v0, c30);
      c31 = _mm256_fmadd_ps(x, v1, c31);
    }
    _mm256_storeu_ps(out + j, c00);
    _mm256_storeu_ps(out + j + 8, c01);
    _mm256_storeu_ps(out + ld + j, c10);
    _mm256_storeu_ps(out + ld + j + 8, c11);
    _mm256_storeu_ps(out + 2 * ld + j, c20);
    _mm256_storeu_ps(out + 2 * ld + j + 8, c21);
    _mm256_storeu_ps(out + 3 * ld + j, c30);
    _mm256_storeu_ps(out + 3 * ld + j + 8, c31);
  }
}

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
  const float* a0 = kn + static_cast<std::size_t>(i0) * d;
  const float* a1 = a0 + d;
  const float* a2 = a1 + d;
  const float* a3 = a2 + d;
  const std::size_t ld = static_cast<std::size_t>(cols_pad);
  const __m256 threshold = _mm256_set1_ps(t.threshold);
  const __m256i n = _mm256_set1_epi32(t.n);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i rows[kSimRows] = {_mm256_set1_epi32(i0), _mm256_set1_epi32(i0 + 1),
                                  _mm256_set1_epi32(i0 + 2), _mm256_set1_epi32(i0 + 3)};
  for (int j = (i0 + 1) / kSimCols * kSimCols; j < cols_pad; j += 16) {
    // The 4 x 16 tile, as similarity_rows_avx2 computes it.
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    const float* b = knt + j;
    for (int c = 0; c < d; ++c, b += ld) {
      const __m256 v0 = _mm256_loadu_ps(b);
      const __m256 v1 = _mm256_loadu_ps(b + 8);
      __m256 x = _mm256_broadcast_ss(a0 + c);
      c00 = _mm256_fmadd_ps(x, v0, c00);
      c01 = _mm256_fmadd_ps(x, v1, c01);
      x = _mm256_broadcast_ss(a1 + c);
      c10 = _mm256_fmadd_ps(x, v0, c10);
      c11 = _mm256_fmadd_ps(x, v1, c11);
      x = _mm256_broadcast_ss(a2 + c);
      c20 = _mm256_fmadd_ps(x, v0, c20);
      c21 = _mm256_fmadd_ps(x, v1, c21);
      x = _mm256_broadcast_ss(a3 + c);
      c30 = _mm256_fmadd_ps(x, v0, c30);
      c31 = _mm256_fmadd_ps(x, v1, c31);
    }
    const __m256i cols0 = _mm256_add_epi32(_mm256_set1_epi32(j), iota);
    const __m256i cols1 = _mm256_add_epi32(cols0, _mm256_set1_epi32(8));
    const __m256 s[kSimRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
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
    __m256 cosine[2] = {_mm256_loadu_ps(t.lower_cos + j), _mm256_loadu_ps(t.lower_cos + j + 8)};
    for (int r = 0; r < kSimRows; ++r) {
      const unsigned bits = static_cast<unsigned>(_mm256_movemask_ps(hit[r][0])) |
                            static_cast<unsigned>(_mm256_movemask_ps(hit[r][1])) << 8;
      if (bits == 0) continue;
      const int i = i0 + r;
      // Row side: columns ascend, so the highest hit of the newest tile is the largest.
      const int top = 31 - __builtin_clz(bits);
      alignas(32) float lanes[16];
      _mm256_store_ps(lanes, s[r][0]);
      _mm256_store_ps(lanes + 8, s[r][1]);
      t.upper_last[i] = j + top;
      t.upper_cos[i] = lanes[top];
      t.upper_above[i] += __builtin_popcount(bits);
      for (int h = 0; h < 2; ++h) {
        const __m256i mask = _mm256_castps_si256(hit[r][h]);
        last[h] = _mm256_blendv_epi8(last[h], rows[r], mask);
        cosine[h] = _mm256_blendv_ps(cosine[h], s[r][h], hit[r][h]);
        count[h] = _mm256_sub_epi32(count[h], mask);  // a hit's mask is -1
      }
    }
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_si256(lower_last + h, last[h]);
      _mm256_storeu_si256(lower_above + h, count[h]);
      _mm256_storeu_ps(t.lower_cos + j + 8 * h, cosine[h]);
    }
  }
}

}  // namespace rkv::compress
#endif
