// AVX-512 VNNI kernels for block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4:
// core/quant.h) against activations quantized to 8 bits in blocks of 32
// (quant::quantize_activations), or for Q4_K/Q6_K in super-blocks of 256
// (quant::quantize_activations_k); the AVX2 quantizers give the same bytes and are used here too.
// Dispatch (dispatch.cpp) runs them for the AVX-512 instruction sets where the CPU also has
// AVX512-VNNI; without it those sets run the AVX2 kernels.
//
// The blocks-of-32 types: two consecutive 32-element blocks fill one 512-bit register. Each
// weight block is decoded to 64 unsigned bytes u with w = f * (u - o): o = 128 for Q8_0 (u = q
// XOR 0x80), 8 for Q4_0, 16 for Q5_0, 12 for MXFP4 (its codes' values plus 12, through a 16-byte
// table with vpshufb). vpdpbusd multiplies u by the signed activation bytes and sums each group
// of four into an int32 lane; the offset is removed per lane with the same instruction on a
// vector of o (computed once per activation row and block pair, shared by all weight rows of a
// tile), so lane l holds the exact integer sum of q * x over its four elements. Lanes 0-7 belong
// to the first block and 8-15 to the second, so one float vector of per-lane scales (weight
// scale x activation scale) and one FMA accumulate both blocks. Tiles are R weight rows x TT
// activation rows, as in matmul_quant_avx2.cpp (prefill: 4 x 4, the rows of x in chunks of 64),
// except that decode (T = 1) reads one weight row at a time.
//
// Q4_K / Q6_K: decode and short prompts on the same tiles with integer scales (tile_k), prefill
// (from kPanelMinT rows) on panels of sixteen weight rows laid out per call (panel_rows); both sum
// each super-block in exact int32 and scale it once.
//
// Everything here has internal linkage and uses no out-of-line library templates (see
// matmul_avx2.cpp).

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/avx512_util.h"
#include "kernels/kernels.h"
#include "kernels/prefetch.h"
#include "kernels/quant_rows.h"
#include "kernels/scratch.h"

namespace rkv::kernels {

QuantizedRowsFn quantized_rows_avx512vnni_fn();

namespace {

// Weight rows ahead (one 4-row tile), as the AVX2 kernels. Q4_K_M decode of the R1-1.5B shape
// (`rkv bench-decode -t 2 -p 0 -n 64 -d 0 -r 2`), medians of 6 alternating rounds (2026-11-28,
// Zen 5): 2 rows ahead 37.0 tokens/s against 38.5, 12 rows 40.8 against 42.2.
constexpr std::size_t kPrefetchRows = 4;

// The offset o of the blocks-of-32 types' unsigned encoding (see the top of the file).
template <DType D>
constexpr int kOffset = D == DType::Q8_0    ? 128
                        : D == DType::Q4_0  ? 8
                        : D == DType::Q5_0  ? 16
                        : D == DType::MXFP4 ? 12
                                            : 0;

inline float h2f(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Two floats spread over the two 256-bit halves.
inline __m512 halves(float lo, float hi) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

// 64 activation bytes of blocks b and b + 1 (only b's 32, the rest zero, when !two).
inline __m512i load_x(const std::int8_t* p, bool two) {
  return two ? _mm512_loadu_si512(p)
             : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Q4_0/Q5_0: the nibbles of the 16-byte quant arrays p0 (block b) and p1 (block b + 1) in element
// order: bytes 0-15 the low nibbles of p0 (elements 0-15), 16-31 its high nibbles, then p1's.
inline __m512i nibble_pair(const std::uint8_t* p0, const std::uint8_t* p1, bool two) {
  // [a, a, b, b] by 128-bit lanes (two broadcast loads), the second and fourth shifted down a
  // nibble: [a, a >> 4, b, b >> 4]
  const __m512i a = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)));
  const __m512i ab = two ? _mm512_mask_broadcast_i32x4(
                               a, 0xFF00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)))
                         : _mm512_maskz_mov_epi32(0x00FF, a);
  const __m512i shift = _mm512_maskz_set1_epi16(0xFF00FF00u, 4);
  return _mm512_and_si512(_mm512_srlv_epi16(ab, shift), _mm512_set1_epi8(0x0F));
}

// quant::e8m0_half of every exponent, computed at compile time: one load a block instead of the
// branch and shift.
struct E8m0Table {
  float v[256];
};
constexpr E8m0Table make_e8m0_table() {
  E8m0Table t{};
  for (unsigned e = 0; e < 256; ++e) t.v[e] = quant::e8m0_half(static_cast<std::uint8_t>(e));
  return t;
}
alignas(64) constexpr E8m0Table kE8m0Half = make_e8m0_table();

