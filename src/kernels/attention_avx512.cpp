// The attention kernel for AVX-512 (flags from CMakeLists.txt).
//
// One query token's G heads against one KV head's cache (attention.h). Head sizes 64 and 128
// (nearly every model) take the blocked path below; other sizes take attention_impl.h's loops.
//
//  * scores: blocks of 32 keys are transposed (16x16 per 16 dimensions, twice) into kt[d][32], so
//    that two FMAs per dimension advance 32 scores of one head at once, with no horizontal sums.
//    The block is read from memory once and reused from L1 by every head of the group. bf16 keys
//    are transposed as they are stored, a pair of values per dword, and widened after. Decode
//    (one query row, up to 8 heads) keeps each transposed 16 keys in registers instead and feeds
//    them straight to the heads' sums (scores_direct): the same FMAs in the same order.
//  * softmax: float32, as everywhere, with vector max and sum, exp fused into the pass that sums.
//  * output: chunks of kPvChunk values, 64 values of each row at a time for up to six heads
//    (24 accumulators in registers); when there are more heads, each group after the first reads
//    the chunk from L1. bf16 values are split into even and odd lanes instead of widened in
//    order, and the sums put back in order at the end.
//  * cache dtypes: reads go through a Row loader that widens the stored type to float32 in
//    registers (f32: a load; bf16: zero-extend and shift left 16, or 32 values at a time split
//    into the two values of each pair, split_bf16_pairs; f16: vcvtph2ps; q8_0: sign-extend the
//    int8 and multiply by the block's scale), so the kernel streams the cache at its stored size
//    and computes exactly as on float32.
//  * prefetches: keys and values kPrefetchRows rows ahead, into L2 (prefetch_l2_ahead), which
//    read the cache faster than prefetches into L1 (docs/PERFORMANCE.md).

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

