// AVX2 kernels for block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4: core/quant.h)
// against activations quantized to 8 bits in blocks of 32 (quant::quantize_activations), or for
// Q4_K/Q6_K in super-blocks of 256 (quant::quantize_activations_k); the AVX2 versions of both
// quantizers are here and give the same bytes.
//
// Each 32-element weight block of the blocks-of-32 types is decoded to 32 small integers in a
// register and its float scale; its product with an activation block is vpmaddubsw (unsigned x
// signed bytes to pairs of int16; signed weights go through the usual abs/sign trick, or, for
// Q4_0, Q5_0 and MXFP4 against one activation row, stay unsigned codes value + offset, the
// offset times the activations' sums coming off after) then vpmaddwd by 1 to eight int32,
// converted to float and accumulated with one FMA by (weight scale x activation scale). MXFP4's
// 4-bit codes become their values through a 16-byte table (vpshufb), and its blocks are summed in
// llama.cpp's order (tile_mxfp4). Q4_K/Q6_K (tile_k) keep their weights unsigned and multiply by
// their integer scales with vpmaddwd, so a whole super-block is summed in int32 (and its mins term
// too) before two float FMAs. A tile is R weight rows x TT activation rows, so each decoded block
// serves TT rows of x (decode: TT = 1..4; prefill: the rows of x in chunks of 64, so that the chunk
// stays in cache while the thread's weight rows stream past it).
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

#include "kernels/kernels.h"
#include "kernels/prefetch.h"
#include "kernels/quant_rows.h"

namespace rkv::kernels {

QuantizedRowsFn quantized_rows_avx2_fn();
QuantizeActivationsFn quantize_activations_avx2_fn();
QuantizeActivationsKFn quantize_activations_k_avx2_fn();

namespace {

// Software prefetch distance in weight rows: each row's bytes are prefetched one 4-row tile
// ahead, as matmul_avx2.cpp's GEMV prefetches its next block (decode streams the weights from
// memory). rkv_bench QuantMatmul T1, 1 thread, against 512 bytes ahead: 1.2x (Q8_0, Q4_0) to
// 2x (Q4_K, Q6_K) the GB/s.
constexpr std::size_t kPrefetchRows = 4;

inline float h2f(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One decoded 32-element weight block of the blocks-of-32 types: w[k] = f * q[k].
struct Dec {
  __m256i q;  // 32 x int8
  float f;
};

// The 32 nibbles of 16 bytes: low nibbles in the low 128 bits (elements 0-15), high in the high.
// The load broadcasts the bytes to both halves and one variable shift moves the high half's
// nibbles down (no cross-lane insert: fewer instructions on the shuffle ports).
inline __m256i nibbles(const std::uint8_t* p) {
  const __m256i b =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// 0xFF in byte k where bit k of the 32-bit word is set, 0 where it is clear.
inline __m256i bit_bytes(std::uint32_t bits) {
  const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                       2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), idx);
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
}

// 0xF0 in byte k where bit k of the 32-bit word is clear, 0 where it is set: OR-ed into a
// nibble n, the byte is n - 16 (bit clear) or n (bit set) as int8, i.e. (n | bit << 4) - 16.
inline __m256i q5_offsets(std::uint32_t bits) {
  return _mm256_andnot_si256(bit_bytes(bits), _mm256_set1_epi8(static_cast<char>(0xF0)));
}

// 0x10 in byte k where bit k of the 32-bit word is set, 0 where it is clear: OR-ed into a
// nibble n, the byte is Q5_0's unsigned code n | bit << 4 (its value plus 16).
inline __m256i q5_high_bits(std::uint32_t bits) {
  return _mm256_and_si256(bit_bytes(bits), _mm256_set1_epi8(0x10));
}

// MXFP4's code -> value table (quant::kMxfp4Values) in both 128-bit halves, for vpshufb.
inline __m256i mxfp4_values() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kMxfp4Values)));
}