// Q8_0 / Q4_0 / Q5_0 / MXFP4: the unsigned bytes of blocks b and b + 1 of a row, and their
// scales.
template <DType D>
inline __m512i decode_pair(const std::uint8_t* row, std::size_t b, bool two, float& f0, float& f1) {
  if constexpr (D == DType::Q8_0) {
    const std::uint8_t* blk = row + b * 34;
    f0 = h2f(blk);
    f1 = two ? h2f(blk + 34) : 0.0f;
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i q1 = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 36))
                           : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1),
                            _mm512_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (D == DType::Q4_0) {
    const std::uint8_t* blk = row + b * 18;
    f0 = h2f(blk);
    f1 = two ? h2f(blk + 18) : 0.0f;
    return nibble_pair(blk + 2, blk + 20, two);
  } else if constexpr (D == DType::MXFP4) {
    const std::uint8_t* blk = row + b * 17;
    f0 = kE8m0Half.v[blk[0]];
    f1 = two ? kE8m0Half.v[blk[17]] : 0.0f;
    const __m128i values =
        _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kMxfp4Values)),
                     _mm_set1_epi8(static_cast<char>(kOffset<D>)));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(values), nibble_pair(blk + 1, blk + 18, two));
  } else {  // Q5_0
    const std::uint8_t* blk = row + b * 22;
    f0 = h2f(blk);
    f1 = two ? h2f(blk + 22) : 0.0f;
    std::uint32_t h0, h1 = 0;
    std::memcpy(&h0, blk + 2, 4);
    if (two) std::memcpy(&h1, blk + 24, 4);
    const __m512i nib = nibble_pair(blk + 6, blk + 28, two);
    // Bit k of the pair's 64-bit word is the fifth bit of byte k.
    const __mmask64 hi = static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32;
    return _mm512_mask_add_epi8(nib, hi, nib, _mm512_set1_epi8(16));
  }
}

inline float hsum(__m512 a) {
  return _mm512_reduce_add_ps(a);
}

// The activation side of one block pair for TT rows: the bytes, the per-lane offset sums negated
// (-(o * the sum of each group of four), exact in int32) and the activation scales per half.
template <DType D, int TT>
struct XPair {
  __m512i v[TT];
  __m512i off[TT];
  __m512 dx[TT];
  void load(const quant::ActivationBlocks& x, std::size_t K, std::size_t nb, std::size_t t0,
            std::size_t b, bool two) {
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const std::size_t row = t0 + static_cast<std::size_t>(t);
      v[t] = load_x(x.q + row * K + b * 32, two);
      if constexpr (kOffset<D> != 0)
        off[t] = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                _mm512_set1_epi8(static_cast<char>(kOffset<D>)), v[t]));
      const float* d = x.d + row * nb + b;
      dx[t] = halves(d[0], two ? d[1] : 0.0f);
    }
  }
};

// acc += (the pair's exact per-lane integer sums) * (per-lane weight scale wf x activation scale).
template <DType D, int TT>
inline void accumulate(__m512i u, __m512 wf, const XPair<D, TT>& xp, __m512 (&acc)[TT]) {
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
    // Started from minus the offset sums: no subtraction after the products.
    const __m512i p =
        _mm512_dpbusd_epi32(kOffset<D> != 0 ? xp.off[t] : _mm512_setzero_si512(), u, xp.v[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wf, xp.dx[t]), acc[t]);
  }
}

// Q8_0 / Q4_0 / Q5_0 / MXFP4: y[t][r] = row r of w . row t of x, for R weight rows and TT
// activation rows.
template <DType D, int R, int TT>
void tile(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x, std::size_t K,
          std::size_t t0, float* y, std::size_t ldy) {
  const std::size_t nb = K / 32;
  const std::size_t pf = kPrefetchRows * rb;  // the same place in the next tile's rows
  __m512 acc[R][TT];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) prefetch_ahead(w + r * rb + b * dtype_size(D), pf);
    XPair<D, TT> xp;
    xp.load(x, K, nb, t0, b, two);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float f0, f1;
      const __m512i u = decode_pair<D>(w + r * rb, b, two, f0, f1);
      accumulate<D, TT>(u, halves(f0, f1), xp, acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[t * ldy + r] = hsum(acc[r][t]);
}

// ---- Q8_0 / Q4_0 / Q5_0 / MXFP4 prefill: both sides laid out once ---------------------------
//
// tile() decodes its R weight rows' block pairs again for every TT activation rows it meets, and
// makes each activation row's side of a block pair (XPair) again for every R weight rows. From
// kDecodedMinT activation rows, both are laid out once instead: per chunk of activation rows, each
// row's XPair for every block pair (at most kXPairBytes a chunk, so that they stay in L2; at most
// kQuantTChunk rows), and per tile of kQuantTileRows weight rows, their decoded block pairs (bytes
// and per-lane scales), which every tile of the chunk's activation rows then reads. The same values
// go into the same accumulate in the same order: the same bits as tile().
constexpr std::size_t kDecodedMinT = 4;
constexpr std::size_t kXPairBytes = std::size_t{512} << 10;