// 32 bf16 values as loaded (16 dwords, a pair each) split into float32: the first value of each
// pair (the low half, shifted up) in `even`, the second (the high half, masked) in `odd`.
inline void split_bf16_pairs(__m512i a, __m512i& even, __m512i& odd) {
  even = _mm512_slli_epi32(a, 16);
  odd = _mm512_and_si512(a, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
}

// Row loaders: 16 values k .. k + 15 (k a multiple of 16) of one cache row as float32, and the
// address of value k (for prefetches, every kPrefetchEvery loads of 16).
template <KvDtype T>
struct Row;

template <>
struct Row<KvDtype::f32> {
  static constexpr bool kPairs = false;  // bf16 only: rows read as dword pairs (load_transposed16)
  static constexpr int kPrefetchEvery = 1;
  static const std::byte* at(const std::byte* row, int k) { return row + 4 * k; }
  static __m512 load16(const std::byte* row, int k) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
};

template <>
struct Row<KvDtype::bf16> {
  static constexpr bool kPairs = true;
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m512 load16(const std::byte* row, int k) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <>
struct Row<KvDtype::f16> {
  static constexpr bool kPairs = false;
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m512 load16(const std::byte* row, int k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
};

template <>
struct Row<KvDtype::q8_0> {
  static constexpr bool kPairs = false;
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

// Keys [0, 16) of a block (row stride row_bytes; rows from `rows` on read as zeros unless Full),
// dimensions c .. c + 15 (bf16: c .. c + 31, as stored pairs), loaded and transposed: r[i] holds
// dimension c + i of the 16 keys (bf16: the pair c + 2i, c + 2i + 1, one dword a key).
// Half the loads and transposes of widening bf16 first.
template <class R, bool Full>
inline void load_transposed16(const std::byte* block, std::size_t row_bytes, int rows, int c,
                              __m512i r[16]) {
  for (int i = 0; i < 16; ++i) {
    const std::byte* row = block + static_cast<std::size_t>(i) * row_bytes;
    if constexpr (Full) {
      if (R::kPairs || (c / 16) % R::kPrefetchEvery == 0)
        prefetch_l2_ahead(R::at(row, c), kPrefetchRows * row_bytes);
    } else if (i >= rows) {
      r[i] = _mm512_setzero_si512();
      continue;
    }
    if constexpr (R::kPairs) {
      r[i] = _mm512_loadu_si512(R::at(row, c));
    } else {
      r[i] = _mm512_castps_si512(R::load16(row, c));
    }
  }
  transpose16x16(r);
}

// The order in which each 16 x 16 transpose hands out its 16 outputs as decode's scores take them
// (scores16_direct: the last stage of transpose16x16 produces 0, 8, 4, 12, then 1, 9, 5, 13, ...),
// and in which Keys32T::scores_block takes the same dimensions, so that both sum each score in one
// order: the same bits.
constexpr int kTransposeOrder[16] = {0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15};

// Up to this many heads, the scores on bf16 pairs keep two sums a head, the even dimensions
// and the odd ones, added at the end (decode's scores16_direct and the blocked scores_block
// alike, so the same bits): six heads' single sums in decode are six chains of FMAs, fewer than
// the FMA latency needs to keep both units busy.
constexpr int kSplitSumHeads = 6;
// Whether GB heads' scores on bf16 pairs (Pairs) keep the two sums: the one rule both kernels take.
template <bool Pairs, int GB>
constexpr bool kSplitSums = (Pairs && GB <= kSplitSumHeads);

// The width-specific part of the blocked kernel (see attention_blocked.h). A block is 32 keys,
// two vectors: each step of the scores then broadcasts a query value once for two FMAs, and a
// group of heads keeps twice as many independent sums (8 heads: 16) as the FMA latency needs.
// Pairs: the cache's rows are read as bf16 pairs (Row::kPairs), 32 dimensions a transpose.
template <bool Pairs>
struct Keys32T {
  static constexpr int kLanes = 32;

  // 32 rows of D keys from `block` (row stride row_bytes) as float32, transposed:
  // kt[k * 32 + i] = block[i][k]; rows from `rows` on are zeros unless Full.
  template <int D, class R, bool Full>
  static void transpose_block(const std::byte* block, std::size_t row_bytes, int rows, float* kt) {
    for (int h = 0; h < 2; ++h) {
      const std::byte* half = block + static_cast<std::size_t>(16 * h) * row_bytes;
      const int left = rows - 16 * h;
      if (Full || left >= 16) {
        transpose16<D, R, true>(half, row_bytes, 16, kt + 16 * h);
      } else {
        transpose16<D, R, false>(half, row_bytes, left > 0 ? left : 0, kt + 16 * h);
      }
    }
  }

  // 16 of those rows into lanes kt[k * 32 + 0 .. 15] (kt offset by the half). bf16 pairs are
  // split after the transpose: the low halves (shifted left 16) are value c + 2p of the 16 rows,
  // the high halves (masked) value c + 2p + 1.
  template <int D, class R, bool Full>
  static void transpose16(const std::byte* block, std::size_t row_bytes, int rows, float* kt) {
    static_assert(!R::kPairs || D % 32 == 0);
    for (int c = 0; c < D; c += R::kPairs ? 32 : 16) {
      __m512i r[16];
      load_transposed16<R, Full>(block, row_bytes, rows, c, r);
      for (int p = 0; p < 16; ++p) {
        if constexpr (R::kPairs) {
          __m512i even, odd;
          split_bf16_pairs(r[p], even, odd);
          _mm512_store_si512(kt + (c + 2 * p) * kLanes, even);
          _mm512_store_si512(kt + (c + 2 * p + 1) * kLanes, odd);
        } else {
          _mm512_store_si512(kt + (c + p) * kLanes, r[p]);
        }
      }
    }
  }

  // probs[g][j0, j0 + rows) = scale * q[g] . keys[j], for heads g0 .. g0 + GB.
  template <int D, int GB>
  static void scores_block(const float* q, int g0, const float* kt, int n, int j0, int rows,
                           float scale, float* probs) {
    // Split: the odd dimensions' sums apart (acc[GB + g]), as decode's scores16_direct keeps them.
    constexpr bool kSplit = kSplitSums<Pairs, GB>;
    __m512 acc[kSplit ? 2 * GB : GB][2];
    for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
    constexpr int kStep = Pairs ? 32 : 16, kPer = Pairs ? 2 : 1;
    for (int c = 0; c < D; c += kStep)
      for (int i = 0; i < 16; ++i)
        for (int e = 0; e < kPer; ++e) {
          const int k = c + kPer * kTransposeOrder[i] + e;
          const int a0 = kSplit && e == 1 ? GB : 0;
          const __m512 k0 = _mm512_load_ps(kt + k * kLanes);
          const __m512 k1 = _mm512_load_ps(kt + k * kLanes + 16);
          for (int g = 0; g < GB; ++g) {
            const __m512 qk = _mm512_set1_ps(q[(g0 + g) * D + k]);
            acc[a0 + g][0] = _mm512_fmadd_ps(qk, k0, acc[a0 + g][0]);
            acc[a0 + g][1] = _mm512_fmadd_ps(qk, k1, acc[a0 + g][1]);
          }
        }
    if constexpr (kSplit)
      for (int g = 0; g < GB; ++g)
        for (int h = 0; h < 2; ++h) acc[g][h] = _mm512_add_ps(acc[g][h], acc[GB + g][h]);
    const __mmask16 m0 = tail_mask16(static_cast<std::size_t>(rows));
    const __mmask16 m1 = tail_mask16(static_cast<std::size_t>(rows > 16 ? rows - 16 : 0));
    const __m512 s = _mm512_set1_ps(scale);
    for (int g = 0; g < GB; ++g) {
      float* p = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n) +
                 static_cast<std::size_t>(j0);
      _mm512_mask_storeu_ps(p, m0, _mm512_mul_ps(acc[g][0], s));
      _mm512_mask_storeu_ps(p + 16, m1, _mm512_mul_ps(acc[g][1], s));
    }
  }
};

// Decode's scores (one query row) for GB <= kDirectHeads heads, without the transposed block in
// memory: 16 keys at a time are loaded (all 16 rows first) and transposed in registers, and each
// output of the transpose's last stage goes straight into the GB sums as it is made, in
// kTransposeOrder, where the blocked kernel stores the transposed block and reads it back. Each
// score is the same FMAs in the same order as Keys32T::scores_block, so the same bits. Against
// the transpose stored and read back (load_transposed16, out of line), `rkv_bench
// Attention/.../avx512/bf16` on Zen 4: +9-16% with the cache cycled through 256 MiB, 0-4% in
// L2 (docs/PERFORMANCE-LOG.md).
constexpr int kDirectHeads = 8;  // 8 sums, the 16 rows and 3 temporaries fit the 32 registers

// One output of the transpose (dimension pair p of the 16 keys, or dimension p) into the GB sums
// (acc[GB + g]: head g's odd dimensions when split).
template <int D, class R, int GB, bool Split>
__attribute__((always_inline)) inline void scores_fma(const float* q, int c, int p, __m512i r,
                                                      __m512* acc) {
  if constexpr (R::kPairs) {
    __m512i even, odd;
    split_bf16_pairs(r, even, odd);
    for (int g = 0; g < GB; ++g)
      acc[g] =
          _mm512_fmadd_ps(_mm512_set1_ps(q[g * D + c + 2 * p]), _mm512_castsi512_ps(even), acc[g]);
    constexpr int kOdd = Split ? GB : 0;
    for (int g = 0; g < GB; ++g)
      acc[kOdd + g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * D + c + 2 * p + 1]),
                                      _mm512_castsi512_ps(odd), acc[kOdd + g]);
  } else {
    for (int g = 0; g < GB; ++g)
      acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * D + c + p]), _mm512_castsi512_ps(r), acc[g]);
  }
}