template <DType D>
inline void decode(const std::uint8_t* row, std::size_t b, Dec& o) {
  if constexpr (D == DType::Q8_0) {
    const std::uint8_t* blk = row + b * 34;
    o.f = h2f(blk);
    o.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else if constexpr (D == DType::Q4_0) {
    const std::uint8_t* blk = row + b * 18;
    o.f = h2f(blk);
    o.q = _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8));
  } else if constexpr (D == DType::Q5_0) {
    const std::uint8_t* blk = row + b * 22;
    o.f = h2f(blk);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    o.q = _mm256_or_si256(nibbles(blk + 6), q5_offsets(qh));
  } else {  // MXFP4
    const std::uint8_t* blk = row + b * 17;
    o.f = quant::e8m0_half(blk[0]);
    o.q = _mm256_shuffle_epi8(mxfp4_values(), nibbles(blk + 1));
  }
}

// Q4_0 and Q5_0 as unsigned codes u = q + kOffset (0..15, 0..31), for vpmaddubsw straight.
template <DType D>
constexpr int kUnsignedOffset = D == DType::Q4_0   ? 8
                                : D == DType::Q5_0 ? 16
                                                   : 0;

template <DType D>
inline void decode_unsigned(const std::uint8_t* row, std::size_t b, Dec& o) {
  static_assert(kUnsignedOffset<D> != 0);
  if constexpr (D == DType::Q4_0) {
    const std::uint8_t* blk = row + b * 18;
    o.f = h2f(blk);
    o.q = nibbles(blk + 2);
  } else {
    const std::uint8_t* blk = row + b * 22;
    o.f = h2f(blk);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    o.q = _mm256_or_si256(nibbles(blk + 6), q5_high_bits(qh));
  }
}

// The eight int32 sums of four products of 32 unsigned bytes u by 32 signed bytes x (vpmaddubsw,
// then vpmaddwd by 1).
inline __m256i dot4_unsigned(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// The same for signed bytes q (aq = |q|), by the abs/sign trick.
inline __m256i dot4_signed(__m256i aq, __m256i q, __m256i x) {
  return dot4_unsigned(aq, _mm256_sign_epi8(x, q));
}

inline float hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[t][r] = row r of w . row t of x, for R weight rows and TT activation rows.
template <DType D, int R, int TT>
void tile(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x, std::size_t K,
          std::size_t t0, float* y, std::size_t ldy) {
  const std::size_t nb = K / 32;
  const std::size_t pf = kPrefetchRows * rb;  // the same place in the next tile's rows
  __m256 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
  const std::int8_t* xq = x.q + t0 * K;
  const float* xd = x.d + t0 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    if (b % 2 == 0)
      for (int r = 0; r < R; ++r) prefetch_ahead(w + r * rb + b * dtype_size(D), pf);
    __m256i xv[TT];
    float dx[TT];
    for (int t = 0; t < TT; ++t) {
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * K + b * 32));
      dx[t] = xd[t * nb + b];
    }
    if constexpr (TT == 1 && kUnsignedOffset<D> != 0) {
      // One activation row (decode): the unsigned codes by the activations, less the offset
      // times the activations' sums of four (once for the R rows): the same int32 sums as the
      // sign trick's below, without its vpabsb and vpsignb per row.
      const __m256i off = dot4_unsigned(_mm256_set1_epi8(kUnsignedOffset<D>), xv[0]);
      for (int r = 0; r < R; ++r) {
        Dec d;
        decode_unsigned<D>(w + r * rb, b, d);
        const __m256i p = _mm256_sub_epi32(dot4_unsigned(d.q, xv[0]), off);
        acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d.f * dx[0]), acc[r][0]);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        Dec d;
        decode<D>(w + r * rb, b, d);
        const __m256i aq = _mm256_abs_epi8(d.q);
        for (int t = 0; t < TT; ++t) {
          const __m256i p = dot4_signed(aq, d.q, xv[t]);
          acc[r][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d.f * dx[t]), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < R; ++r) y[t * ldy + r] = hsum(acc[r][t]);
}

