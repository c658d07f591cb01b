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
//  * cache dtypes: every read of 16 keys or values goes through a Row loader that widens the
//    stored type to float32 in registers (f32: a load; bf16: zero-extend and shift left 16;
//    f16: vcvtph2ps; q8_0: sign-extend the int8 and multiply by the block's scale), so the
//    kernel streams the cache at its stored size and computes exactly as on float32.

// GCC 12's _mm*_undefined_*() (used inside many intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_blocked.h"
#include "kernels/attention_impl.h"
#include "kernels/avx512_util.h"
#include "kv/kv_codec.h"

namespace rkv::kernels {
namespace {

// Row loaders: 16 values k .. k + 15 (k a multiple of 16) of one cache row as float32, and the
// address of value k (for prefetches, every kPrefetchEvery loads of 16).
template <KvDtype T>
struct Row;

template <>
struct Row<KvDtype::f32> {
  static constexpr int kPrefetchEvery = 1;
  static const std::byte* at(const std::byte* row, int k) { return row + 4 * k; }
  static __m512 load16(const std::byte* row, int k) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
};

template <>
struct Row<KvDtype::bf16> {
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m512 load16(const std::byte* row, int k) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <>
struct Row<KvDtype::f16> {
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m512 load16(const std::byte* row, int k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
};

template <>
struct Row<KvDtype::q8_0> {
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) {
    return row + static_cast<std::size_t>(k / kQ8BlockValues) * kQ8BlockBytes + 2 +
           k % kQ8BlockValues;
  }
  static __m512 load16(const std::byte* row, int k) {
    const std::byte* block = row + static_cast<std::size_t>(k / kQ8BlockValues) * kQ8BlockBytes;
    std::uint16_t h;
    std::memcpy(&h, block, 2);
    const __m128i q =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + k % kQ8BlockValues));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(_cvtsh_ss(h)));
  }
};

// The width-specific part of the blocked kernel (see attention_blocked.h).
struct Lanes16 {
  static constexpr int kLanes = 16;