template <int D, class R, int GB, bool Full>
void scores16_direct(const float* q, const std::byte* block, std::size_t row_bytes, int rows,
                     float scale, float* p, std::size_t n) {
  constexpr bool kSplit = kSplitSums<R::kPairs, GB>;
  __m512 acc[kSplit ? 2 * GB : GB];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  constexpr int kStep = R::kPairs ? 32 : 16;
  for (int c = 0; c < D; c += kStep) {
    __m512i r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const std::byte* row = block + static_cast<std::size_t>(i) * row_bytes;
      if constexpr (Full) {
        if (R::kPairs || (c / 16) % R::kPrefetchEvery == 0)
          prefetch_l2_ahead(R::at(row, c), kPrefetchRows * row_bytes);
      } else if (i >= rows) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      if constexpr (R::kPairs) {
        r[i] = _mm512_loadu_si512(R::at(row, c));
      } else {
        r[i] = _mm512_castps_si512(R::load16(row, c));
      }
    }
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
      r[g + 0] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
      r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
      r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
      r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
#pragma GCC unroll 4
    for (int cc = 0; cc < 4; ++cc) {
      const __m512i x02 = _mm512_shuffle_i32x4(r[cc], r[4 + cc], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512i y02 = _mm512_shuffle_i32x4(r[8 + cc], r[12 + cc], _MM_SHUFFLE(2, 0, 2, 0));
      scores_fma<D, R, GB, kSplit>(q, c, cc,
                                   _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(2, 0, 2, 0)), acc);
      scores_fma<D, R, GB, kSplit>(q, c, 8 + cc,
                                   _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(3, 1, 3, 1)), acc);
      const __m512i x13 = _mm512_shuffle_i32x4(r[cc], r[4 + cc], _MM_SHUFFLE(3, 1, 3, 1));
      const __m512i y13 = _mm512_shuffle_i32x4(r[8 + cc], r[12 + cc], _MM_SHUFFLE(3, 1, 3, 1));
      scores_fma<D, R, GB, kSplit>(q, c, 4 + cc,
                                   _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(2, 0, 2, 0)), acc);
      scores_fma<D, R, GB, kSplit>(q, c, 12 + cc,
                                   _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(3, 1, 3, 1)), acc);
    }
  }
  if constexpr (kSplit)
    for (int g = 0; g < GB; ++g) acc[g] = _mm512_add_ps(acc[g], acc[GB + g]);
  const __mmask16 m = tail_mask16(static_cast<std::size_t>(rows));
  const __m512 s = _mm512_set1_ps(scale);
  for (int g = 0; g < GB; ++g) _mm512_mask_storeu_ps(p + g * n, m, _mm512_mul_ps(acc[g], s));
}