struct DecodedPair {
  __m512i u;
  __m512 wf;
};

// R weight rows at w (stride rb), block pairs p = 0 .. np - 1, into out[p * R + r]; each line read
// is matched by a prefetch of the line pf bytes on (the next tile's rows).
template <DType D, int R>
void decode_tile(const std::uint8_t* w, std::size_t rb, std::size_t nb, std::size_t pf,
                 DecodedPair* out) {
  for (std::size_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch_ahead(w + r * rb + b * dtype_size(D), pf);
      float f0, f1;
      DecodedPair& d = out[b / 2 * R + static_cast<std::size_t>(r)];
      d.u = decode_pair<D>(w + r * rb, b, two, f0, f1);
      d.wf = halves(f0, f1);
    }
  }
}

// tile() on weight rows laid out by decode_tile and TT activation rows' XPairs at xs (row stride
// np pairs).
template <DType D, int R, int TT>
void tile_decoded(const DecodedPair* dw, const XPair<D, 1>* xs, std::size_t np, float* y,
                  std::size_t ldy) {
  __m512 acc[R][TT];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < np; ++p) {
    XPair<D, TT> xp;
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const XPair<D, 1>& q = xs[static_cast<std::size_t>(t) * np + p];
      xp.v[t] = q.v[0];
      xp.off[t] = q.off[0];
      xp.dx[t] = q.dx[0];
    }
    const DecodedPair* d = dw + p * R;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) accumulate<D, TT>(d[r].u, d[r].wf, xp, acc[r]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[t * ldy + r] = hsum(acc[r][t]);
}

// Activation rows [0, n) of one chunk (XPairs at xs) against the R decoded weight rows dw: tiles
// of 4 rows, then the 1-3 left.
template <DType D, int R>
void chunk_tiles(const DecodedPair* dw, const XPair<D, 1>* xs, std::size_t np, std::size_t n,
                 float* y, std::size_t ldy) {
  std::size_t t = 0;
  for (; t + 4 <= n; t += 4) tile_decoded<D, R, 4>(dw, xs + t * np, np, y + t * ldy, ldy);
  switch (n - t) {
    case 3:
      tile_decoded<D, R, 3>(dw, xs + t * np, np, y + t * ldy, ldy);
      break;
    case 2:
      tile_decoded<D, R, 2>(dw, xs + t * np, np, y + t * ldy, ldy);
      break;
    case 1:
      tile_decoded<D, R, 1>(dw, xs + t * np, np, y + t * ldy, ldy);
      break;
    default:
      break;
  }
}

thread_local Scratch tls_decoded, tls_xpairs;

// quant_rows_of's loops for the blocks-of-32 types, on both sides laid out once (above).
template <DType D>
void decoded_rows(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                  std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  constexpr int kR = kQuantTileRows;
  const std::size_t K = w.cols, nb = K / 32, np = (nb + 1) / 2;
  const std::size_t rb = dtype_row_bytes(D, K);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  // Activation rows a chunk: a multiple of 4, from 4 to kQuantTChunk.
  std::size_t chunk = kXPairBytes / (np * sizeof(XPair<D, 1>)) / 4 * 4;
  chunk = chunk < 4 ? 4 : chunk > kQuantTChunk ? kQuantTChunk : chunk;
  auto* dw = scratch_array<DecodedPair>(tls_decoded, np * kR);
  auto* xs = scratch_array<XPair<D, 1>>(tls_xpairs, chunk * np);
  for (std::size_t tc = 0; tc < T; tc += chunk) {
    const std::size_t tn = tc + chunk < T ? tc + chunk : T;
    for (std::size_t t = tc; t < tn; ++t)
      for (std::size_t p = 0; p < np; ++p)
        xs[(t - tc) * np + p].load(x, K, nb, t, 2 * p, 2 * p + 1 < nb);
    std::size_t n = n0;
    for (; n + kR <= n1; n += kR) {
      decode_tile<D, kR>(base + n * rb, rb, nb, kPrefetchRows * rb, dw);
      chunk_tiles<D, kR>(dw, xs, np, tn - tc, y + tc * ldy + n, ldy);
    }
    for (; n < n1; ++n) {
      decode_tile<D, 1>(base + n * rb, rb, nb, rb, dw);
      chunk_tiles<D, 1>(dw, xs, np, tn - tc, y + tc * ldy + n, ldy);
    }
  }
}

