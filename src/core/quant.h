// ggml's block-quantized weight formats (GGUF files), portable code: dequantization, a
// quantizer per type (for `rkv make-model --format gguf`), and the decoding of one 32-element
// block into small integers that the matmul kernels (reference and AVX2) share.
//
// Layouts (little-endian, all scales IEEE f16 unless said otherwise), value of element k:
//  Q8_0  32 elements, 34 bytes: d, int8 q[32].                      w = d * q[k]
//  Q4_0  32 elements, 18 bytes: d, u8 qs[16]; element k < 16 is the low nibble of qs[k], element
//        k + 16 its high nibble.                                     w = d * (nibble - 8)
//  Q5_0  32 elements, 22 bytes: d, u8 qh[4] (a little-endian u32: bit k is the fifth bit of
//        element k), u8 qs[16] (nibbles as in Q4_0).                 w = d * ((nibble|hi<<4) - 16)
//  Q4_K  256 elements, 144 bytes: d, dmin, u8 scales[12] (eight 6-bit scales sc[j] and mins m[j]:
//        for j < 4, sc = scales[j] & 63 and m = scales[j+4] & 63; for j >= 4,
//        sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4 and m = (scales[j+4] >> 4) |
//        (scales[j] >> 6) << 4), u8 qs[128]. Sub-block j (32 elements) is the low nibbles (j even)
//        or high nibbles (j odd) of qs[32 (j/2) .. 32 (j/2) + 31].  w = d*sc[j]*nibble - dmin*m[j]
//  Q6_K  256 elements, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], d. In each half h
//        (128 elements; ql += 64 h, qh += 32 h, scales += 8 h), for l < 32: element l uses the low
//        nibble of ql[l] and bits 0-1 of qh[l], element l + 32 the low nibble of ql[l + 32] and
//        bits 2-3, element l + 64 the high nibble of ql[l] and bits 4-5, element l + 96 the high
//        nibble of ql[l + 32] and bits 6-7; q = (nibble | two bits << 4) - 32, and element e of
//        the half has scale scales[e / 16].                          w = d * scale * q
//  MXFP4 32 elements, 17 bytes: u8 e (an E8M0 exponent, not f16), u8 qs[16]; element k < 16 is
//        the low nibble of qs[k], element k + 16 its high nibble, each a 4-bit E2M1 code c whose
//        value doubled is kMxfp4Values[c]. With f = e8m0_half(e) = 2^(e - 127) / 2,
//                                                                    w = f * kMxfp4Values[c]
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace rkv::quant {

// MXFP4's E2M1 values doubled, by 4-bit code (ggml's kvalues_mxfp4): bit 3 is the sign.
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};

// An E8M0 exponent's scale halved, 2^(e - 128), as ggml's GGML_E8M0_TO_FP32_HALF computes it:
// the float's bits directly (e < 2 gives the denormals 2^-128 and 2^-127), so exact for every e.
// constexpr (through the builtin, not std::bit_cast: no library template in the kernels' ISA
// translation units), so the AVX512-VNNI kernels tabulate it at compile time.
constexpr float e8m0_half(std::uint8_t e) {
  return __builtin_bit_cast(
      float, e < 2 ? std::uint32_t{0x00200000} << e : static_cast<std::uint32_t>(e - 1) << 23);
}

// One 32-element block of a quantized row as integers: element k is
//   f * mul[k / 16] * q[k] - min
// exactly as ggml dequantizes it (f, the products and the subtraction in float).
struct Block32 {
  std::int8_t q[32];
  std::int16_t mul[2];
  float f;
  float min;
};