// probs[g][j] = scale * q[g] . keys[j] for g < GB, j < n, 16 keys at a time.
template <int D, class R, int GB>
void scores_direct(const float* q, const std::byte* keys, std::size_t row_bytes, int n, float scale,
                   float* probs) {
  const auto stride = static_cast<std::size_t>(n);
  int j0 = 0;
  for (; j0 + 16 <= n; j0 += 16)
    scores16_direct<D, R, GB, true>(q, keys + static_cast<std::size_t>(j0) * row_bytes, row_bytes,
                                    16, scale, probs + j0, stride);
  if (j0 < n)
    scores16_direct<D, R, GB, false>(q, keys + static_cast<std::size_t>(j0) * row_bytes, row_bytes,
                                     n - j0, scale, probs + j0, stride);
}

// scores_direct for G <= GB heads.
template <int D, class R, int GB>
void scores_direct_heads(int G, const float* q, const std::byte* keys, std::size_t row_bytes, int n,
                         float scale, float* probs) {
  if constexpr (GB > 1) {
    if (G < GB) return scores_direct_heads<D, R, GB - 1>(G, q, keys, row_bytes, n, scale, probs);
  }
  scores_direct<D, R, GB>(q, keys, row_bytes, n, scale, probs);
}

// exp_inplace (attention_impl.h) on 16 lanes, written out as GCC compiles that loop for this
// file (its multiply-adds contracted into FMAs: f = v - r ln2 in two fused steps, each step of
// the polynomial fused), so the same bits as the loop (VecExp.Avx512IsTheFusedFormula), in
// fewer instructions: each clamp is one max or min (with the constant first, a NaN lane keeps
// its NaN, as the loop's comparisons do), and p * 2^r is one VSCALEFPS, which rounds as the
// loop's multiply by the power of two does (r is an integer in [-126, 127] after the clamps).
inline __m512 exp16(__m512 v) {
  v = _mm512_max_ps(_mm512_set1_ps(-87.3f), v);
  v = _mm512_min_ps(_mm512_set1_ps(88.3f), v);
  const __m512 t = _mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f));
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_fnmadd_ps(r, _mm512_set1_ps(1.428606765330187045e-06f),
                                    _mm512_fnmadd_ps(r, _mm512_set1_ps(0.693145751953125f), v));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 5040.0f), f, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, r);
}

