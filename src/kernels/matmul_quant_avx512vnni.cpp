// AVX-512 VNNI kernels for block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4:
// core/quant.h) against activations quantized to 8 bits in blocks of 32
// (quant::quantize_activations; the AVX2 quantizer gives the same bytes and is used here too).
// Dispatch (dispatch.cpp) runs them for the AVX-512 instruction sets where the CPU also has
// AVX512-VNNI; without it those sets run the AVX2 kernels.
//
// Two consecutive 32-element blocks fill one 512-bit register. Each weight block is decoded to
// 64 unsigned bytes u with w = f * mul * (u - o) - min: o = 128 for Q8_0 (u = q XOR 0x80), 8 for
// Q4_0, 16 for Q5_0, 32 for Q6_K, 12 for MXFP4 (its codes' values plus 12, through a 16-byte
// table with vpshufb), 0 for Q4_K (whose min is subtracted with the activations' block sums, as
// in the AVX2 kernels). vpdpbusd multiplies u by the signed activation bytes and sums each group
// of four into an int32 lane; the offset is removed per lane with the same instruction on a
// vector of o (computed once per activation row and block pair, shared by all weight rows of a
// tile), so lane l holds the exact integer sum of q * x over its four elements.
// Lanes 0-7 belong to the first block and 8-15 to the second (Q6_K: each group of four lanes to
// one 16-element scale), so one float vector of per-lane scales (weight scale x activation
// scale) and one FMA accumulate both blocks. Tiles are R weight rows x TT activation rows, as in
// matmul_quant_avx2.cpp (prefill: 4 x 4, the rows of x in chunks of 64), except that decode
// (T = 1) reads one weight row at a time.
//
// Everything here has internal linkage and uses no out-of-line library templates (see
// matmul_avx2.cpp).

// GCC 12's _mm*_undefined_*() (used inside some intrinsics) trip -Wuninitialized after inlining.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/prefetch.h"
#include "kernels/quant_rows.h"

namespace rkv::kernels {

QuantizedRowsFn quantized_rows_avx512vnni_fn();

namespace {

constexpr std::size_t kPrefetchRows = 4;  // weight rows ahead (one 4-row tile), as the AVX2 kernels

// The offset o of the unsigned encoding (see the top of the file).
template <DType D>
constexpr int kOffset = D == DType::Q8_0    ? 128
                        : D == DType::Q4_0  ? 8
                        : D == DType::Q5_0  ? 16
                        : D == DType::Q6_K  ? 32
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
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0));
  const __m128i b =
      two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)) : _mm_setzero_si128();
  const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  // [a, b, a >> 4, b >> 4] -> [a, a >> 4, b, b >> 4]
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(ab), _mm256_srli_epi16(ab, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)),
                          _mm512_set1_epi8(0x0F));
}

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
    f0 = quant::e8m0_half(blk[0]);
    f1 = two ? quant::e8m0_half(blk[17]) : 0.0f;
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

// The activation side of one block pair for TT rows: the bytes, the per-lane offset sums
// (o * the sum of each group of four, exact in int32) and the activation scales per half.
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
        off[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                     _mm512_set1_epi8(static_cast<char>(kOffset<D>)), v[t]);
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
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, xp.v[t]);
    if constexpr (kOffset<D> != 0) p = _mm512_sub_epi32(p, xp.off[t]);
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

// Q4_K / Q6_K, super-block by super-block (256 elements = 4 block pairs), so that each row's
// scales are decoded once per super-block: Q4_K's eight d * sc[j] and its min term for all eight
// sub-blocks in one FMA against the activations' d * sum (as the AVX2 kernel); Q6_K's sixteen
// d * scale as one float vector, each pair's four picked into groups of four lanes.
template <DType D, int R, int TT>
void tile_k(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x, std::size_t K,
            std::size_t t0, float* y, std::size_t ldy) {
  const std::size_t pf = kPrefetchRows * rb;
  constexpr std::size_t kBytes = D == DType::Q4_K ? 144 : 210;
  const std::size_t nb = K / 32, nsb = K / 256;
  __m512 acc[R][TT];
  __m256 macc[R][TT];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      macc[r][t] = _mm256_setzero_ps();
    }
  const float* xd = x.d + t0 * nb;
  const std::int32_t* xs = x.sum + t0 * nb;
  for (std::size_t sb = 0; sb < nsb; ++sb) {
    alignas(32) float f[R][8];  // Q4_K: d * sc[j]
    __m512 s16[R];              // Q6_K: d * scales[0..15]
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* blk = w + r * rb + sb * kBytes;
      for (std::size_t off = 0; off < kBytes; off += 64) prefetch_ahead(blk + off, pf);
      if constexpr (D == DType::Q4_K) {
        // The eight 6-bit scales and mins, four bytes at a time.
        std::uint64_t sc8, m8;
        quant::q4_k_scales_mins(blk + 4, sc8, m8);
        _mm256_store_ps(f[r], _mm256_mul_ps(_mm256_set1_ps(h2f(blk)),
                                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                                _mm_cvtsi64_si128(static_cast<long long>(sc8))))));
        const __m256 mv = _mm256_mul_ps(_mm256_set1_ps(h2f(blk + 2)),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                            _mm_cvtsi64_si128(static_cast<long long>(m8)))));