// MXFP4 in ggml_vec_dot_mxfp4_q8_0's order (its AVX2 code): the even blocks accumulate in one
// vector and the odd blocks in another, by FMA of (activation scale x E8M0 scale) with the eight
// int32 sums of four products; the two vectors are added, then summed horizontally, and an odd
// last block is added after that as a scalar, scale x integer sum. (Two accumulators per output
// would be 32 vectors for 4 x 4 tiles; Tile::run gives this R <= 2, or R = 4 against one
// activation row.)
//
// The same float operations as ggml's, fewer instructions to get there (rkv_bench QuantMatmul
// T1 mxfp4 was compute-bound at about half the read bandwidth):
// - the E8M0 scale comes from a 256-entry table (kE8m0Half) by a load that broadcasts it, and
//   is multiplied by the activation scale in all eight lanes (the same product, rounded once);
// - the block's 16 bytes are broadcast to both halves of a register by the load, and one
//   variable shift puts the high nibbles in the high half (nibbles);
// - against one activation row, the codes map to their values plus 12 (kMxfp4Plus12, 0..24,
//   unsigned), so vpmaddubsw takes them straight, and 12 x the activations' four-element sums
//   (computed once per block for all R rows) comes off each int32 sum: the same integers as the
//   sign trick's, without its vpabsb and vpsignb per row.
constexpr std::array<float, 256> kE8m0Half = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e)
    t[static_cast<std::size_t>(e)] = quant::e8m0_half(static_cast<std::uint8_t>(e));
  return t;
}();

inline __m256i mxfp4_plus12() {
  alignas(16) static constexpr std::int8_t kMxfp4Plus12[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                               12, 11, 10, 9,  8,  6,  4,  0};
  return _mm256_broadcastsi128_si256(
      _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Plus12)));
}

template <int R, int TT>
void tile_mxfp4(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x,
                std::size_t K, std::size_t t0, float* y, std::size_t ldy) {
  const std::size_t nb = K / 32;
  const std::size_t pf = kPrefetchRows * rb;
  __m256 acc[R][TT][2];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
  const std::int8_t* xq = x.q + t0 * K;
  const float* xd = x.d + t0 * nb;
  const __m256i values = TT == 1 ? mxfp4_plus12() : mxfp4_values();
  std::size_t b = 0;
  for (; b + 1 < nb; b += 2) {
    for (int r = 0; r < R; ++r) prefetch_ahead(w + r * rb + b * 17, pf);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i xv[TT];
      __m256 dx[TT];
      for (int t = 0; t < TT; ++t) {
        xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * K + (b + h) * 32));
        dx[t] = _mm256_broadcast_ss(xd + t * nb + b + h);
      }
      __m256i c12{};  // TT == 1: 12 x the activations' sums of four
      if constexpr (TT == 1) c12 = dot4_unsigned(_mm256_set1_epi8(12), xv[0]);
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* blk = w + r * rb + (b + h) * 17;
        const __m256i q = _mm256_shuffle_epi8(values, nibbles(blk + 1));
        const __m256 f = _mm256_broadcast_ss(&kE8m0Half[blk[0]]);
        if constexpr (TT == 1) {
          const __m256i p = _mm256_sub_epi32(dot4_unsigned(q, xv[0]), c12);
          acc[r][0][h] =
              _mm256_fmadd_ps(_mm256_mul_ps(f, dx[0]), _mm256_cvtepi32_ps(p), acc[r][0][h]);
        } else {
          const __m256i aq = _mm256_abs_epi8(q);
          for (int t = 0; t < TT; ++t) {
            const __m256i p = dot4_signed(aq, q, xv[t]);
            acc[r][t][h] =
                _mm256_fmadd_ps(_mm256_mul_ps(f, dx[t]), _mm256_cvtepi32_ps(p), acc[r][t][h]);
          }
        }
      }
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < R; ++r) y[t * ldy + r] = hsum(_mm256_add_ps(acc[r][t][0], acc[r][t][1]));
  if (b < nb) {  // the odd last block
    for (int r = 0; r < R; ++r) {
      Dec d;
      decode<DType::MXFP4>(w + r * rb, b, d);
      const __m256i aq = _mm256_abs_epi8(d.q);
      for (int t = 0; t < TT; ++t) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * K + b * 32));
        const __m256i p = dot4_signed(aq, d.q, xv);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        y[t * ldy + r] += d.f * xd[t * nb + b] * static_cast<float>(_mm_cvtsi128_si32(s4));
      }
    }
  }
}

