// The attention kernel for AVX2 (flags from CMakeLists.txt): attention_avx512.cpp's blocked
// kernel in 8 lanes and 16 vector registers.
//
// One query token's G heads against one KV head's cache (attention.h). Head sizes 64 and 128
// take the blocked path; other sizes take attention_impl.h's loops.
//
//  * scores: blocks of 8 keys are transposed (8x8 per 8 dimensions) into kt[d][8], so that one
//    FMA per dimension advances 8 scores of one head, with no horizontal sums; the block is read
//    from memory once and reused from L1 by every head.
//  * softmax: float32 with vector max and sum.
//  * output: one head and 64 dimensions at a time (8 accumulators), over chunks of kPvChunk
//    values, so that every pass after the first over a chunk reads it from L1.

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_blocked.h"
#include "kernels/attention_impl.h"
#include "kernels/avx2_util.h"

namespace rkv::kernels {
namespace {

// The width-specific part of the blocked kernel (see attention_blocked.h).
struct Lanes8 {
  static constexpr int kLanes = 8;

  // 8 rows of D keys from `block` (row stride D), transposed: kt[k * 8 + i] = block[i][k].
  template <int D>
  static void transpose_block(const float* block, bool prefetch, float* kt) {
    for (int c = 0; c < D; c += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        if (prefetch && c % 16 == 0)
          prefetch_ahead(block + i * D + c, kPrefetchRows * D * sizeof(float));
        r[i] = _mm256_loadu_ps(block + i * D + c);
      }
      transpose8x8(r);
      for (int i = 0; i < 8; ++i) _mm256_store_ps(kt + (c + i) * 8, r[i]);
    }
  }

  // probs[g][j0, j0 + rows) = scale * q[g] . keys[j], for heads g0 .. g0 + GB.
  template <int D, int GB>
  static void scores_block(const float* q, int g0, const float* kt, int n, int j0, int rows,
                           float scale, float* probs) {
    __m256 acc[GB];
    for (int g = 0; g < GB; ++g) acc[g] = _mm256_setzero_ps();
    for (int k = 0; k < D; ++k) {
      const __m256 kv = _mm256_load_ps(kt + k * 8);
      for (int g = 0; g < GB; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + (g0 + g) * D + k), kv, acc[g]);
    }
    const __m256 s = _mm256_set1_ps(scale);
    for (int g = 0; g < GB; ++g) {
      float* dst = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n) +
                   static_cast<std::size_t>(j0);
      const __m256 v = _mm256_mul_ps(acc[g], s);
      if (rows == 8) {
        _mm256_storeu_ps(dst, v);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        for (int i = 0; i < rows; ++i) dst[i] = tmp[i];
      }
    }
  }
};

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// softmax_rows of attention_impl.h with vector max and sum over full groups of 8 (its scalar
// sum does not vectorise without -ffast-math); the last n % 8 entries are scalar.
void softmax_rows_avx2(float* probs, int G, int n) {
  const int n8 = n / 8 * 8;
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n);
    __m256 m8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int j = 0; j < n8; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(p + j));
    float m = hmax8(m8);
    for (int j = n8; j < n; ++j) m = p[j] > m ? p[j] : m;
    const __m256 mx = _mm256_set1_ps(m);
    for (int j = 0; j < n8; j += 8)
      _mm256_storeu_ps(p + j, _mm256_sub_ps(_mm256_loadu_ps(p + j), mx));
    for (int j = n8; j < n; ++j) p[j] -= m;
    exp_inplace(p, n);
    __m256 s8 = _mm256_setzero_ps();
    for (int j = 0; j < n8; j += 8) s8 = _mm256_add_ps(s8, _mm256_loadu_ps(p + j));
    float sum = hsum8(s8);
    for (int j = n8; j < n; ++j) sum += p[j];
    const float inv = 1.0f / sum;
    const __m256 inv8 = _mm256_set1_ps(inv);
    for (int j = 0; j < n8; j += 8)
      _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), inv8));
    for (int j = n8; j < n; ++j) p[j] *= inv;
  }
}

// out[g][c0, c0 + 64) += sum_{j in [j0, j1)} probs[g][j] * values[j][c0, c0 + 64), row stride d;
// `prefetch` on the first pass over the chunk.
void output_chunk(const float* p, const float* values, int d, int c0, int j0, int j1, bool prefetch,
                  float* o) {
  __m256 acc[8];
  for (int c = 0; c < 8; ++c) acc[c] = _mm256_loadu_ps(o + c0 + c * 8);
  for (int j = j0; j < j1; ++j) {
    const float* vj = values + static_cast<std::size_t>(j) * static_cast<std::size_t>(d) + c0;
    if (prefetch)
      for (int c = 0; c < 8; c += 2)
        prefetch_ahead(vj + c * 8, kPrefetchRows * static_cast<std::size_t>(d) * sizeof(float));
    const __m256 pj = _mm256_broadcast_ss(p + j);
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + c * 8), acc[c]);
  }
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(o + c0 + c * 8, acc[c]);
}

void output(const float* probs, int G, int d, int n, const float* values, float* out) {
  for (int k = 0; k < G * d; ++k) out[k] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kPvChunk) {
    const int j1 = n - j0 < kPvChunk ? n : j0 + kPvChunk;
    for (int g = 0; g < G; ++g)
      for (int c0 = 0; c0 < d; c0 += 64)
        output_chunk(probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n), values, d,
                     c0, j0, j1, g == 0, out + g * d);
  }
}

}  // namespace

void attention_avx2(const float* q, int G, int d, const float* keys, const float* values, int n,
                    float scale, float* out, float* probs) {
  if (d == 64) {
    scores<Lanes8, 64>(q, G, keys, n, scale, probs);
  } else if (d == 128) {
    scores<Lanes8, 128>(q, G, keys, n, scale, probs);
  } else {
    attention_impl(q, G, d, keys, values, n, scale, out, probs);
    return;
  }
  softmax_rows_avx2(probs, G, n);
  output(probs, G, d, n, values, out);
}

void vec_exp_avx2(float* x, int n) {
  exp_inplace(x, n);
}

}  // namespace rkv::kernels