// Q8_0 / Q4_0 / Q5_0 / MXFP4 decode (one activation row): rows [n0, n1) of w in decode_halves'
// order (quant_rows.h: two sequential streams, two rows' independent sums), with the activation
// side of every block pair (its XPair: the bytes, offset sums and scales, which tile<D, 1, 1>
// recomputes for each weight row) laid out once per call, and tile's own accumulate: the same
// bits.
template <DType D>
void decode_rows(const quant::ActivationBlocks& x, const WeightView& w, std::size_t n0,
                 std::size_t n1, float* y, Scratch& scratch) {
  const std::size_t K = w.cols;
  const std::size_t nb = K / 32, np = (nb + 1) / 2;
  const std::size_t rb = dtype_row_bytes(D, K);
  const std::size_t pf = kPrefetchRows * rb;
  auto* xp = scratch_array<XPair<D, 1>>(scratch, np);
  for (std::size_t p = 0; p < np; ++p) xp[p].load(x, K, nb, 0, 2 * p, 2 * p + 1 < nb);
  const std::size_t full = nb / 2;  // pairs with both blocks
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  // Rows n and n + apart (count 2), or row n alone (count 1).
  const auto rows = [&](auto count, std::size_t n, std::size_t apart) {
    constexpr int kRows = decltype(count)::value;
    const std::uint8_t* row[2] = {base + n * rb, base + (n + apart) * rb};
    __m512 acc[2][1] = {{_mm512_setzero_ps()}, {_mm512_setzero_ps()}};
    const auto pair = [&](std::size_t p, bool two) {
      const std::size_t b = 2 * p;
#pragma GCC unroll 2
      for (int r = 0; r < kRows; ++r) {
        prefetch_ahead(row[r] + b * dtype_size(D), pf);
        float f0, f1;
        const __m512i u = decode_pair<D>(row[r], b, two, f0, f1);
        accumulate<D, 1>(u, halves(f0, f1), xp[p], acc[r]);
      }
    };
    for (std::size_t p = 0; p < full; ++p) pair(p, true);
    if (full < np) pair(full, false);
    y[n] = hsum(acc[0][0]);
    if constexpr (kRows == 2) y[n + apart] = hsum(acc[1][0]);
  };
  decode_halves(
      n0, n1,
      [&](std::size_t n, std::size_t apart) { rows(std::integral_constant<int, 2>{}, n, apart); },
      [&](std::size_t n) { rows(std::integral_constant<int, 1>{}, n, 0); });
}

// Q4_K on the tiles: its sub-blocks in the order kQ4kTileOrder, two at a time. Sub-block 2p is
// the low nibbles of qs[32p .. 32p + 31] and 2p + 1 the high ones, so the 64 bytes qs[64h ..
// 64h + 63] give, masked, the sub-blocks 4h and 4h + 2 and, shifted right by 4 and masked, 4h + 1
// and 4h + 3: no shuffle, where the super-block's order takes a variable shift of one half (see
// superblock_pair). The activation bytes are laid out in the same order once per call
// (q4k_tile_activations), and the scales picked to match (tile_k's kPick). On the 2-core AMD
// EPYC (Zen 4), 2026-12-01, Q4_K decode ran 16-23% faster than in the super-block's order
// (`RKV_BENCH_CYCLE_MIB=1 rkv_bench --benchmark_filter=QuantMatmul/down/T1/q4_k/threads:1`,
// three alternating rounds; docs/PERFORMANCE-LOG.md).
constexpr int kQ4kTileOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};

// Sub-blocks kQ4kTileOrder[2v] and [2v + 1] of a Q4_K super-block at blk as unsigned bytes.
inline __m512i q4k_tile_pair(const std::uint8_t* blk, int v) {
  const __m512i qs = _mm512_loadu_si512(blk + 16 + 64 * (v / 2));
  return _mm512_and_si512(v % 2 ? _mm512_srli_epi16(qs, 4) : qs, _mm512_set1_epi8(0x0F));
}

// Elements 64p .. 64p + 63 of a Q4_K / Q6_K super-block at blk (the sub-blocks 2p, 2p + 1) as
// unsigned bytes u: Q4_K's nibbles, Q6_K's q + 32 (quant::SuperBlock).
template <DType D>
inline __m512i superblock_pair(const std::uint8_t* blk, int p) {
  if constexpr (D == DType::Q4_K) {
    // Sub-block 2p is the low nibbles of qs[32p .. 32p + 31], 2p + 1 the high ones: the 32 bytes
    // in both halves, the upper half shifted right by 4.
    const __m512i qs = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p)));
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(qs, shift), _mm512_set1_epi8(0x0F));
  } else {
    // Half h = p / 2 of the super-block; sub-blocks 2p, 2p + 1 are its quarters q0 = 2 (p % 2)
    // and q0 + 1: the low (p even) or high (p odd) nibbles of ql[64 h .. 64 h + 63], with bits
    // 2 q0 (first) and 2 q0 + 2 (second) of qh[32 h .. 32 h + 31] above them.
    const int h = p / 2, q0 = 2 * (p % 2);
    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(ql, 4 * (p % 2)), _mm512_set1_epi8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 2 * q0)),
                                           _mm256_srli_epi16(qh, 2 * q0 + 2), 1);
    const __m512i hi = _mm512_and_si512(_mm512_slli_epi16(qh2, 4), _mm512_set1_epi8(0x30));
    return _mm512_or_si512(lo, hi);
  }
}