// softmax_rows of attention_impl.h with vector max and sum (its scalar sum does not vectorise:
// float addition is not reassociated without -ffast-math), in three passes over each row: the
// max; the subtraction, exp and sum together; the normalisation.
void softmax_rows_avx512(float* probs, int G, int n) {
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n);
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int j = 0; j < n; j += 16)
      m = _mm512_max_ps(
          m, _mm512_mask_loadu_ps(m, tail_mask16(static_cast<std::size_t>(n - j)), p + j));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask16(static_cast<std::size_t>(n - j));
      const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), mx));
      _mm512_mask_storeu_ps(p + j, k, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask16(static_cast<std::size_t>(n - j));
      _mm512_mask_storeu_ps(p + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv));
    }
  }
}

// The output pass reads each value row 64 values (four vectors) at a time: values c .. c + 63 of
// row j as v[0..3]. In natural order (v[i] holds c + 16i ..), except bf16 rows, read as two
// loads of 32 and split like Keys32T::transpose16: v[2h] holds the even values c + 32h + 2i, v[2h +
// 1] the odd ones. Each product p * v is the same either way; only where it lands differs, and
// unpermute puts it back.
template <class R>
inline void load_values64(const std::byte* row, int c, std::size_t pf, __m512 v[4]) {
  if constexpr (R::kPairs) {
    for (int h = 0; h < 2; ++h) {
      prefetch_l2_ahead(R::at(row, c + 32 * h), pf);
      __m512i even, odd;
      split_bf16_pairs(_mm512_loadu_si512(R::at(row, c + 32 * h)), even, odd);
      v[2 * h] = _mm512_castsi512_ps(even);
      v[2 * h + 1] = _mm512_castsi512_ps(odd);
    }
  } else {
    for (int i = 0; i < 4; ++i) {
      if ((c / 16 + i) % R::kPrefetchEvery == 0) prefetch_l2_ahead(R::at(row, c + 16 * i), pf);
      v[i] = R::load16(row, c + 16 * i);
    }
  }
}

// out[g][c, c + 64) += sum_{j in [j0, j1)} probs[g][j] * values[j][c, c + 64), for heads
// g0 .. g0 + GB of d values each (out in load_values64's order for the pass), j in order.
template <class R, int GB>
void output_pass(const float* probs, int n, int g0, int d, const std::byte* values,
                 std::size_t row_bytes, int j0, int j1, int c, float* out) {
  __m512 acc[GB][4];
  const float* p[GB];
  for (int g = 0; g < GB; ++g) {
    float* o = out + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(d) + c;
    for (int i = 0; i < 4; ++i) acc[g][i] = _mm512_loadu_ps(o + 16 * i);
    p[g] = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n);
  }
  const std::size_t pf = kPrefetchRows * row_bytes;
  for (int j = j0; j < j1; ++j) {
    __m512 v[4];
    load_values64<R>(values + static_cast<std::size_t>(j) * row_bytes, c, pf, v);
    for (int g = 0; g < GB; ++g) {
      const __m512 pj = _mm512_set1_ps(p[g][j]);
      for (int i = 0; i < 4; ++i) acc[g][i] = _mm512_fmadd_ps(pj, v[i], acc[g][i]);
    }
  }
  for (int g = 0; g < GB; ++g) {
    float* o = out + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(d) + c;
    for (int i = 0; i < 4; ++i) _mm512_storeu_ps(o + 16 * i, acc[g][i]);
  }
}

// Heads per output pass: GB x 4 accumulators and the 4 value vectors fit the 32 registers.
constexpr int kOutputHeads = 6;