// vpshufb controls for tile_k's 32 elements j of a super-block: the int16 scale of elements 0-15
// in the low lane, of elements 16-31 in the high lane, out of a row's scales held eight to a
// lane in both lanes. Q4_K: one scale per 32 elements, scale j; Q6_K: one per 16, groups 2j and
// 2j + 1, taken from the register of groups 0-7 (j < 4) or 8-15.
struct ScalePick {
  alignas(32) std::uint8_t c[2][8][32];
};
constexpr ScalePick kScalePick = [] {
  ScalePick t{};
  for (int k6 = 0; k6 < 2; ++k6)
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 32; ++i) {
        const int lo = k6 ? 4 * (j % 4) : 2 * j, hi = k6 ? lo + 2 : lo;
        t.c[k6][j][i] = static_cast<std::uint8_t>((i < 16 ? lo : hi) + i % 2);
      }
  return t;
}();

// Q4_K / Q6_K against super-block activations (quant::SuperBlock), 32 elements at a time: the
// unsigned weights u (Q4_K's nibbles, Q6_K's q + 32) by the activation bytes with vpmaddubsw (the
// activations straight from memory), then by the int16 scales of the two groups of 16 with
// vpmaddwd (one vpshufb of the row's scales picks them), summed in exact int32 over the
// super-block. The mins (Q6_K: its offset 32 sc) are summed in int32 too, vpmaddwd of the sixteen
// m[g] by the activations' bsum[g]; once per super-block acc -= M * (dmin * dx), then acc +=
// I * (d * dx). At most eight int32 sums live in registers (16 ymm in all): Tile::run gives
// this R x TT <= 8.
template <DType D, int R, int TT>
void tile_k(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x, std::size_t K,
            std::size_t t0, float* y, std::size_t ldy) {
  static_assert(R * TT <= 8);
  const std::size_t pf = kPrefetchRows * rb;
  constexpr std::size_t kBytes = D == DType::Q4_K ? 144 : 210;
  const std::size_t nsb = K / 256, ng = K / 16;
  __m256 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
  const std::int8_t* xq = x.qk + t0 * K;
  const float* xd = x.dk + t0 * nsb;
  const std::int16_t* xs = x.bsum + t0 * ng;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (std::size_t sb = 0; sb < nsb; ++sb) {
    // Per row: the scales as int16, eight to a 128-bit lane in both lanes (Q6_K: groups 0-7 in
    // sc[r][0], 8-15 in sc[r][1]), and d; the mins' term (Q6_K: 32 sc per group of 16) goes into
    // acc here, so that only the scales stay live through the products.
    __m256i sc[R][D == DType::Q4_K ? 1 : 2];
    float d[R];
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* blk = w + r * rb + sb * kBytes;
      for (std::size_t off = 0; off < kBytes; off += 64) prefetch_ahead(blk + off, pf);
      __m256i m16;
      float dmin;
      if constexpr (D == DType::Q4_K) {
        std::uint64_t sc8, m8;
        quant::q4_k_scales_mins(blk + 4, sc8, m8);
        const __m128i s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8)));
        sc[r][0] = _mm256_broadcastsi128_si256(s16);
        const __m128i mn = _mm_cvtsi64_si128(static_cast<long long>(m8));
        m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
        d[r] = h2f(blk);
        dmin = h2f(blk + 2);
      } else {
        const __m256i s16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
        sc[r][0] = _mm256_permute2x128_si256(s16, s16, 0x00);
        sc[r][1] = _mm256_permute2x128_si256(s16, s16, 0x11);
        m16 = _mm256_slli_epi16(s16, 5);
        d[r] = dmin = h2f(blk + 208);
      }
      for (int t = 0; t < TT; ++t) {
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + t * ng + sb * 16));
        acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(m16, bs)),
                                     _mm256_set1_ps(dmin * xd[t * nsb + sb]), acc[r][t]);
      }
    }
    __m256i isum[R][TT];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < TT; ++t) isum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int p = 0; p < 4; ++p) {
      // Elements 64p to 64p + 63 (j = 2p and 2p + 1) per pass of a loop that is not unrolled:
      // unrolled, GCC 12 hoists every row's decoded weights to the top and spills them.
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* blk = w + r * rb + sb * kBytes;
        __m256i u[2];
        if constexpr (D == DType::Q4_K) {
          const __m256i qs =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p));
          u[0] = _mm256_and_si256(qs, low4);
          u[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
        } else {  // half h = p / 2, quarters 2 (p % 2) and 2 (p % 2) + 1
          const __m128i shift = _mm_cvtsi32_si128(4 * (p % 2));
          const __m256i qh = _mm256_srl_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * (p / 2))),
              shift);
          const __m256i hi = _mm256_set1_epi8(0x30);
          for (int e = 0; e < 2; ++e) {
            const __m256i ql =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * (p / 2) + 32 * e));
            u[e] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(ql, shift), low4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4 - 2 * e), hi));
          }
        }
        for (int e = 0; e < 2; ++e) {
          const int j = 2 * p + e;
          const __m256i scale = _mm256_shuffle_epi8(
              sc[r][D == DType::Q4_K ? 0 : p / 2],
              _mm256_load_si256(
                  reinterpret_cast<const __m256i*>(kScalePick.c[D == DType::Q6_K][j])));
          for (int t = 0; t < TT; ++t) {
            const __m256i xv = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(xq + t * K + sb * 256 + 32 * j));
            isum[r][t] = _mm256_add_epi32(isum[r][t],
                                          _mm256_madd_epi16(_mm256_maddubs_epi16(u[e], xv), scale));
          }
        }
      }
    }
    for (int t = 0; t < TT; ++t)
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]),
                                    _mm256_set1_ps(d[r] * xd[t * nsb + sb]), acc[r][t]);
  }
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < R; ++r) y[t * ldy + r] = hsum(acc[r][t]);
}

