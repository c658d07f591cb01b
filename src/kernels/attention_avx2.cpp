// The attention kernel for AVX2 (flags from CMakeLists.txt): attention_avx512.cpp's blocked
// kernel in 8 lanes and 16 vector registers.
//
// One query token's G heads against one KV head's cache (attention.h). Head sizes 64 and 128
// take the blocked path, and 256 too for the 16-bit and q8_0 caches; other sizes take
// attention_impl.h's loops.
//
//  * scores, G a multiple of 8 or 4 to 7 past one (scores_heads8): the query heads in the lanes;
//    each block of 8 key rows is widened to float32 once (the next block during this block's
//    products, so the stores overlap the FMAs), one FMA per key and dimension advances that key's
//    8 heads, and the block's 8 x 8 sums are transposed once.
//  * scores, other G: blocks of 8 keys are transposed (8x8 per 8 dimensions) into kt[d][8], so
//    that one FMA per dimension advances 8 scores of one head, with no horizontal sums; the block
//    is read from memory once and reused from L1 by every head.
//  * softmax: float32 with vector max, exp and sum.
//  * output: chunks of kValueChunk<d> value rows, each widened to float32 once into an L1 buffer;
//    then 3 heads and 32 dimensions at a time (12 accumulators) over the buffer.
//  Both score paths (and every output grouping) make each sum the same chain of FMAs in the same
//  order (greedy ids of whole models did not change when these paths replaced the old ones).
//  * cache dtypes: every read of 8 keys or values goes through a Row loader that widens the
//    stored type to float32 in registers (as attention_avx512.cpp does).

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_blocked.h"
#include "kernels/attention_impl.h"
#include "kernels/avx2_util.h"
#include "kv/kv_codec.h"

namespace rkv::kernels {
namespace {

// Row loaders: 8 values k .. k + 7 (k a multiple of 8) of one cache row as float32, and the
// address of value k (for prefetches, every kPrefetchEvery loads of 8).
template <KvDtype T>
struct Row;

template <>
struct Row<KvDtype::f32> {
  static constexpr int kPrefetchEvery = 2;
  static const std::byte* at(const std::byte* row, int k) { return row + 4 * k; }
  static __m256 load8(const std::byte* row, int k) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
};

template <>
struct Row<KvDtype::bf16> {
  static constexpr int kPrefetchEvery = 4;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m256 load8(const std::byte* row, int k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

template <>
struct Row<KvDtype::f16> {
  static constexpr int kPrefetchEvery = 4;
  static const std::byte* at(const std::byte* row, int k) { return row + 2 * k; }
  static __m256 load8(const std::byte* row, int k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
};

template <>
struct Row<KvDtype::q8_0> {
  static constexpr int kPrefetchEvery = 4;
  static const std::byte* at(const std::byte* row, int k) {
    return row + static_cast<std::size_t>(k / kQ8BlockValues) * kQ8BlockBytes + 2 +
           k % kQ8BlockValues;
  }
  static __m256 load8(const std::byte* row, int k) {
    const std::byte* block = row + static_cast<std::size_t>(k / kQ8BlockValues) * kQ8BlockBytes;
    std::uint16_t h;
    std::memcpy(&h, block, 2);
    const __m128i q =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + k % kQ8BlockValues));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(_cvtsh_ss(h)));
  }
};

// probs[g][j0, j0 + rows) = the first `rows` lanes of v (rows <= 8). A partial block is one
// masked store: with a copy through an aligned stack buffer here instead, GCC 12 kept the score
// loops' accumulators on the stack, storing each after every FMA (34-44% slower at G 6, 7 and
// 8 in rkv_bench; the inline copies this replaced did not do that, by luck).
inline void store_scores(__m256 v, float* probs, int n, int g, int j0, int rows) {
  float* dst = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n) +
               static_cast<std::size_t>(j0);
  if (rows == 8) {
    _mm256_storeu_ps(dst, v);
  } else {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(dst, _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), lane), v);
  }
}

