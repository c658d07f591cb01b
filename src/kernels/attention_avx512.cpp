// The attention kernel for AVX-512 (flags from CMakeLists.txt).
//
// One query token's G heads against one KV head's cache (attention.h). Head sizes 64 and 128
// (nearly every model) take the blocked path below; other sizes take attention_impl.h's loops.
//
//  * scores: blocks of 16 keys are transposed (16x16 per 16 dimensions) into kt[d][16], so that
//    one FMA per dimension advances 16 scores of one head at once, with no horizontal sums. The
//    block is read from memory once and reused from L1 by every head of the group.
//  * softmax: float32, as everywhere, with vector max and sum.
//  * output: chunks of kPvChunk values, so that when the heads are taken in groups each group
//    after the first reads the chunk from L1; a group's accumulators (GB heads x d/16 vectors)
//    stay in registers over the chunk.

// GCC 12's _mm*_undefined_*() (used inside many intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_blocked.h"
#include "kernels/attention_impl.h"
#include "kernels/avx512_util.h"

namespace rkv::kernels {
namespace {

// The width-specific part of the blocked kernel (see attention_blocked.h).
struct Lanes16 {
  static constexpr int kLanes = 16;

  // 16 rows of D keys from `block` (row stride D), transposed: kt[k * 16 + i] = block[i][k].
  template <int D>
  static void transpose_block(const float* block, bool prefetch, float* kt) {
    for (int c = 0; c < D; c += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        if (prefetch) prefetch_ahead(block + i * D + c, kPrefetchRows * D * sizeof(float));
        r[i] = _mm512_castps_si512(_mm512_loadu_ps(block + i * D + c));
      }
      transpose16x16(r);
      for (int i = 0; i < 16; ++i) _mm512_store_si512(kt + (c + i) * 16, r[i]);
    }
  }

  // probs[g][j0, j0 + rows) = scale * q[g] . keys[j], for heads g0 .. g0 + GB.
  template <int D, int GB>
  static void scores_block(const float* q, int g0, const float* kt, int n, int j0, int rows,
                           float scale, float* probs) {
    __m512 acc[GB];
    for (int g = 0; g < GB; ++g) acc[g] = _mm512_setzero_ps();
    for (int k = 0; k < D; ++k) {
      const __m512 kv = _mm512_load_ps(kt + k * 16);
      for (int g = 0; g < GB; ++g)
        acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[(g0 + g) * D + k]), kv, acc[g]);
    }
    const __mmask16 m = tail_mask16(static_cast<std::size_t>(rows));
    const __m512 s = _mm512_set1_ps(scale);
    for (int g = 0; g < GB; ++g)
      _mm512_mask_storeu_ps(probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n) +
                                static_cast<std::size_t>(j0),
                            m, _mm512_mul_ps(acc[g], s));
  }
};

// softmax_rows of attention_impl.h with vector max and sum (its scalar sum does not vectorise:
// float addition is not reassociated without -ffast-math).
void softmax_rows_avx512(float* probs, int G, int n) {
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n);
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int j = 0; j < n; j += 16)
      m = _mm512_max_ps(
          m, _mm512_mask_loadu_ps(m, tail_mask16(static_cast<std::size_t>(n - j)), p + j));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    for (int j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask16(static_cast<std::size_t>(n - j));
      _mm512_mask_storeu_ps(p + j, k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), mx));
    }
    exp_inplace(p, n);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16)
      sum = _mm512_add_ps(
          sum, _mm512_maskz_loadu_ps(tail_mask16(static_cast<std::size_t>(n - j)), p + j));
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask16(static_cast<std::size_t>(n - j));
      _mm512_mask_storeu_ps(p + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv));
    }
  }
}

// out[g] += sum_{j in [j0, j1)} probs[g][j] * values[j], for heads g0 .. g0 + GB; NV = d / 16
// vectors per row.
template <int NV, int GB>
void output_chunk(const float* probs, int n, int g0, const float* values, int j0, int j1,
                  float* out) {
  constexpr int d = NV * 16;
  __m512 acc[GB][NV];
  const float* p[GB];
  for (int g = 0; g < GB; ++g) {
    for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_loadu_ps(out + (g0 + g) * d + c * 16);
    p[g] = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n);
  }
  for (int j = j0; j < j1; ++j) {
    const float* vj = values + static_cast<std::size_t>(j) * d;
    __m512 v[NV];
    for (int c = 0; c < NV; ++c) {
      prefetch_ahead(vj + c * 16, kPrefetchRows * d * sizeof(float));
      v[c] = _mm512_loadu_ps(vj + c * 16);
    }
    for (int g = 0; g < GB; ++g) {
      const __m512 pj = _mm512_set1_ps(p[g][j]);
      for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_fmadd_ps(pj, v[c], acc[g][c]);
    }
  }
  for (int g = 0; g < GB; ++g)
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(out + (g0 + g) * d + c * 16, acc[g][c]);
}

// output_chunk for gb <= GB heads.
template <int NV, int GB>
void output_group(int gb, const float* probs, int n, int g0, const float* values, int j0, int j1,
                  float* out) {
  if constexpr (GB > 1) {
    if (gb < GB) return output_group<NV, GB - 1>(gb, probs, n, g0, values, j0, j1, out);
  }
  output_chunk<NV, GB>(probs, n, g0, values, j0, j1, out);
}

// Heads in groups of GB: GB * NV accumulators and NV value vectors fit the 32 vector registers.
template <int NV>
void output(const float* probs, int G, int n, const float* values, float* out) {
  constexpr int GB = 16 / NV;
  for (int k = 0; k < G * NV * 16; ++k) out[k] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kPvChunk) {
    const int j1 = n - j0 < kPvChunk ? n : j0 + kPvChunk;
    for (int g0 = 0; g0 < G; g0 += GB)
      output_group<NV, GB>(G - g0 < GB ? G - g0 : GB, probs, n, g0, values, j0, j1, out);
  }
}

}  // namespace

void attention_avx512(const float* q, int G, int d, const float* keys, const float* values, int n,
                      float scale, float* out, float* probs) {
  if (d == 64) {
    scores<Lanes16, 64>(q, G, keys, n, scale, probs);
  } else if (d == 128) {
    scores<Lanes16, 128>(q, G, keys, n, scale, probs);
  } else {
    attention_impl(q, G, d, keys, values, n, scale, out, probs);
    return;
  }
  softmax_rows_avx512(probs, G, n);
  if (d == 64) {
    output<4>(probs, G, n, values, out);
  } else {
    output<8>(probs, G, n, values, out);
  }
}

void vec_exp_avx512(float* x, int n) {
  exp_inplace(x, n);
}

}  // namespace rkv::kernels