// Q4_K's eight 6-bit scales and mins from a super-block's 12 scale bytes (the layout above),
// four bytes at a time: sc[j] in byte j of `sc`, m[j] in byte j of `m`. sc[0..3] and m[0..3] are
// the low 6 bits of bytes 0-3 and 4-7; sc[4..7] and m[4..7] the low and high nibbles of bytes
// 8-11 with bits 6-7 of bytes 0-3 and 4-7 above them.
inline void q4_k_scales_mins(const std::uint8_t* scales, std::uint64_t& sc, std::uint64_t& m) {
  std::uint32_t w0, w1, w2;
  std::memcpy(&w0, scales, 4);
  std::memcpy(&w1, scales + 4, 4);
  std::memcpy(&w2, scales + 8, 4);
  sc = (w0 & 0x3f3f3f3fu) |
       static_cast<std::uint64_t>((w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4)) << 32;
  m = (w1 & 0x3f3f3f3fu) |
      static_cast<std::uint64_t>(((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4))
          << 32;
}

// Decodes 32-element block b of a row of quantized type t (b counts 32-element blocks from the
// start of the row; for Q4_K/Q6_K, sub-block b % 8 of super-block b / 8).
void decode_block32(DType t, const void* row, std::size_t b, Block32& out);

// Dequantizes a row of `cols` elements (a multiple of the type's block) into out[cols].
void dequantize_row(DType t, const void* row, std::size_t cols, float* out);

// Quantizes `cols` floats (a multiple of the type's block) into dtype_row_bytes(t, cols) bytes.
// Q8_0: d = max|x| / 127, round to nearest. Q4_0/Q5_0 (as ggml's reference quantizer): d =
// (the element of largest magnitude) / -8 (-16), q = clamp(x/d + 8.5 (16.5)) truncated.
// Q4_K/Q6_K: one pass without ggml's iterative search: per sub-block the range (Q4_K: min and
// max, scale (max - min) / 15; Q6_K: largest magnitude / 32), the scales and mins to 6 (8) bits
// against the super-block's largest, then every element rounded with its block's final scale.
// MXFP4 (as ggml's quantize_row_mxfp4_ref and gguf-py's quants.MXFP4, byte for byte): e =
// floor(log2(max|x|)) - 2 + 127 in float (0 for a block of zeros; clamped to 0 where ggml's
// conversion would go negative, max|x| < 2^-125), then each element the first code of least
// |kMxfp4Values[c] * e8m0_half(e) - x| (so 0, not 8, for zero; values above 12 f clip to it).
void quantize_row(DType t, const float* x, std::size_t cols, void* out);

// ---- activations ----------------------------------------------------------------------------

// A row of K activations quantized to 8 bits in blocks of 32, as llama.cpp's x86 CPU backend does
// for its Q8_0 dot products (for every weight type here but Q4_K and Q6_K; quantize_row_q8_0's
// AVX path): per block s = 127 / max|x|, q = x * s rounded to nearest with ties to even, in
// [-127, 127], d = max|x| / 127 rounded to f16 (ggml's Q8_0 keeps d in f16), and the sum of the
// q. (ggml's portable reference computes 1 / d and rounds ties away from zero; the x86 build,
// the one rkv is compared with, does not.)
// For Q4_K and Q6_K weights the activations are instead quantized in super-blocks of 256, in the
// layout of llama.cpp's Q8_K (quantize_activations_k): the same q per 256 elements, d = 1 / s
// kept in float (ggml's quantize_row_q8_K stores -1 / s and -q when the largest |x| is positive,
// which multiplies out to the same products), and the sums of the q per 16 elements. One scale per
// super-block lets the kernels sum the integer products of all of a super-block's sub-blocks,
// each times its integer weight scale, before any float arithmetic.
// A matmul fills the fields its weight type reads: q, d and sum (blocks of 32) or qk, dk, bsum
// and fsum (super-blocks; uses_superblock_activations). The AMX-INT8 tiles read the blocks of 32
// for every type they run.
struct ActivationBlocks {
  const std::int8_t* q;                // [K]
  const float* d;                      // [K / 32]
  const std::int32_t* sum;             // [K / 32]
  const std::int8_t* qk = nullptr;     // [K]
  const float* dk = nullptr;           // [K / 256]
  const std::int16_t* bsum = nullptr;  // [K / 16]
  const float* fsum = nullptr;         // [K / 16]: dk * bsum in float
};

// Quantizes T rows of K floats (K a multiple of 32): q [T][K], d and sum [T][K / 32].
void quantize_activations(const float* x, std::size_t T, std::size_t K, std::int8_t* q, float* d,
                          std::int32_t* sum);

// Whether weights of type t take the super-block activations (Q4_K, Q6_K).
inline bool uses_superblock_activations(DType t) {
  return t == DType::Q4_K || t == DType::Q6_K;
}

// Quantizes T rows of K floats (K a multiple of 256) into super-blocks: q [T][K], d [T][K / 256],
// bsum and fsum [T][K / 16] (fsum = d * bsum, one float multiply). Rounding as
// quantize_activations (to nearest, ties to even).
void quantize_activations_k(const float* x, std::size_t T, std::size_t K, std::int8_t* q, float* d,
                            std::int16_t* bsum, float* fsum);

// One super-block of a Q4_K or Q6_K row as integers: element k is
//   d * sc[k / 16] * u[k] - dmin * m[k / 16]
// with u unsigned (Q4_K: the nibble, sc and m its sub-block's 6-bit scale and min; Q6_K: q + 32
// in 0..63, sc the int8 scale, dmin = d and m = 32 sc), so that a dot product with super-block
// activations is d * sum_g sc[g] (u . q)_g - dmin * sum_g m[g] bsum[g] in exact integers.
struct SuperBlock {
  std::uint8_t u[256];
  std::int16_t sc[16];
  std::int16_t m[16];
  float d;
  float dmin;
};
void decode_superblock(DType t, const void* row, std::size_t sb, SuperBlock& out);

}  // namespace rkv::quant