// The width-specific part of the blocked kernel (see attention_blocked.h).
struct Lanes8 {
  static constexpr int kLanes = 8;

  // 8 rows of D keys from `block` (row stride row_bytes) as float32, transposed:
  // kt[k * 8 + i] = block[i][k]; rows from `rows` on are zeros unless Full.
  template <int D, class R, bool Full>
  static void transpose_block(const std::byte* block, std::size_t row_bytes, int rows, float* kt) {
    for (int c = 0; c < D; c += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        const std::byte* row = block + static_cast<std::size_t>(i) * row_bytes;
        if constexpr (Full) {
          if ((c / 8) % R::kPrefetchEvery == 0)
            prefetch_ahead(R::at(row, c), kPrefetchRows * row_bytes);
          r[i] = R::load8(row, c);
        } else {
          r[i] = i < rows ? R::load8(row, c) : _mm256_setzero_ps();
        }
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
    for (int g = 0; g < GB; ++g) store_scores(_mm256_mul_ps(acc[g], s), probs, n, g0 + g, j0, rows);
  }
};

// Zero bits: a row past the cache's end in every dtype (q8_0's scale is zero too), for the
// widening of a block's missing rows without a branch.
alignas(64) constexpr std::byte kZeroRow[4 * 256] = {};

// Scores with the heads in the lanes, for G a multiple of 8 or 4 to 7 past one (empty lanes cost
// less than transposing keys: rkv_bench Attention at n 2048-4096, bf16 on Zen 3, G 6 at d 128
// 320 -> 262 us, G 5 155 -> 124, G 4 144 -> 115, G 4 at d 256 292 -> 242; G 1 to 3 past a
// multiple of 8 stay on the transposed keys, not measured): per block of 8 keys, each key row is
// widened to float32 once (no transpose), and per dimension k one FMA per key adds key[j][k] times
// the vector of the 8 heads' q[g][k]. The 8 x 8 sums are transposed once at the end of the block.
// Each score is the same chain of FMAs, k ascending, as in the transposed-keys path.
// The next block's widening (8 rows of D / 8 vectors: D in all, one per dimension k) is done
// inside this block's first group of products, one vector per k, so its stores overlap the FMAs
// instead of running alone between blocks.
inline bool heads_in_lanes(int G) {
  return G % 8 == 0 || G % 8 >= 4;
}

template <KvDtype T, int D>
void scores_heads8(const float* q, int G, const std::byte* keys, std::size_t row_bytes, int n,
                   float scale, float* probs) {
  using R = Row<T>;
  static_assert(4 * D <= static_cast<int>(sizeof(kZeroRow)));
  constexpr int kVectors = D / 8;  // per row; 8 rows x kVectors = D
  const int groups = (G + 7) / 8;
  // qt[group][k][lane] = q[8 * group + lane][k]; zero in lanes past G.
  thread_local std::vector<float> qt_store;
  qt_store.assign(static_cast<std::size_t>(groups) * D * 8, 0.0f);
  float* qt = qt_store.data();
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < D; ++k)
      qt[static_cast<std::size_t>(g / 8) * D * 8 + static_cast<std::size_t>(k) * 8 + g % 8] =
          q[static_cast<std::size_t>(g) * D + k];
  alignas(32) float kf2[2][8 * D];
  // The rows of the block at j0: past the cache's end, the zero row.
  auto block_rows = [&](int j0, const std::byte* rows[8]) {
    for (int i = 0; i < 8; ++i)
      rows[i] = j0 + i < n ? keys + static_cast<std::size_t>(j0 + i) * row_bytes : kZeroRow;
  };
  const std::byte* rows[8];
  block_rows(0, rows);
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < kVectors; ++c)
      _mm256_store_ps(kf2[0] + i * D + 8 * c, R::load8(rows[i], 8 * c));
  const __m256 s = _mm256_set1_ps(scale);
  int cur = 0;
  for (int j0 = 0; j0 < n; j0 += 8) {
    const int rows_here = n - j0 < 8 ? n - j0 : 8;
    const float* kf = kf2[cur];
    float* kf_next = kf2[cur ^ 1];
    block_rows(j0 + 8, rows);
    for (int g0 = 0; g0 < G; g0 += 8) {
      const float* qg = qt + static_cast<std::size_t>(g0 / 8) * D * 8;
      __m256 acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
      if (g0 == 0) {
        for (int r = 0; r < 8; ++r) {
          const std::byte* row = rows[r];
          float* dst = kf_next + r * D;
#pragma GCC unroll 16
          for (int c = 0; c < kVectors; ++c) {
            const int k = r * kVectors + c;
            const __m256 qv = _mm256_loadu_ps(qg + k * 8);
            for (int i = 0; i < 8; ++i)
              acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + i * D + k), qv, acc[i]);
            if (c % R::kPrefetchEvery == 0)
              prefetch_ahead(R::at(row, 8 * c), kPrefetchRows * row_bytes);
            _mm256_store_ps(dst + 8 * c, R::load8(row, 8 * c));
          }
        }
      } else {
        for (int k = 0; k < D; ++k) {
          const __m256 qv = _mm256_loadu_ps(qg + k * 8);
          for (int i = 0; i < 8; ++i)
            acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + i * D + k), qv, acc[i]);
        }
      }
      transpose8x8(acc);  // acc[g]: head g0 + g, lanes over the block's keys
      const int gb = G - g0 < 8 ? G - g0 : 8;
      for (int g = 0; g < gb; ++g)
        store_scores(_mm256_mul_ps(acc[g], s), probs, n, g0 + g, j0, rows_here);
    }
    cur ^= 1;
  }
}

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