// This ISA's tile for quant_rows.h.
template <DType D>
struct Tile {
  // Decode (one activation row): Q8_0, Q4_K and Q6_K one weight row at a time (each thread then
  // streams one row after another), Q4_0, Q5_0 and MXFP4 in tiles of 4 rows (which share the
  // offset term of their unsigned codes). rkv_bench QuantMatmul T1, 2 alternating rounds, row by
  // row against tiles: q8_0 gate 1 thread 273-293 against 422-424 us, 2 threads 165-175 against
  // 231-236; q4_k down 156-163 against 169 (1 thread); q6_k down 230-239 against 245-250 (1
  // thread), 133-138 against 142-147 (2); mxfp4 gate 231 against 180-181 (1 thread); q4_0 gate
  // 245-247 against 195-199.
  static constexpr bool kDecodeRowByRow =
      !(D == DType::Q4_0 || D == DType::Q5_0 || D == DType::MXFP4);

  // Q4_K/Q6_K against 8 activation rows or more (quant_tile_rows calls this where it exists,
  // then runs the rows from the one returned in its tiles of 4): one weight row at a time against
  // eight activation rows (tile_k<D, 1, 8>), so that each decoded weight serves eight.
  template <int R>
  static std::size_t run_eights(const std::uint8_t* w, std::size_t rb,
                                const quant::ActivationBlocks& x, std::size_t K, std::size_t t0,
                                std::size_t tn, float* y,
                                std::size_t ldy) requires(D == DType::Q4_K || D == DType::Q6_K) {
    const std::size_t end = t0 + (tn - t0) / 8 * 8;
    for (int r = 0; r < R; ++r)
      for (std::size_t t = t0; t < end; t += 8)
        tile_k<D, 1, 8>(w + r * rb, rb, x, K, t, y + t * ldy + r, ldy);
    return end;
  }

  template <int R, int TT>
  static void run(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x,
                  std::size_t K, std::size_t t0, float* y, std::size_t ldy) {
    if constexpr (D == DType::Q4_K || D == DType::Q6_K) {
      if constexpr (R * TT > 8) {
        static_assert(R % 2 == 0 && TT <= 4);
        for (int r = 0; r < R; r += 2) tile_k<D, 2, TT>(w + r * rb, rb, x, K, t0, y + r, ldy);
      } else {
        tile_k<D, R, TT>(w, rb, x, K, t0, y, ldy);
      }
    } else if constexpr (D == DType::MXFP4) {
      if constexpr (R > 2 && TT > 1) {
        static_assert(R % 2 == 0);
        for (int r = 0; r < R; r += 2) tile_mxfp4<2, TT>(w + r * rb, rb, x, K, t0, y + r, ldy);
      } else {
        tile_mxfp4<R, TT>(w, rb, x, K, t0, y, ldy);
      }
    } else {
      tile<D, R, TT>(w, rb, x, K, t0, y, ldy);
    }
  }
};

