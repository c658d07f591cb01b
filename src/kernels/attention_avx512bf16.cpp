// The attention kernel's scores on AMX tiles (AMX-BF16), for a bf16 cache at head sizes 64 and
// 128 with up to 8 query heads per KV head (flags from CMakeLists.txt; chosen by
// attention_dispatch.cpp where kernels::amx_enabled()).
//
// The AVX-512 kernel transposes every block of keys so that its FMAs can run over keys, and at
// decode its scores cost more than the cache takes to read. Here the keys go to the tiles as
// they are stored: a tile of 16 keys by 32 dimensions is loaded straight from the cache (A), the
// query heads are the columns of B, and TDPBF16PS leaves the 16 keys' scores for every head in
// C, a row a key. q is float32, so it goes in as three bf16 parts, hi + mid + lo = q exactly (hi
// is q rounded to bf16, mid the rest rounded, lo what is left, which has at most 8 significant
// bits); each part's products with the bf16 keys are exact in float32, and C accumulates the
// parts and dimensions in float32. So a score is the float32 sum of the exact products
// q[k] * key[k], in another order than the AVX-512 kernel's FMAs. Rows of C are transposed to the
// probabilities' layout ([head][key]) in registers, and the softmax and the output pass are the
// AVX-512 kernel's (attention_avx512_finish_bf16).
//
// Tiles: 0 and 1 the keys (A) for two chunks of 32 dimensions; 2 and 4 hi and mid of q for them,
// side by side in 2G columns, 3 and 5 lo (B: head size 64 keeps them, 128 reloads them from L1
// for each pair of chunks); 6 and 7 the two sums (C), added as (hi + mid) + lo per key.

// GCC 12's _mm*_undefined_*() (used inside many intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/amx_util.h"
#include "kernels/attention.h"
#include "kernels/avx512_util.h"
#include "kernels/prefetch.h"

namespace rkv::kernels {

AttentionFn attention_avx512_for(KvDtype dtype);
AttentionRowsFn attention_rows_avx512_for(KvDtype dtype);
void attention_avx512_finish_bf16(int G, int d, const void* values, int n, float* out,
                                  float* probs);
void attention_avx512_rows_finish_bf16(int R, int G, int d, const void* values, int n0, float* out,
                                       std::size_t out_stride, float* probs);

namespace {

constexpr int kMaxHeads = 8;  // C's columns hold two parts of every head
// Cache rows prefetched into L1 ahead of the block read: two blocks. Into L2, as the AVX-512
// kernel prefetches, or 64 rows ahead, read the cache more slowly (rkv_bench
// Attention/n8320/amx/bf16, cold and with RKV_BENCH_CYCLE_MIB=8; docs/PERFORMANCE-LOG.md).
constexpr int kPrefetchRows = 32;

inline void prefetch_block_ahead(const std::byte* block, std::size_t row_bytes) {
  for (std::size_t b = 0; b < 16 * row_bytes; b += 64)
    prefetch_ahead(block + b, kPrefetchRows * row_bytes);
}

// B tiles for dimensions [32c, 32c + 32): row i holds the pair of dimensions 32c + 2i, 32c + 2i + 1
// (low half the even one) of every head: hm[c] hi in columns 0 .. G - 1 and mid in G .. 2G - 1,
// lo[c] lo in columns 0 .. G - 1.
struct QTiles {
  alignas(64) std::uint32_t hm[4][16][16];
  alignas(64) std::uint32_t lo[4][16][16];
};

// q's G heads of D values into their three bf16 parts, in QTiles' layout.
template <int D>
void split_q(const float* q, int G, QTiles& t) {
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < D; k += 16) {
      const __m512 x = _mm512_loadu_ps(q + g * D + k);
      const __m256bh hi = _mm512_cvtneps_pbh(x);
      const __m512 r1 = _mm512_sub_ps(x, _mm512_cvtpbh_ps(hi));
      const __m256bh mid = _mm512_cvtneps_pbh(r1);
      const __m512 r2 = _mm512_sub_ps(r1, _mm512_cvtpbh_ps(mid));
      const __m256bh lo = _mm512_cvtneps_pbh(r2);
      alignas(32) std::uint32_t pairs[3][8];
      std::memcpy(pairs[0], &hi, 32);
      std::memcpy(pairs[1], &mid, 32);
      std::memcpy(pairs[2], &lo, 32);
      const int c = k / 32, i0 = (k % 32) / 2;
      for (int i = 0; i < 8; ++i) {
        t.hm[c][i0 + i][g] = pairs[0][i];
        t.hm[c][i0 + i][G + g] = pairs[1][i];
        t.lo[c][i0 + i][g] = pairs[2][i];
      }
    }
  }
}

// Tiles 0, 1 (A: 16 keys x 32 dimensions, two chunks), 2, 4 (B: hi and mid of the two chunks),
// 3, 5 (B: lo), 6 (C: 16 keys x hi and mid sums), 7 (C: 16 keys x lo sums).
void configure(int G) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.rows[t] = 16;
  c.colsb[0] = c.colsb[1] = 64;
  c.colsb[2] = c.colsb[4] = c.colsb[6] = static_cast<std::uint16_t>(8 * G);
  c.colsb[3] = c.colsb[5] = c.colsb[7] = static_cast<std::uint16_t>(4 * G);
  load_tiles(c);
}