// Q4_K / Q6_K against super-block activations (quant::SuperBlock), a block pair (64 elements)
// at a time: vpmaddubsw multiplies the unsigned weights u (Q4_K's nibbles, Q6_K's q + 32) by the
// activation bytes into pairs of int16, and vpdpwssd multiplies those by the int16 scale of each
// group of 16 (picked with vpermw) and sums them into int32 lanes, exact over the whole
// super-block. Once per super-block: acc += I * (d * dx), and the mins (Q6_K: its offset 32 sc)
// as M = the sum of m[g] * bsum[g] over the sixteen groups, exact in int32 (vpmaddwd: eight
// lanes of two groups), into a second accumulator: accm += M * (dmin * dx), subtracted from acc
// at the end (sixteen float products a super-block before 2026-12-01).
// The R weight rows are rs bytes apart (rb: adjacent rows) and their outputs ys floats apart.
template <DType D, int R, int TT>
void tile_k(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x, std::size_t K,
            std::size_t t0, float* y, std::size_t ldy, std::size_t rs, std::size_t ys) {
  const std::size_t pf = kPrefetchRows * rb;
  constexpr std::size_t kBytes = D == DType::Q4_K ? 144 : 210;
  const std::size_t nsb = K / 256, ng = K / 16;
  // vpermw indices: int16 lanes 0-15 of pair p take the two groups (of 16) of its first
  // sub-block, lanes 16-31 those of its second (Q6_K: sub-blocks 2p, 2p + 1; Q4_K: the tile
  // order's).
  alignas(64) static constexpr auto kPick = [] {
    std::array<std::array<std::int16_t, 32>, 4> pick{};
    for (int p = 0; p < 4; ++p)
      for (int i = 0; i < 32; ++i) {
        const int sub = D == DType::Q4_K ? kQ4kTileOrder[2 * p + i / 16] : 2 * p + i / 16;
        pick[static_cast<std::size_t>(p)][static_cast<std::size_t>(i)] =
            static_cast<std::int16_t>(2 * sub + (i / 8) % 2);
      }
    return pick;
  }();
  __m512 acc[R][TT];
  __m256 accm[R][TT];  // the mins' part, subtracted at the end
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      accm[r][t] = _mm256_setzero_ps();
    }
  const std::int8_t* xq = x.qk + t0 * K;
  const float* xd = x.dk + t0 * nsb;
  const std::int16_t* xb = x.bsum + t0 * ng;
  for (std::size_t sb = 0; sb < nsb; ++sb) {
    __m512i sc16[R];  // the sixteen scales, one per 16 elements, int16 (lanes 16-31 unused)
    __m256i m16[R];   // the sixteen mins m[g], int16 (Q6_K: 32 sc[g])
    float d[R], dmin[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* blk = w + r * rs + sb * kBytes;
      for (std::size_t off = 0; off < kBytes; off += 64) prefetch_ahead(blk + off, pf);
      if constexpr (D == DType::Q4_K) {
        std::uint64_t sc8, m8;
        quant::q4_k_scales_mins(blk + 4, sc8, m8);
        // Each sub-block's scale and min for both of its groups of 16.
        const __m128i sc = _mm_cvtsi64_si128(static_cast<long long>(sc8));
        const __m128i mn = _mm_cvtsi64_si128(static_cast<long long>(m8));
        sc16[r] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc, sc)));
        m16[r] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
        d[r] = h2f(blk);
        dmin[r] = h2f(blk + 2);
      } else {
        const __m256i s =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
        sc16[r] = _mm512_castsi256_si512(s);
        m16[r] = _mm256_slli_epi16(s, 5);
        d[r] = dmin[r] = h2f(blk + 208);
      }
    }
    __m512i isum[R][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) isum[r][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // the pair of sub-blocks 2p, 2p + 1
      const __m512i pick = _mm512_load_si512(kPick[static_cast<std::size_t>(p)].data());
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* blk = w + r * rs + sb * kBytes;
        const __m512i u = D == DType::Q4_K ? q4k_tile_pair(blk, p) : superblock_pair<D>(blk, p);
        const __m512i scale = _mm512_permutexvar_epi16(pick, sc16[r]);
#pragma GCC unroll 4
        for (int t = 0; t < TT; ++t) {
          const __m512i xv = _mm512_loadu_si512(xq + t * K + sb * 256 + 64 * p);
          isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(u, xv), scale);
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const float dx = xd[t * nsb + sb];
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + t * ng + sb * 16));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r][t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][t]), _mm512_set1_ps(d[r] * dx), acc[r][t]);
        // M = the sum of m[g] bsum[g], exact in int32 (eight lanes of pairs of groups).
        accm[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(m16[r], bs)),
                                     _mm256_set1_ps(dmin[r] * dx), accm[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      y[t * ldy + r * ys] = hsum(_mm512_sub_ps(acc[r][t], _mm512_zextps256_ps512(accm[r][t])));
}