// exp_inplace (attention_impl.h) on 8 lanes, written out as GCC compiles that loop for this file
// (its multiply-adds contracted into FMAs: f = v - r ln2 in two fused steps, each step of the
// polynomial fused), so the same bits as the loop (VecExp.Avx2IsTheFusedFormula). The loop itself
// stays scalar here: GCC 12 does not vectorise its clamps and nearbyint.
inline __m256 exp8(__m256 v) {
  // v < -87.3 ? -87.3 : v, then v > 88.3 ? 88.3 : v: max_ps and min_ps return their second
  // operand when either is NaN, so a NaN stays NaN, as in the loop.
  v = _mm256_max_ps(_mm256_set1_ps(-87.3f), v);
  v = _mm256_min_ps(_mm256_set1_ps(88.3f), v);
  const __m256 t = _mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f));
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_fnmadd_ps(r, _mm256_set1_ps(1.428606765330187045e-06f),
                                    _mm256_fnmadd_ps(r, _mm256_set1_ps(0.693145751953125f), v));
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 5040.0f), f, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(r), _mm256_set1_epi32(127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

// exp8 on the first `count` < 8 floats at x, in place.
inline void exp_tail(float* x, int count) {
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, x, sizeof(float) * static_cast<std::size_t>(count));
  _mm256_store_ps(tmp, exp8(_mm256_load_ps(tmp)));
  std::memcpy(x, tmp, sizeof(float) * static_cast<std::size_t>(count));
}