// The scores of 16 keys from the two C tiles as stored (hm: rows 16 floats apart, hi sums in
// columns 0 .. G - 1 and mid sums in G .. 2G - 1; lo likewise, lo sums in 0 .. G - 1), as
// (hi + mid) + lo, times scale, to probs[g][j0 .. j0 + rows): two rows a register ([r | r + 8]),
// an 8x8 transpose in each half, and each column's halves joined.
inline void store_scores(const float* hm, const float* lo, int G, float scale, float* probs,
                         std::size_t n, std::size_t j0, int rows) {
  const __m512i mid_at =
      _mm512_add_epi32(_mm512_set1_epi32(G),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  auto row = [&](int r) {
    const __m512 a = _mm512_load_ps(hm + 16 * r);
    return _mm512_add_ps(_mm512_add_ps(a, _mm512_permutexvar_ps(mid_at, a)),
                         _mm512_load_ps(lo + 16 * r));
  };
  __m512 x[8];
  for (int r = 0; r < 8; ++r) x[r] = _mm512_shuffle_f32x4(row(r), row(r + 8), 0x44);
  __m512 t[8], u[8];
  for (int r = 0; r < 8; r += 2) {
    t[r] = _mm512_unpacklo_ps(x[r], x[r + 1]);
    t[r + 1] = _mm512_unpackhi_ps(x[r], x[r + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // rows 0..3 from t[0..3], rows 4..7 from t[4..7]
    u[h] = _mm512_shuffle_ps(t[h], t[h + 2], 0x44);
    u[h + 1] = _mm512_shuffle_ps(t[h], t[h + 2], 0xEE);
    u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0x44);
    u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
  }
  // u[c] (c < 4) holds, per 128-bit lane, rows 0..3 (u[c + 4]: rows 4..7) of column c (lanes 0
  // and 2, rows +8 in lane 2) and column c + 4 (lanes 1 and 3).
  const __m512i lo_cols =
      _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi_cols =
      _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  const __m512 s = _mm512_set1_ps(scale);
  const __mmask16 m = tail_mask16(static_cast<std::size_t>(rows));
  for (int g = 0; g < G; ++g) {
    const int c = g % 4;
    const __m512 col = _mm512_permutex2var_ps(u[c], g < 4 ? lo_cols : hi_cols, u[c + 4]);
    _mm512_mask_storeu_ps(probs + static_cast<std::size_t>(g) * n + j0, m, _mm512_mul_ps(col, s));
  }
}

// The two C tiles <- the sums of 16 keys at `block` (row stride row_bytes): each pair of chunks
// of 32 dimensions loaded as A and multiplied by their hi/mid and lo tiles, loaded from t with
// LoadB (head size 128; 64 keeps them in tiles 2..5 when one q is multiplied, loaded by the
// caller). The same operations in the same order either way, so the same bits.
template <int D, bool LoadB = (D != 64)>
inline void block_scores(const std::byte* block, std::size_t row_bytes, const QTiles& t) {
  _tile_zero(6);
  _tile_zero(7);
  for (int c = 0; c < D / 32; c += 2) {
    if constexpr (LoadB) {
      _tile_loadd(2, t.hm[c], 64);
      _tile_loadd(3, t.lo[c], 64);
      _tile_loadd(4, t.hm[c + 1], 64);
      _tile_loadd(5, t.lo[c + 1], 64);
    }
    _tile_loadd(0, block + 64 * c, row_bytes);
    _tile_loadd(1, block + 64 * (c + 1), row_bytes);
    _tile_dpbf16ps(6, 0, 2);
    _tile_dpbf16ps(7, 0, 3);
    _tile_dpbf16ps(6, 1, 4);
    _tile_dpbf16ps(7, 1, 5);
  }
}

// The last rows < 16 keys of a cache (row stride row_bytes) copied to `tail` and padded with zero
// rows: A reads 16 rows.
template <std::size_t RowBytes>
const std::byte* padded_block(const std::byte* block, std::size_t rows, std::byte* tail) {
  std::memcpy(tail, block, rows * RowBytes);
  std::memset(tail + rows * RowBytes, 0, (16 - rows) * RowBytes);
  return tail;
}

// The C tiles to hm and lo, then their scores of keys j0 .. j0 + rows to probs (store_scores).
inline void emit_scores(float* hm, float* lo, int G, float scale, float* probs, std::size_t n,
                        std::size_t j0, int rows) {
  _tile_stored(6, hm, 64);
  _tile_stored(7, lo, 64);
  store_scores(hm, lo, G, scale, probs, n, j0, rows);
}

// probs[g][j] = scale * q[g] . keys[j] for g < G <= 8, j < n.
template <int D>
void scores_amx(const float* q, int G, const std::byte* keys, int n, float scale, float* probs) {
  constexpr std::size_t row_bytes = 2 * D;
  QTiles t;  // 8 KiB
  split_q<D>(q, G, t);
  alignas(64) float hm[16 * 16], lo[16 * 16];
  configure(G);
  if constexpr (D == 64) {
    _tile_loadd(2, t.hm[0], 64);
    _tile_loadd(3, t.lo[0], 64);
    _tile_loadd(4, t.hm[1], 64);
    _tile_loadd(5, t.lo[1], 64);
  }
  const auto N = static_cast<std::size_t>(n);
  std::size_t j0 = 0;
  for (; j0 + 16 <= N; j0 += 16) {
    const std::byte* block = keys + j0 * row_bytes;
    prefetch_block_ahead(block, row_bytes);
    block_scores<D>(block, row_bytes, t);
    emit_scores(hm, lo, G, scale, probs, N, j0, 16);
  }
  if (j0 < N) {  // the last keys
    alignas(64) std::byte tail[16 * row_bytes];
    const std::size_t rows = N - j0;
    block_scores<D>(padded_block<row_bytes>(keys + j0 * row_bytes, rows, tail), row_bytes, t);
    emit_scores(hm, lo, G, scale, probs, N, j0, static_cast<int>(rows));
  }
  _tile_release();
}

// AttentionRowsFn's scores for R rows (row i: its q at q + i * q_stride, n0 + i keys, its [G][n0 +
// i] scores to probs + i * G * (n0 + R - 1)): scores_amx's for each row, bit for bit, with each
// block of keys read from memory once for all the rows that see it (the rows' A tiles come from
// L1). A row's C rows past its own keys are not stored, as scores_amx's zero rows are not.
template <int D>
void rows_scores_amx(const float* q, std::size_t q_stride, int R, int G, const std::byte* keys,
                     int n0, float scale, float* probs) {
  constexpr std::size_t row_bytes = 2 * D;
  thread_local std::vector<QTiles> tiles;
  if (tiles.size() < static_cast<std::size_t>(R)) tiles.resize(static_cast<std::size_t>(R));
  for (int i = 0; i < R; ++i) split_q<D>(q + static_cast<std::size_t>(i) * q_stride, G, tiles[i]);
  const auto n_last = static_cast<std::size_t>(n0 + R - 1);
  const std::size_t pstride = static_cast<std::size_t>(G) * n_last;
  alignas(64) float hm[16 * 16], lo[16 * 16];
  alignas(64) std::byte tail[16 * row_bytes];
  configure(G);
  for (std::size_t j0 = 0; j0 < n_last; j0 += 16) {
    const std::byte* block = keys + j0 * row_bytes;
    prefetch_block_ahead(block, row_bytes);
    if (n_last - j0 < 16) block = padded_block<row_bytes>(block, n_last - j0, tail);
    for (int i = 0; i < R; ++i) {
      const auto n = static_cast<std::size_t>(n0 + i);
      if (n <= j0) continue;
      block_scores<D, true>(block, row_bytes, tiles[static_cast<std::size_t>(i)]);
      emit_scores(hm, lo, G, scale, probs + static_cast<std::size_t>(i) * pstride, n, j0,
                  static_cast<int>(n - j0 < 16 ? n - j0 : 16));
    }
  }
  _tile_release();
}

void attention_amx_bf16(const float* q, int G, int d, const void* keys, const void* values, int n,
                        float scale, float* out, float* probs) {
  if ((d != 64 && d != 128) || G > kMaxHeads || n <= 0) {
    static const AttentionFn avx512 = attention_avx512_for(KvDtype::bf16);
    avx512(q, G, d, keys, values, n, scale, out, probs);
    return;
  }
  if (d == 64) {
    scores_amx<64>(q, G, static_cast<const std::byte*>(keys), n, scale, probs);
  } else {
    scores_amx<128>(q, G, static_cast<const std::byte*>(keys), n, scale, probs);
  }
  attention_avx512_finish_bf16(G, d, values, n, out, probs);
}

void attention_rows_amx_bf16(const float* q, std::size_t q_stride, int R, int G, int d,
                             const void* keys, const void* values, int n0, float scale, float* out,
                             std::size_t out_stride, float* probs) {
  if ((d != 64 && d != 128) || G > kMaxHeads) {  // the AVX-512 rows, each row its one-row bits
    static const AttentionRowsFn avx512 = attention_rows_avx512_for(KvDtype::bf16);
    avx512(q, q_stride, R, G, d, keys, values, n0, scale, out, out_stride, probs);
    return;
  }
  if (R == 1) {
    attention_amx_bf16(q, G, d, keys, values, n0, scale, out, probs);
    return;
  }
  const auto* k = static_cast<const std::byte*>(keys);
  if (d == 64) {
    rows_scores_amx<64>(q, q_stride, R, G, k, n0, scale, probs);
  } else {
    rows_scores_amx<128>(q, q_stride, R, G, k, n0, scale, probs);
  }
  attention_avx512_rows_finish_bf16(R, G, d, values, n0, out, out_stride, probs);
}

}  // namespace

AttentionFn attention_amx_bf16_fn() {
  return &attention_amx_bf16;
}

AttentionRowsFn attention_rows_amx_bf16_fn() {
  return &attention_rows_amx_bf16;
}

}  // namespace rkv::kernels