// This ISA's tile for quant_rows.h.
template <DType D>
struct Tile {
  // Decode (one activation row): one weight row at a time, for every type.
  static constexpr bool kDecodeRowByRow = true;

  template <int R, int TT>
  static void run(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x,
                  std::size_t K, std::size_t t0, float* y, std::size_t ldy) {
    if constexpr (D == DType::Q4_K || D == DType::Q6_K)
      tile_k<D, R, TT>(w, rb, x, K, t0, y, ldy, rb, 1);
    else
      tile<D, R, TT>(w, rb, x, K, t0, y, ldy);
  }

  // Decode of Q4_K / Q6_K: two rows at a time in decode_halves' order (quant_rows.h), rows n and
  // n + apart (two adjacent rows at a time ran slower from memory: each stream skipped a row).
  static constexpr bool kDecodeHalves = D == DType::Q4_K || D == DType::Q6_K;
  static void decode_pair(const std::uint8_t* w, std::size_t rb, std::size_t apart,
                          const quant::ActivationBlocks& x, std::size_t K, float* y) {
    tile_k<D, 2, 1>(w, rb, x, K, 0, y, 1, apart * rb, apart);
  }
};

// ---- Q4_K / Q6_K prefill on panels of 16 weight rows ----------------------------------------
//
// From kPanelMinT activation rows the weights are laid out once per call, 16 rows at a time, so
// that one vpdpbusd multiplies four elements of sixteen rows by the same four activation bytes
// (broadcast): its sixteen int32 lanes are then the sixteen rows' dot products, summed over a
// whole group (Q4_K's sub-block of 32, Q6_K's 16) before one vpmulld by the rows' integer scales.
// That is 64 vpdpbusd and 8 (Q4_K) or 16 (Q6_K) vpmulld per 16 rows, activation row and
// super-block, against 128 multiplies for the tiles above. Once per super-block, acc += I * (d *
// dx), less the mins as float products dmin m against the activations' dx * bsum (per sub-block
// of Q4_K, per group of 16 of Q6_K); the lanes are the output rows, stored together.
//
// A panel's super-block in the scratch buffer: U, the 64 groups of four elements (k4) each as
// sixteen rows x 4 bytes (64 bytes); then per group g its sixteen rows' scales (int32), their
// dmin m[g] (floats; Q6_K: d 32 sc[g]), and the rows' d.
// From how many activation rows the panels run (rkv_bench QuantMatmul down on Zen 4: at T8, one
// pair of runs, Q4_K's panels 1.16x the tiles and Q6_K's, whose layout costs more, 0.79x; at T16,
// 2 threads, 4 alternating rounds, Q6_K's panels 1.3x the tiles, 431-439 us against 560-581).
template <DType D>
constexpr std::size_t kPanelMinT = D == DType::Q4_K ? 8 : 16;
constexpr std::size_t kSlabRows = 64;  // weight rows laid out at a time (4 panels)
constexpr int kPanelT = 8;             // activation rows per pass over a panel

template <DType D>
constexpr int kGroups = D == DType::Q4_K ? 8 : 16;  // groups with their own scale, per 256
template <DType D>
constexpr std::size_t kPanelSbBytes = 4096 + static_cast<std::size_t>(kGroups<D>) * 128 + 64;

thread_local Scratch tls_panels, tls_fb, tls_decode;

// Lays out `rows` (at most 16; the rest zero) weight rows of nsb super-blocks at w (stride rb).
template <DType D>
void unpack_panel(const std::uint8_t* w, std::size_t rb, std::size_t rows, std::size_t nsb,
                  std::uint8_t* out) {
  constexpr int G = kGroups<D>;
  constexpr std::size_t kBytes = D == DType::Q4_K ? 144 : 210;
  for (std::size_t sb = 0; sb < nsb; ++sb) {
    std::uint8_t* o = out + sb * kPanelSbBytes<D>;
    auto* sc = reinterpret_cast<std::int32_t*>(o + 4096);
    auto* mw = reinterpret_cast<float*>(o + 4096 + G * 64);
    auto* dv = reinterpret_cast<float*>(o + 4096 + G * 128);
    for (int p = 0; p < 4; ++p) {
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i)
        r[i] = i < rows ? superblock_pair<D>(w + i * rb + sb * kBytes, p) : _mm512_setzero_si512();
      transpose16x16(r);  // r[k]: the rows' elements 64p + 4k .. 64p + 4k + 3
      for (int k = 0; k < 16; ++k) _mm512_store_si512(o + (16 * p + k) * 64, r[k]);
    }
    for (std::size_t i = 0; i < 16; ++i) {
      if (i >= rows) {
        for (int g = 0; g < G; ++g) {
          sc[g * 16 + static_cast<int>(i)] = 0;
          mw[g * 16 + static_cast<int>(i)] = 0.0f;
        }
        dv[i] = 0.0f;
        continue;
      }
      const std::uint8_t* blk = w + i * rb + sb * kBytes;
      if constexpr (D == DType::Q4_K) {
        std::uint64_t sc8, m8;
        quant::q4_k_scales_mins(blk + 4, sc8, m8);
        const float dmin = h2f(blk + 2);
        for (int g = 0; g < G; ++g) {
          sc[g * 16 + static_cast<int>(i)] = static_cast<std::int32_t>((sc8 >> (8 * g)) & 0xFF);
          mw[g * 16 + static_cast<int>(i)] = dmin * static_cast<float>((m8 >> (8 * g)) & 0xFF);
        }
        dv[i] = h2f(blk);
      } else {
        const float d = h2f(blk + 208);
        const auto* s8 = reinterpret_cast<const std::int8_t*>(blk + 192);
        for (int g = 0; g < G; ++g) {
          sc[g * 16 + static_cast<int>(i)] = s8[g];
          mw[g * 16 + static_cast<int>(i)] = d * static_cast<float>(32 * s8[g]);
        }
        dv[i] = d;
      }
    }
  }
}