#pragma GCC unroll 4
        for (int t = 0; t < TT; ++t) {
          const __m256 dv = _mm256_loadu_ps(xd + t * nb + sb * 8);
          const __m256 sum = _mm256_cvtepi32_ps(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + t * nb + sb * 8)));
          macc[r][t] = _mm256_fmadd_ps(mv, _mm256_mul_ps(dv, sum), macc[r][t]);
        }
      } else {
        s16[r] = _mm512_mul_ps(_mm512_set1_ps(h2f(blk + 208)),
                               _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))));
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // the pair of sub-blocks 2p, 2p + 1
      const std::size_t b = sb * 8 + 2 * static_cast<std::size_t>(p);
      XPair<D, TT> xp;
      xp.load(x, K, nb, t0, b, true);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* blk = w + r * rb + sb * kBytes;
        __m512i u;
        __m512 wf;
        if constexpr (D == DType::Q4_K) {
          // Sub-block 2p is the low nibbles of qs[32p .. 32p + 31], 2p + 1 the high ones.
          const __m256i qs =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p));
          u = _mm512_and_si512(
              _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 4), 1),
              _mm512_set1_epi8(0x0F));
          wf = halves(f[r][2 * p], f[r][2 * p + 1]);
        } else {
          // Half h = p / 2 of the super-block; sub-blocks 2p, 2p + 1 are its quarters q0 = 2 (p %
          // 2) and q0 + 1: the low (p even) or high (p odd) nibbles of ql[64 h .. 64 h + 63], with
          // bits 2 q0 (first) and 2 q0 + 2 (second) of qh[32 h .. 32 h + 31] above them.
          const int h = p / 2, q0 = 2 * (p % 2);
          const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
          const __m512i lo =
              _mm512_and_si512(_mm512_srli_epi16(ql, 4 * (p % 2)), _mm512_set1_epi8(0x0F));
          const __m256i qh =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
          const __m512i qh2 =
              _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 2 * q0)),
                                 _mm256_srli_epi16(qh, 2 * q0 + 2), 1);
          const __m512i hi = _mm512_and_si512(_mm512_slli_epi16(qh2, 4), _mm512_set1_epi8(0x30));
          u = _mm512_or_si512(lo, hi);
          // Lanes 4g .. 4g + 3 take scale 4p + g (each scale covers 16 elements, four lanes).
          const __m512i pick =
              _mm512_add_epi32(_mm512_set1_epi32(4 * p),
                               _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
          wf = _mm512_permutexvar_ps(pick, s16[r]);
        }
        accumulate<D, TT>(u, wf, xp, acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float m = 0.0f;
      if constexpr (D == DType::Q4_K) {
        __m128 s =
            _mm_add_ps(_mm256_castps256_ps128(macc[r][t]), _mm256_extractf128_ps(macc[r][t], 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        m = _mm_cvtss_f32(s);
      }
      y[t * ldy + r] = hsum(acc[r][t]) - m;
    }
}

// This ISA's tile for quant_rows.h.
template <DType D>
struct Tile {
  template <int R, int TT>
  static void run(const std::uint8_t* w, std::size_t rb, const quant::ActivationBlocks& x,
                  std::size_t K, std::size_t t0, float* y, std::size_t ldy) {
    if constexpr (D == DType::Q4_K || D == DType::Q6_K)
      tile_k<D, R, TT>(w, rb, x, K, t0, y, ldy);
    else
      tile<D, R, TT>(w, rb, x, K, t0, y, ldy);
  }
};

}  // namespace

QuantizedRowsFn quantized_rows_avx512vnni_fn() {
  // Decode reads one weight row at a time, a single stream the hardware prefetcher follows (four
  // interleaved rows held it back: rkv_bench QuantMatmul T1, 1.0-2.4x, Q8_0 most).
  return &quantized_rows<Tile, true>;
}

}  // namespace rkv::kernels