// softmax_rows of attention_impl.h with vector max and sum over full groups of 8 (its scalar sum
// does not vectorise without -ffast-math; the last n % 8 entries are added one by one after), in
// three passes over each row: the max; the subtraction, exp and sum together; the normalisation.
void softmax_rows_avx2(float* probs, int G, int n) {
  const int n8 = n / 8 * 8;
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * static_cast<std::size_t>(n);
    __m256 m8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int j = 0; j < n8; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(p + j));
    float m = hmax8(m8);
    for (int j = n8; j < n; ++j) m = p[j] > m ? p[j] : m;
    const __m256 mx = _mm256_set1_ps(m);
    __m256 s8 = _mm256_setzero_ps();
    for (int j = 0; j < n8; j += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), mx));
      _mm256_storeu_ps(p + j, e);
      s8 = _mm256_add_ps(s8, e);
    }
    float sum = hsum8(s8);
    if (n8 < n) {
      for (int j = n8; j < n; ++j) p[j] -= m;
      exp_tail(p + n8, n - n8);
      for (int j = n8; j < n; ++j) sum += p[j];
    }
    const float inv = 1.0f / sum;
    const __m256 inv8 = _mm256_set1_ps(inv);
    for (int j = 0; j < n8; j += 8)
      _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), inv8));
    for (int j = n8; j < n; ++j) p[j] *= inv;
  }
}

// Value rows per chunk of the output pass: a chunk's rows, as float32, are 16 KiB at d = 128 and
// d = 256 (8 KiB at d = 64), so they stay in L1 while every head reads them.
template <int d>
constexpr int kValueChunk = d > 128 ? 16 : 32;

// out[g][c0, c0 + 32) += sum_{j < rows} probs[g][j] * vf[j][c0, c0 + 32) for the GB heads g0 ..
// g0 + GB - 1 (12 chains of FMAs at GB = 3), j in order; vf's rows are d floats apart.
template <int GB>
inline void output_chunk(const float* probs, int n, int g0, const float* vf, int d, int rows,
                         int c0, float* out) {
  __m256 acc[GB][4];
  const float* p[GB];
  for (int g = 0; g < GB; ++g) {
    const float* o = out + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(d) + c0;
    for (int c = 0; c < 4; ++c) acc[g][c] = _mm256_loadu_ps(o + c * 8);
    p[g] = probs + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(n);
  }
  for (int j = 0; j < rows; ++j) {
    const float* vj = vf + static_cast<std::size_t>(j) * static_cast<std::size_t>(d) + c0;
    for (int g = 0; g < GB; ++g) {
      const __m256 pj = _mm256_broadcast_ss(p[g] + j);
      for (int c = 0; c < 4; ++c)
        acc[g][c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + c * 8), acc[g][c]);
    }
  }
  for (int g = 0; g < GB; ++g) {
    float* o = out + static_cast<std::size_t>(g0 + g) * static_cast<std::size_t>(d) + c0;
    for (int c = 0; c < 4; ++c) _mm256_storeu_ps(o + c * 8, acc[g][c]);
  }
}

// out[g] = sum_j probs[g][j] * values[j] over chunks of kValueChunk rows in order: each chunk is
// read from memory once and widened to float32 (float32 rows are read where they lie), then every
// head's products read it from L1. Each output is the same chain of FMAs, j ascending, as one
// pass per head over the stored rows would make.
template <KvDtype T, int d>
void output(const float* probs, int G, int n, const std::byte* values, std::size_t row_bytes,
            float* out) {
  using R = Row<T>;
  for (int k = 0; k < G * d; ++k) out[k] = 0.0f;
  constexpr int kChunk = kValueChunk<d>;
  alignas(32) float chunk[kChunk * d];
  for (int j0 = 0; j0 < n; j0 += kChunk) {
    const int rows = n - j0 < kChunk ? n - j0 : kChunk;
    const std::byte* first = values + static_cast<std::size_t>(j0) * row_bytes;
    const float* vf = chunk;
    for (int j = 0; j < rows; ++j) {
      const std::byte* vj = first + static_cast<std::size_t>(j) * row_bytes;
      for (int k = 0; k < d; k += 8) {
        if ((k / 8) % R::kPrefetchEvery == 0)
          prefetch_ahead(R::at(vj, k), kPrefetchRows * row_bytes);
        if constexpr (T != KvDtype::f32) _mm256_store_ps(chunk + j * d + k, R::load8(vj, k));
      }
    }
    if constexpr (T == KvDtype::f32) vf = reinterpret_cast<const float*>(first);
    for (int c0 = 0; c0 < d; c0 += 32) {
      int g0 = 0;
      for (; g0 + 3 <= G; g0 += 3) output_chunk<3>(probs + j0, n, g0, vf, d, rows, c0, out);
      if (G - g0 == 2) output_chunk<2>(probs + j0, n, g0, vf, d, rows, c0, out);
      if (G - g0 == 1) output_chunk<1>(probs + j0, n, g0, vf, d, rows, c0, out);
    }
  }
}