// quant::quantize_activations(_k)'s float operations, eight lanes at a time: the largest |x|
// of v[0 .. n), and x * s rounded to nearest (ties to even) and clamped to [-127, 127], as int32.
inline float abs_max(const __m256* v, int n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; ++i) m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

inline __m256i round_scaled(__m256 v, __m256 sv) {
  __m256 r = _mm256_round_ps(_mm256_mul_ps(v, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(r);
}

// 32 int32 in four vectors -> 32 int8 in element order.
inline __m256i pack_bytes(const __m256i (&qi)[4]) {
  const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  const __m256i p = _mm256_packs_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline std::int32_t hsum_i32(__m256i s) {
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  return _mm_cvtsi128_si32(s4);
}

// quant::quantize_activations with the same float operations (max|x|, s = 127 / max|x|, the
// rounding above, d = max|x| / 127 rounded to f16 to nearest even), so the bytes are identical.
void quantize_activations_avx2(const float* x, std::size_t T, std::size_t K, std::int8_t* q,
                               float* d, std::int32_t* sum) {
  const std::size_t nb = K / 32;
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t b = 0; b < nb; ++b) {
      const float* xb = x + t * K + b * 32;
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
      const float amax = abs_max(v, 4);
      const float dd = amax / 127.0f;
      const __m256 sv = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
      __m256i qi[4];
      __m256i s = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        qi[i] = round_scaled(v[i], sv);
        s = _mm256_add_epi32(s, qi[i]);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + t * K + b * 32), pack_bytes(qi));
      sum[t * nb + b] = hsum_i32(s);
      d[t * nb + b] =
          _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(dd), _MM_FROUND_TO_NEAREST_INT)));
    }
  }
}

// quant::quantize_activations_k likewise (d = 1 / s kept in float, the sums per 16).
void quantize_activations_k_avx2(const float* x, std::size_t T, std::size_t K, std::int8_t* q,
                                 float* d, std::int16_t* bsum, float* fsum) {
  const std::size_t nsb = K / 256;
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t sb = 0; sb < nsb; ++sb) {
      const float* xb = x + t * K + sb * 256;
      __m256 v[32];
      for (int i = 0; i < 32; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
      const float amax = abs_max(v, 32);
      const float scale = amax != 0.0f ? 127.0f / amax : 0.0f;
      const float dd = amax != 0.0f ? 1.0f / scale : 0.0f;
      const __m256 sv = _mm256_set1_ps(scale);
      for (int c = 0; c < 8; ++c) {  // 32 elements at a time
        __m256i qi[4];
        for (int i = 0; i < 4; ++i) qi[i] = round_scaled(v[4 * c + i], sv);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + t * K + sb * 256 + 32 * c),
                            pack_bytes(qi));
        const std::size_t at = t * (K / 16) + sb * 16 + 2 * static_cast<std::size_t>(c);
        for (int h = 0; h < 2; ++h) {
          const std::int32_t s = hsum_i32(_mm256_add_epi32(qi[2 * h], qi[2 * h + 1]));
          bsum[at + static_cast<std::size_t>(h)] = static_cast<std::int16_t>(s);
          fsum[at + static_cast<std::size_t>(h)] = dd * static_cast<float>(s);
        }
      }
      d[t * nsb + sb] = dd;
    }
  }
}

}  // namespace

QuantizedRowsFn quantized_rows_avx2_fn() {
  return &quantized_rows<Tile>;
}

QuantizeActivationsFn quantize_activations_avx2_fn() {
  return &quantize_activations_avx2;
}

QuantizeActivationsKFn quantize_activations_k_avx2_fn() {
  return &quantize_activations_k_avx2;
}

}  // namespace rkv::kernels