// output_pass for gb <= GB heads.
template <class R, int GB>
void output_heads(int gb, const float* probs, int n, int g0, int d, const std::byte* values,
                  std::size_t row_bytes, int j0, int j1, int c, float* out) {
  if constexpr (GB > 1) {
    if (gb < GB)
      return output_heads<R, GB - 1>(gb, probs, n, g0, d, values, row_bytes, j0, j1, c, out);
  }
  output_pass<R, GB>(probs, n, g0, d, values, row_bytes, j0, j1, c, out);
}

// out[g] += sum_{j < len} probs[g][j] * values[j] for the G heads: chunks of values in order, each
// 64 values of a chunk's rows read from memory by the first group of heads and from L1 by the
// rest. out is in load_values64's order.
template <class R, int D>
void output_rows(const float* probs, int n, int G, const std::byte* values, std::size_t row_bytes,
                 int j0, int j1, float* out) {
  // The fewest passes of at most kOutputHeads heads, as even as they go: 7 heads as 4 and 3,
  // where 6 and 1 left the second pass four chains of FMAs bound by their latency
  // (rkv_bench Attention/n8320, 7 heads of 64: f32 0.97x the time, bf16 not told apart; 6
  // alternating rounds, medians).
  const int passes = (G + kOutputHeads - 1) / kOutputHeads, per = (G + passes - 1) / passes;
  for (int c = 0; c < D; c += 64)
    for (int g0 = 0; g0 < G; g0 += per)
      output_heads<R, kOutputHeads>(G - g0 < per ? G - g0 : per, probs, n, g0, D, values, row_bytes,
                                    j0, j1, c, out);
}

// load_values64's bf16 order back to natural order, in place, for G rows of D values.
template <int D>
void unpermute(float* out, int G) {
  alignas(64) static constexpr std::int32_t kLow[16] = {0, 16, 1, 17, 2, 18, 3, 19,
                                                        4, 20, 5, 21, 6, 22, 7, 23};
  alignas(64) static constexpr std::int32_t kHigh[16] = {8,  24, 9,  25, 10, 26, 11, 27,
                                                         12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i lo = _mm512_load_si512(kLow), hi = _mm512_load_si512(kHigh);
  for (int k = 0; k < G * D; k += 32) {
    const __m512 even = _mm512_loadu_ps(out + k), odd = _mm512_loadu_ps(out + k + 16);
    _mm512_storeu_ps(out + k, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(out + k + 16, _mm512_permutex2var_ps(even, hi, odd));
  }
}

// out[g] = sum_j probs[g][j] * values[j] over n values of head size D.
template <class R, int D>
void output(const float* probs, int G, int n, const std::byte* values, std::size_t row_bytes,
            float* out) {
  for (int k = 0; k < G * D; ++k) out[k] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kPvChunk)
    output_rows<R, D>(probs, n, G, values, row_bytes, j0, n - j0 < kPvChunk ? n : j0 + kPvChunk,
                      out);
  if constexpr (R::kPairs) unpermute<D>(out, G);
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
  if (G <= kDirectHeads) {
    if (d == 64) {
      scores_direct_heads<64, Row<T>, kDirectHeads>(G, q, keys, row_bytes, n, scale, probs);
    } else {
      scores_direct_heads<128, Row<T>, kDirectHeads>(G, q, keys, row_bytes, n, scale, probs);
    }
  } else if (d == 64) {
    scores<Keys32T<Row<T>::kPairs>, Row<T>, 64>(q, G, keys, row_bytes, n, scale, probs);
  } else {
    scores<Keys32T<Row<T>::kPairs>, Row<T>, 128>(q, G, keys, row_bytes, n, scale, probs);
  }
  softmax_rows_avx512(probs, G, n);
  if (d == 64) {
    output<Row<T>, 64>(probs, G, n, values, row_bytes, out);
  } else {
    output<Row<T>, 128>(probs, G, n, values, row_bytes, out);
  }
}

}  // namespace