  // 16 rows of D keys from `block` (row stride row_bytes) as float32, transposed:
  // kt[k * 16 + i] = block[i][k]; rows from `rows` on are zeros unless Full.
  template <int D, class R, bool Full>
  static void transpose_block(const std::byte* block, std::size_t row_bytes, int rows, float* kt) {
    for (int c = 0; c < D; c += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const std::byte* row = block + static_cast<std::size_t>(i) * row_bytes;
        if constexpr (Full) {
          if ((c / 16) % R::kPrefetchEvery == 0)
            prefetch_ahead(R::at(row, c), kPrefetchRows * row_bytes);
          r[i] = _mm512_castps_si512(R::load16(row, c));
        } else {
          r[i] = i < rows ? _mm512_castps_si512(R::load16(row, c)) : _mm512_setzero_si512();
        }
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
template <class R, int NV, int GB>
void output_chunk(const float* probs, int n, int g0, const std::byte* values, std::size_t row_bytes,
                  int j0, int j1, float* out) {
  constexpr int d = NV * 16;
  __m512 acc[GB][NV];
  const float* p[GB];
  for (int g = 0; g < GB; ++g) {
    for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_loadu_ps(out + (g0 + g) * d + c * 16);
    p[g] = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n);
  }
  for (int j = j0; j < j1; ++j) {
    const std::byte* vj = values + static_cast<std::size_t>(j) * row_bytes;
    __m512 v[NV];
    for (int c = 0; c < NV; ++c) {
      if (c % R::kPrefetchEvery == 0) prefetch_ahead(R::at(vj, c * 16), kPrefetchRows * row_bytes);
      v[c] = R::load16(vj, c * 16);
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
template <class R, int NV, int GB>
void output_group(int gb, const float* probs, int n, int g0, const std::byte* values,
                  std::size_t row_bytes, int j0, int j1, float* out) {
  if constexpr (GB > 1) {
    if (gb < GB)
      return output_group<R, NV, GB - 1>(gb, probs, n, g0, values, row_bytes, j0, j1, out);
  }
  output_chunk<R, NV, GB>(probs, n, g0, values, row_bytes, j0, j1, out);
}

// Heads in groups of GB: GB * NV accumulators and NV value vectors fit the 32 vector registers.
template <class R, int NV>
void output(const float* probs, int G, int n, const std::byte* values, std::size_t row_bytes,
            float* out) {
  constexpr int GB = 16 / NV;
  for (int k = 0; k < G * NV * 16; ++k) out[k] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kPvChunk) {
    const int j1 = n - j0 < kPvChunk ? n : j0 + kPvChunk;
    for (int g0 = 0; g0 < G; g0 += GB)
      output_group<R, NV, GB>(G - g0 < GB ? G - g0 : GB, probs, n, g0, values, row_bytes, j0, j1,
                              out);
  }
}

// Cache rows of dtype T to float32, 16 values at a time (d a multiple of 16; else the portable
// conversion).
template <KvDtype T>
void decode_rows(const void* rows, std::size_t n, int d, float* out) {
  if (d % 16 != 0) {
    kv_decode_rows_reference(T, static_cast<const std::byte*>(rows), n, d, out);
    return;
  }
  const std::size_t row_bytes = kv_row_bytes(T, d);
  const auto* base = static_cast<const std::byte*>(rows);
  for (std::size_t j = 0; j < n; ++j)
    for (int k = 0; k < d; k += 16)
      _mm512_storeu_ps(out + j * static_cast<std::size_t>(d) + static_cast<std::size_t>(k),
                       Row<T>::load16(base + j * row_bytes, k));
}

void kv_decode_avx512(KvDtype dtype, const void* rows, std::size_t n, int d, float* out) {
  switch (dtype) {
    case KvDtype::f32:
      return decode_rows<KvDtype::f32>(rows, n, d, out);
    case KvDtype::bf16:
      return decode_rows<KvDtype::bf16>(rows, n, d, out);
    case KvDtype::f16:
      return decode_rows<KvDtype::f16>(rows, n, d, out);
    case KvDtype::q8_0:
      return decode_rows<KvDtype::q8_0>(rows, n, d, out);
  }
}

template <KvDtype T>
void attention_typed(const float* q, int G, int d, const void* keys_v, const void* values_v, int n,
                     float scale, float* out, float* probs) {
  const auto* keys = static_cast<const std::byte*>(keys_v);
  const auto* values = static_cast<const std::byte*>(values_v);
  if (d != 64 && d != 128) {
    if constexpr (T == KvDtype::f32) {
      attention_impl(q, G, d, static_cast<const float*>(keys_v),
                     static_cast<const float*>(values_v), n, scale, out, probs);
    } else {
      attention_decoded(&kv_decode_avx512, T, q, G, d, keys_v, values_v, n, scale, out, probs);
    }
    return;
  }
  const std::size_t row_bytes = kv_row_bytes(T, d);
  if (d == 64) {
    scores<Lanes16, Row<T>, 64>(q, G, keys, row_bytes, n, scale, probs);
  } else {
    scores<Lanes16, Row<T>, 128>(q, G, keys, row_bytes, n, scale, probs);
  }
  softmax_rows_avx512(probs, G, n);
  if (d == 64) {
    output<Row<T>, 4>(probs, G, n, values, row_bytes, out);
  } else {
    output<Row<T>, 8>(probs, G, n, values, row_bytes, out);
  }
}

// f32 rows of the widened-values scratch: in L1 already, prefetched once a row, not per vector.
struct ScratchRow : Row<KvDtype::f32> {
  static constexpr int kPrefetchEvery = 1 << 20;
};

// AttentionRowsFn (attention.h) for head size D: what attention_typed computes for each row, in
// the same order, bit for bit, with the work that does not depend on the row done once: each
// block of 16 keys is transposed once for every row that sees it (a row's lanes past its own
// keys are masked, as the zero lanes of attention_typed's last block are), and each chunk of
// kPvChunk values is widened to float32 once into vf, which output_chunk then reads as f32 rows
// (exact values either way).
template <KvDtype T, int D>
void attention_rows_blocked(const float* q, std::size_t q_stride, int R, int G,
                            const std::byte* keys, const std::byte* values, int n0, float scale,
                            float* out, std::size_t out_stride, float* probs) {
  constexpr int L = Lanes16::kLanes, NV = D / 16, GB = 16 / NV;
  const std::size_t row_bytes = kv_row_bytes(T, D);
  const int n_last = n0 + R - 1;
  const std::size_t pstride = static_cast<std::size_t>(G) * static_cast<std::size_t>(n_last);
  alignas(64) float kt[D * L];
  for (int j0 = 0; j0 < n_last; j0 += L) {
    const int rows = n_last - j0 < L ? n_last - j0 : L;
    const std::byte* block = keys + static_cast<std::size_t>(j0) * row_bytes;
    if (rows == L) {
      Lanes16::transpose_block<D, Row<T>, true>(block, row_bytes, rows, kt);
    } else {
      Lanes16::transpose_block<D, Row<T>, false>(block, row_bytes, rows, kt);
    }
    for (int i = 0; i < R; ++i) {
      const int n = n0 + i;
      if (n <= j0) continue;
      const int ri = n - j0 < L ? n - j0 : L;
      for (int g0 = 0; g0 < G; g0 += kGroup)
        scores_group<Lanes16, D, kGroup>(G - g0 < kGroup ? G - g0 : kGroup,
                                         q + static_cast<std::size_t>(i) * q_stride, g0, kt, n, j0,
                                         ri, scale, probs + static_cast<std::size_t>(i) * pstride);
    }
  }
  for (int i = 0; i < R; ++i) {
    softmax_rows_avx512(probs + static_cast<std::size_t>(i) * pstride, G, n0 + i);
    float* o = out + static_cast<std::size_t>(i) * out_stride;
    for (int k = 0; k < G * D; ++k) o[k] = 0.0f;
  }
  alignas(64) float vf[kPvChunk * D];
  const auto* vrows = reinterpret_cast<const std::byte*>(vf);
  constexpr std::size_t vf_row_bytes = D * sizeof(float);
  for (int j0 = 0; j0 < n_last; j0 += kPvChunk) {
    const int j1 = n_last - j0 < kPvChunk ? n_last : j0 + kPvChunk;
    for (int j = j0; j < j1; ++j)
      for (int c = 0; c < D; c += 16)
        _mm512_store_ps(vf + (j - j0) * D + c,
                        Row<T>::load16(values + static_cast<std::size_t>(j) * row_bytes, c));
    for (int i = 0; i < R; ++i) {
      const int n = n0 + i;
      if (n <= j0) continue;
      // Row i's probabilities from key j0 on, so that vf's row 0 is key j0.
      const float* p = probs + static_cast<std::size_t>(i) * pstride + j0;
      float* o = out + static_cast<std::size_t>(i) * out_stride;
      const int len = (n < j1 ? n : j1) - j0;
      for (int g0 = 0; g0 < G; g0 += GB)
        output_group<ScratchRow, NV, GB>(G - g0 < GB ? G - g0 : GB, p, n, g0, vrows, vf_row_bytes,
                                         0, len, o);
    }
  }
}

template <KvDtype T>
void attention_rows_typed(const float* q, std::size_t q_stride, int R, int G, int d,
                          const void* keys, const void* values, int n0, float scale, float* out,
                          std::size_t out_stride, float* probs) {
  if (R > 1 && d == 64) {
    attention_rows_blocked<T, 64>(q, q_stride, R, G, static_cast<const std::byte*>(keys),
                                  static_cast<const std::byte*>(values), n0, scale, out, out_stride,
                                  probs);
  } else if (R > 1 && d == 128) {
    attention_rows_blocked<T, 128>(q, q_stride, R, G, static_cast<const std::byte*>(keys),
                                   static_cast<const std::byte*>(values), n0, scale, out,
                                   out_stride, probs);
  } else {
    for (int i = 0; i < R; ++i)
      attention_typed<T>(q + static_cast<std::size_t>(i) * q_stride, G, d, keys, values, n0 + i,
                         scale, out + static_cast<std::size_t>(i) * out_stride, probs);
  }
}

}  // namespace

AttentionRowsFn attention_rows_avx512_for(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return &attention_rows_typed<KvDtype::f32>;
    case KvDtype::bf16:
      return &attention_rows_typed<KvDtype::bf16>;
    case KvDtype::f16:
      return &attention_rows_typed<KvDtype::f16>;
    case KvDtype::q8_0:
      return &attention_rows_typed<KvDtype::q8_0>;
  }
  return &attention_rows_typed<KvDtype::f32>;
}

AttentionFn attention_avx512_for(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return &attention_typed<KvDtype::f32>;
    case KvDtype::bf16:
      return &attention_typed<KvDtype::bf16>;
    case KvDtype::f16:
      return &attention_typed<KvDtype::f16>;
    case KvDtype::q8_0:
      return &attention_typed<KvDtype::q8_0>;
  }
  return &attention_typed<KvDtype::f32>;
}

KvDecodeFn kv_decode_avx512_fn() {
  return &kv_decode_avx512;
}

void vec_exp_avx512(float* x, int n) {
  exp_inplace(x, n);
}

}  // namespace rkv::kernels