inline std::int32_t load_i32(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// y[t][0 .. rows) for TT activation rows from xq (stride K): fb holds each row's dx * (the sum of
// its activation bytes) per super-block and group, xd its super-block scales.
template <DType D, int TT>
void panel_block(const std::uint8_t* panel, std::size_t nsb, const std::int8_t* xq, std::size_t K,
                 const float* fb, const float* xd, float* y, std::size_t ldy, std::size_t rows) {
  constexpr int G = kGroups<D>;
  constexpr int kSteps = 64 / G;  // k4 steps per group
  __m512 acc[TT];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  for (std::size_t sb = 0; sb < nsb; ++sb) {
    const std::uint8_t* o = panel + sb * kPanelSbBytes<D>;
    const auto* sc = reinterpret_cast<const std::int32_t*>(o + 4096);
    const auto* mw = reinterpret_cast<const float*>(o + 4096 + G * 64);
    const auto* dv = reinterpret_cast<const float*>(o + 4096 + G * 128);
    const std::int8_t* xs = xq + sb * 256;
    __m512i isum[TT];
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) isum[t] = _mm512_setzero_si512();
    for (int g = 0; g < G; ++g) {
      __m512i dp[TT];
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) dp[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < kSteps; ++k) {
        const int k4 = g * kSteps + k;
        const __m512i u = _mm512_load_si512(o + k4 * 64);
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t)
          dp[t] = _mm512_dpbusd_epi32(dp[t], u, _mm512_set1_epi32(load_i32(xs + t * K + 4 * k4)));
      }
      const __m512i s = _mm512_load_si512(sc + g * 16);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dp[t], s));
    }
    const __m512 d = _mm512_load_ps(dv);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                               _mm512_mul_ps(d, _mm512_set1_ps(xd[t * nsb + sb])), acc[t]);
    for (int g = 0; g < G; ++g) {
      const __m512 m = _mm512_load_ps(mw + g * 16);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t)
        acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(fb[(t * nsb + sb) * G + g]), acc[t]);
    }
  }
  const __mmask16 mask = tail_mask16(rows);
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

template <DType D, int TT>
void panel_blocks(const std::uint8_t* panels, std::size_t panel_bytes, std::size_t nrows,
                  std::size_t nsb, const std::int8_t* xq, std::size_t K, const float* fb,
                  const float* xd, float* y, std::size_t ldy) {
  for (std::size_t r = 0; r < nrows; r += 16)
    panel_block<D, TT>(panels + (r / 16) * panel_bytes, nsb, xq, K, fb, xd, y + r, ldy,
                       nrows - r < 16 ? nrows - r : 16);
}