// The rest of attention_typed after its scores, for a bf16 cache at head size 64 or 128: probs
// [G][n] holds scale * q . k on entry and the probabilities on return, out gets the G heads'
// outputs. What the AMX scores (attention_avx512bf16.cpp) hand over to.
void attention_avx512_finish_bf16(int G, int d, const void* values_v, int n, float* out,
                                  float* probs) {
  const auto* values = static_cast<const std::byte*>(values_v);
  const std::size_t row_bytes = kv_row_bytes(KvDtype::bf16, d);
  softmax_rows_avx512(probs, G, n);
  if (d == 64) {
    output<Row<KvDtype::bf16>, 64>(probs, G, n, values, row_bytes, out);
  } else {
    output<Row<KvDtype::bf16>, 128>(probs, G, n, values, row_bytes, out);
  }
}

namespace {

// f32 rows of the widened-values scratch: in L1 already, prefetched once a row, not per vector.
struct ScratchRow : Row<KvDtype::f32> {
  static constexpr int kPrefetchEvery = 1 << 20;
};

// The softmax and output of attention_rows_blocked: R rows, row i's [G][n0 + i] scores at probs +
// i * G * (n0 + R - 1) on entry; each chunk of kPvChunk values is widened to float32 once into vf,
// which output_rows then reads as f32 rows (exact values either way, so each row's bits are
// attention_typed's).
template <KvDtype T, int D>
void rows_finish(int R, int G, const std::byte* values, int n0, float* out, std::size_t out_stride,
                 float* probs) {
  const std::size_t row_bytes = kv_row_bytes(T, D);
  const int n_last = n0 + R - 1;
  const std::size_t pstride = static_cast<std::size_t>(G) * static_cast<std::size_t>(n_last);
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
      output_rows<ScratchRow, D>(p, n, G, vrows, vf_row_bytes, 0, len, o);
    }
  }
}

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
  using Keys = Keys32T<Row<T>::kPairs>;
  constexpr int L = Keys::kLanes;
  const std::size_t row_bytes = kv_row_bytes(T, D);
  const int n_last = n0 + R - 1;
  const std::size_t pstride = static_cast<std::size_t>(G) * static_cast<std::size_t>(n_last);
  alignas(64) float kt[D * L];
  for (int j0 = 0; j0 < n_last; j0 += L) {
    const int rows = n_last - j0 < L ? n_last - j0 : L;
    const std::byte* block = keys + static_cast<std::size_t>(j0) * row_bytes;
    if (rows == L) {
      Keys::template transpose_block<D, Row<T>, true>(block, row_bytes, rows, kt);
    } else {
      Keys::template transpose_block<D, Row<T>, false>(block, row_bytes, rows, kt);
    }
    for (int i = 0; i < R; ++i) {
      const int n = n0 + i;
      if (n <= j0) continue;
      const int ri = n - j0 < L ? n - j0 : L;
      for (int g0 = 0; g0 < G; g0 += kGroup)
        scores_group<Keys, D, kGroup>(G - g0 < kGroup ? G - g0 : kGroup,
                                      q + static_cast<std::size_t>(i) * q_stride, g0, kt, n, j0, ri,
                                      scale, probs + static_cast<std::size_t>(i) * pstride);
    }
  }
  rows_finish<T, D>(R, G, values, n0, out, out_stride, probs);
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

// attention_rows_blocked after its scores, for a bf16 cache at head size 64 or 128 (R rows, row
// i's [G][n0 + i] scores at probs + i * G * (n0 + R - 1)). What the AMX rows kernel
// (attention_avx512bf16.cpp) hands over to.
void attention_avx512_rows_finish_bf16(int R, int G, int d, const void* values, int n0, float* out,
                                       std::size_t out_stride, float* probs) {
  const auto* v = static_cast<const std::byte*>(values);
  if (d == 64) {
    rows_finish<KvDtype::bf16, 64>(R, G, v, n0, out, out_stride, probs);
  } else {
    rows_finish<KvDtype::bf16, 128>(R, G, v, n0, out, out_stride, probs);
  }
}

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
  for (int j = 0; j < n; j += 16) {
    const __mmask16 k = tail_mask16(static_cast<std::size_t>(n - j));
    _mm512_mask_storeu_ps(x + j, k, exp16(_mm512_maskz_loadu_ps(k, x + j)));
  }
}

}  // namespace rkv::kernels