// Cache rows of dtype T to float32, 8 values at a time (d a multiple of 8; else the portable
// conversion).
template <KvDtype T>
void decode_rows(const void* rows, std::size_t n, int d, float* out) {
  if (d % 8 != 0) {
    kv_decode_rows_reference(T, static_cast<const std::byte*>(rows), n, d, out);
    return;
  }
  const std::size_t row_bytes = kv_row_bytes(T, d);
  const auto* base = static_cast<const std::byte*>(rows);
  for (std::size_t j = 0; j < n; ++j)
    for (int k = 0; k < d; k += 8)
      _mm256_storeu_ps(out + j * static_cast<std::size_t>(d) + static_cast<std::size_t>(k),
                       Row<T>::load8(base + j * row_bytes, k));
}

void kv_decode_avx2(KvDtype dtype, const void* rows, std::size_t n, int d, float* out) {
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

// The blocked path for head size D (64, 128 or 256): scores, softmax, output.
template <KvDtype T, int D>
void attention_blocked(const float* q, int G, const std::byte* keys, const std::byte* values, int n,
                       float scale, float* out, float* probs) {
  const std::size_t row_bytes = kv_row_bytes(T, D);
  if (heads_in_lanes(G)) {
    scores_heads8<T, D>(q, G, keys, row_bytes, n, scale, probs);
  } else {
    scores<Lanes8, Row<T>, D>(q, G, keys, row_bytes, n, scale, probs);
  }
  softmax_rows_avx2(probs, G, n);
  output<T, D>(probs, G, n, values, row_bytes, out);
}

template <KvDtype T>
void attention_typed(const float* q, int G, int d, const void* keys_v, const void* values_v, int n,
                     float scale, float* out, float* probs) {
  const auto* keys = static_cast<const std::byte*>(keys_v);
  const auto* values = static_cast<const std::byte*>(values_v);
  // Head size 256 takes the blocked path for the stored dtypes that the portable path would
  // convert to float32 first (rkv_bench Attention g4d256/n2048 on Zen 3: bf16 550 -> 297 us);
  // float32 rows stay on the portable loops, which read them where they lie (410 against 473).
  if (d != 64 && d != 128 && (d != 256 || T == KvDtype::f32)) {
    if constexpr (T == KvDtype::f32) {
      attention_impl(q, G, d, static_cast<const float*>(keys_v),
                     static_cast<const float*>(values_v), n, scale, out, probs);
    } else {
      attention_decoded(&kv_decode_avx2, T, q, G, d, keys_v, values_v, n, scale, out, probs);
    }
    return;
  }
  if (d == 64) {
    attention_blocked<T, 64>(q, G, keys, values, n, scale, out, probs);
  } else if (d == 128) {
    attention_blocked<T, 128>(q, G, keys, values, n, scale, out, probs);
  } else if constexpr (T != KvDtype::f32) {  // d == 256
    attention_blocked<T, 256>(q, G, keys, values, n, scale, out, probs);
  }
}

}  // namespace

AttentionFn attention_avx2_for(KvDtype dtype) {
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

KvDecodeFn kv_decode_avx2_fn() {
  return &kv_decode_avx2;
}

void vec_exp_avx2(float* x, int n) {
  const int n8 = n / 8 * 8;
  for (int j = 0; j < n8; j += 8) _mm256_storeu_ps(x + j, exp8(_mm256_loadu_ps(x + j)));
  if (n8 < n) exp_tail(x + n8, n - n8);
}

}  // namespace rkv::kernels