template <DType D>
void panel_rows(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  constexpr int G = kGroups<D>;
  const std::size_t K = w.cols, nsb = K / 256;
  const std::size_t rb = dtype_row_bytes(D, K);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  // Each activation row's dx * (sum of its bytes) per super-block and group: Q6_K's groups are
  // the activations' own groups of 16 (x.fsum as it is), Q4_K's the pairs of them.
  const float* fb = x.fsum;
  if constexpr (D == DType::Q4_K) {
    auto* fb4 = static_cast<float*>(tls_fb.get(T * nsb * G * sizeof(float)));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t sb = 0; sb < nsb; ++sb) {
        const float dx = x.dk[t * nsb + sb];
        const std::int16_t* bs = x.bsum + t * (K / 16) + sb * 16;
        for (int g = 0; g < G; ++g)
          fb4[(t * nsb + sb) * G + static_cast<std::size_t>(g)] =
              dx * static_cast<float>(bs[2 * g] + bs[2 * g + 1]);
      }
    fb = fb4;
  }
  const std::size_t panel_bytes = nsb * kPanelSbBytes<D>;
  auto* panels = static_cast<std::uint8_t*>(tls_panels.get((kSlabRows / 16) * panel_bytes));
  for (std::size_t s0 = n0; s0 < n1; s0 += kSlabRows) {
    const std::size_t nrows = n1 - s0 < kSlabRows ? n1 - s0 : kSlabRows;
    for (std::size_t r = 0; r < nrows; r += 16)
      unpack_panel<D>(base + (s0 + r) * rb, rb, nrows - r < 16 ? nrows - r : 16, nsb,
                      panels + (r / 16) * panel_bytes);
    // The rows of x kPanelT at a time, then the rest as 4, 2 and 1.
    std::size_t t = 0;
    auto run = [&](auto tt) {
      constexpr int kT = decltype(tt)::value;
      panel_blocks<D, kT>(panels, panel_bytes, nrows, nsb, x.qk + t * K, K, fb + t * nsb * G,
                          x.dk + t * nsb, y + t * ldy + s0, ldy);
      t += kT;
    };
    while (t + kPanelT <= T) run(std::integral_constant<int, kPanelT>{});
    if ((T - t) & 4) run(std::integral_constant<int, 4>{});
    if ((T - t) & 2) run(std::integral_constant<int, 2>{});
    if ((T - t) & 1) run(std::integral_constant<int, 1>{});
  }
}

thread_local Scratch tls_q4k_tile;

// x with its super-block activation bytes in the Q4_K tiles' order (kQ4kTileOrder): a copy per
// call, that is per chunk of weight rows a thread takes, T x K bytes (T under 8; a decode step's
// K is a few kilobytes, against the 32 rows or more of a chunk, tens of kilobytes of Q4_K).
quant::ActivationBlocks q4k_tile_activations(const quant::ActivationBlocks& x, std::size_t T,
                                             std::size_t K) {
  auto* q = static_cast<std::int8_t*>(tls_q4k_tile.get(T * K));
  for (std::size_t sb = 0; sb < T * K / 256; ++sb)
    for (int i = 0; i < 8; ++i)
      std::memcpy(q + sb * 256 + 32 * static_cast<std::size_t>(i),
                  x.qk + sb * 256 + 32 * static_cast<std::size_t>(kQ4kTileOrder[i]), 32);
  quant::ActivationBlocks out = x;
  out.qk = q;
  return out;
}

// The VNNI kernels: Q4_K / Q6_K from kPanelMinT rows on panels, the blocks-of-32 types from
// kDecodedMinT rows on tiles of decoded weight rows, everything else on the tiles.
void quantized_rows_vnni(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                         std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  if (T == 1 && n0 < n1) {
    switch (w.dtype) {
      case DType::Q8_0:
        return decode_rows<DType::Q8_0>(x, w, n0, n1, y, tls_decode);
      case DType::Q4_0:
        return decode_rows<DType::Q4_0>(x, w, n0, n1, y, tls_decode);
      case DType::Q5_0:
        return decode_rows<DType::Q5_0>(x, w, n0, n1, y, tls_decode);
      case DType::MXFP4:
        return decode_rows<DType::MXFP4>(x, w, n0, n1, y, tls_decode);
      default:
        break;
    }
  }
  if (n0 < n1 && T >= kDecodedMinT) {
    switch (w.dtype) {
      case DType::Q8_0:
        return decoded_rows<DType::Q8_0>(x, T, w, n0, n1, y, ldy);
      case DType::Q4_0:
        return decoded_rows<DType::Q4_0>(x, T, w, n0, n1, y, ldy);
      case DType::Q5_0:
        return decoded_rows<DType::Q5_0>(x, T, w, n0, n1, y, ldy);
      case DType::MXFP4:
        return decoded_rows<DType::MXFP4>(x, T, w, n0, n1, y, ldy);
      default:
        break;
    }
  }
  if (n0 < n1 && w.dtype == DType::Q4_K && T >= kPanelMinT<DType::Q4_K>)
    return panel_rows<DType::Q4_K>(x, T, w, n0, n1, y, ldy);
  if (n0 < n1 && w.dtype == DType::Q6_K && T >= kPanelMinT<DType::Q6_K>)
    return panel_rows<DType::Q6_K>(x, T, w, n0, n1, y, ldy);
  if (n0 < n1 && w.dtype == DType::Q4_K)
    return quantized_rows<Tile>(q4k_tile_activations(x, T, w.cols), T, w, n0, n1, y, ldy);
  quantized_rows<Tile>(x, T, w, n0, n1, y, ldy);
}

}  // namespace

QuantizedRowsFn quantized_rows_avx512vnni_fn() {
  // Decode reads one weight row at a time, a single stream the hardware prefetcher follows (four
  // interleaved rows held it back: rkv_bench QuantMatmul T1, 1.0-2.4x, Q8_0 most).
  return &quantized_rows_vnni;
}

}  // namespace rkv::kernels
