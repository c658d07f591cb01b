// Block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4): the formats against a float64
// dequantization written here from the format descriptions (not from src/core/quant.cpp), the
// quantizers' round trip, and the matmul kernels of every instruction set against the portable
// reference and against float64 oracles, on random blocks and odd shapes. MXFP4 also: blocks
// and a dot product worked by hand, the reference and AVX2 kernels against llama.cpp's order of
// float operations, and the quantizer against a GGUF file that gguf-py quantized (../shared).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "test_util.h"

namespace rkv {
namespace {

using kernels::Isa;
using kernels::WeightView;

const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0,
                        DType::Q4_K, DType::Q6_K, DType::MXFP4};

// MXFP4: the values of the 4-bit E2M1 codes, doubled (the OCP MX spec's 0, 0.5, 1, 1.5, 2, 3, 4,
// 6 and their negatives), and the block scale 2^(e - 127) / 2.
const int kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
double e8m0_half_exact(int e) {
  return std::ldexp(1.0, e - 128);
}

// ---- the float64 oracle, from the format descriptions -----------------------------------------

double h16(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  const int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m + 1024), e - 25);
  return sign ? -v : v;
}

// Element k of a row, and |each term| summed (for rounding tolerances).
struct Elem {
  double value, magnitude;
};

Elem oracle(DType t, const std::uint8_t* row, std::size_t k) {
  switch (t) {
    case DType::Q8_0: {
      const std::uint8_t* b = row + (k / 32) * 34;
      const double v = h16(b) * static_cast<std::int8_t>(b[2 + k % 32]);
      return {v, std::fabs(v)};
    }
    case DType::Q4_0: {
      const std::uint8_t* b = row + (k / 32) * 18;
      const std::size_t i = k % 32;
      const int nib = i < 16 ? (b[2 + i] & 0xF) : (b[2 + i - 16] >> 4);
      const double v = h16(b) * (nib - 8);
      return {v, std::fabs(v)};
    }
    case DType::Q5_0: {
      const std::uint8_t* b = row + (k / 32) * 22;
      const std::size_t i = k % 32;
      const std::uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | (std::uint32_t(b[5]) << 24);
      const int nib = i < 16 ? (b[6 + i] & 0xF) : (b[6 + i - 16] >> 4);
      const int q = nib | static_cast<int>(((qh >> i) & 1u) << 4);
      const double v = h16(b) * (q - 16);
      return {v, std::fabs(v)};
    }
    case DType::Q4_K: {
      const std::uint8_t* b = row + (k / 256) * 144;
      const std::size_t i = k % 256, j = i / 32;
      const std::uint8_t* s = b + 4;
      int sc, m;
      if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      const std::uint8_t byte = b[16 + 32 * (j / 2) + i % 32];
      const int nib = j % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      const double a = h16(b) * sc * nib, c = h16(b + 2) * m;
      return {a - c, std::fabs(a) + std::fabs(c)};
    }
    case DType::Q6_K: {
      const std::uint8_t* b = row + (k / 256) * 210;
      const std::size_t i = k % 256, h = i / 128, e = i % 128, l = e % 32;
      const std::uint8_t* ql = b + 64 * h;
      const std::uint8_t* qh = b + 128 + 32 * h;
      const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192 + 8 * h);
      int nib = 0, hi = 0;
      switch (e / 32) {
        case 0:
          nib = ql[l] & 0xF;
          hi = qh[l] & 3;
          break;
        case 1:
          nib = ql[l + 32] & 0xF;
          hi = (qh[l] >> 2) & 3;
          break;
        case 2:
          nib = ql[l] >> 4;
          hi = (qh[l] >> 4) & 3;
          break;
        default:
          nib = ql[l + 32] >> 4;
          hi = (qh[l] >> 6) & 3;
          break;
      }
      const double v = h16(b + 208) * scales[e / 16] * ((nib | (hi << 4)) - 32);
      return {v, std::fabs(v)};
    }
    case DType::MXFP4: {
      const std::uint8_t* b = row + (k / 32) * 17;
      const std::size_t i = k % 32;
      const int code = i < 16 ? (b[1 + i] & 0xF) : (b[1 + i - 16] >> 4);
      const double v = e8m0_half_exact(b[0]) * kE2m1Doubled[code];
      return {v, std::fabs(v)};
    }
    default:
      ADD_FAILURE() << "not a quantized type";
      return {0, 0};
  }
}

// ---- random blocks ----------------------------------------------------------------------------

void put_h16(std::uint8_t* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random bytes everywhere, with the f16 scales set to moderate values of either sign (Q4_K's d and
// dmin are positive, as quantizers write them) so the products stay finite.
std::vector<std::uint8_t> random_rows(DType t, std::size_t rows, std::size_t cols,
                                      std::mt19937& rng) {
  std::vector<std::uint8_t> data(rows * dtype_row_bytes(t, cols));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  std::bernoulli_distribution neg(0.5);
  for (auto& b : data) b = static_cast<std::uint8_t>(byte(rng));
  const std::size_t bb = dtype_size(t);
  for (std::size_t off = 0; off < data.size(); off += bb) {
    std::uint8_t* b = data.data() + off;
    const float s = neg(rng) ? -scale(rng) : scale(rng);
    switch (t) {
      case DType::Q8_0:
      case DType::Q4_0:
      case DType::Q5_0:
        put_h16(b, s);
        break;
      case DType::Q4_K:
        put_h16(b, std::fabs(s) / 16);
        put_h16(b + 2, std::fabs(s) / 4);
        break;
      case DType::Q6_K:
        put_h16(b + 208, s / 64);
        break;
      case DType::MXFP4:  // 2^-13 .. 2^-4: values up to 0.75 in magnitude
        b[0] = static_cast<std::uint8_t>(115 + byte(rng) % 10);
        break;
      default:
        break;
    }
  }
  return data;
}

std::vector<float> random_x(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  // Some rows of x with a block of zeros and some with one large outlier, as real activations.
  if (n >= 64) {
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    x[5] = 40.0f;
  }
  return x;
}

// "" where got has want's bits (T rows of N outputs), else how many outputs differ and the first
// of them by row and column with both values: a failure message that names where, not two
// vectors of thousands of floats cut at 32.
std::string bit_differences(const std::vector<float>& want, const std::vector<float>& got,
                            std::size_t N) {
  if (want.size() != got.size()) return "sizes differ";
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0 && differ++ == 0) first = i;
  if (differ == 0) return "";
  std::ostringstream s;
  s.precision(9);
  s << differ << " of " << want.size() << " outputs differ; the first at row " << first / N
    << ", column " << first % N << ": " << got[first] << " for " << want[first];
  return s.str();
}

TEST(QuantFormat, KnownBlocksDecodeAsDescribed) {
  // Q4_0, d = 1: qs[0] = 0x1F holds element 0 (low nibble 15 -> 7) and element 16 (1 -> -7).
  std::uint8_t q4[18] = {};
  put_h16(q4, 1.0f);
  q4[2] = 0x1F;
  float out[256];
  quant::dequantize_row(DType::Q4_0, q4, 32, out);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[16], -7.0f);
  EXPECT_EQ(out[1], -8.0f);
  // Q5_0, d = 0.5: bit 16 of qh sets the fifth bit of element 16.
  std::uint8_t q5[22] = {};
  put_h16(q5, 0.5f);
  q5[2 + 2] = 0x01;  // bit 16
  q5[6] = 0x3F;      // element 0: 15, element 16: 3 | 16
  quant::dequantize_row(DType::Q5_0, q5, 32, out);
  EXPECT_EQ(out[0], 0.5f * (15 - 16));
  EXPECT_EQ(out[16], 0.5f * (19 - 16));
  // Q8_0: plain int8 times d.
  std::uint8_t q8[34] = {};
  put_h16(q8, 0.25f);
  q8[2 + 31] = static_cast<std::uint8_t>(-128);
  quant::dequantize_row(DType::Q8_0, q8, 32, out);
  EXPECT_EQ(out[31], -32.0f);
  // Q4_K: sub-block 5's scale and min come from the packed high bits.
  std::uint8_t q4k[144] = {};
  put_h16(q4k, 1.0f);
  put_h16(q4k + 2, 1.0f);
  q4k[4 + 9] = 0x21;        // scales[9]: sc[5] low 4 bits = 1, m[5] low 4 bits = 2
  q4k[4 + 1] = 0x40;        // scales[1] bits 6-7 = 1: sc[5] += 16
  q4k[4 + 5] = 0x80;        // scales[5] bits 6-7 = 2: m[5] += 32
  q4k[16 + 64 + 3] = 0x70;  // sub-block 5 (high nibbles of qs[64..95]), element 3: 7
  quant::dequantize_row(DType::Q4_K, q4k, 256, out);
  EXPECT_EQ(out[5 * 32 + 3], 17.0f * 7 - 34.0f);
  EXPECT_EQ(out[5 * 32 + 4], -34.0f);
  // Q6_K: element 200 = half 1, quarter 2 (high nibble of ql[64 + 8], bits 4-5 of qh[32 + 8]).
  std::uint8_t q6k[210] = {};
  put_h16(q6k + 208, 2.0f);
  q6k[64 + 8] = 0xA0;        // nibble 10
  q6k[128 + 32 + 8] = 0x30;  // two bits 3 -> q = 10 | 48 = 58, minus 32 = 26
  q6k[192 + 8 + (200 - 128) / 16] = static_cast<std::uint8_t>(-3);
  quant::dequantize_row(DType::Q6_K, q6k, 256, out);
  EXPECT_EQ(out[200], 2.0f * -3 * 26);
}

// MXFP4 blocks worked by hand: f = 2^(e - 127) / 2 times the doubled E2M1 value of each code.
TEST(QuantFormat, Mxfp4KnownBlocksDecodeAsDescribed) {
  // e = 130: f = 2^3 / 2 = 4. qs[0] = 0xE7: element 0 is code 7 (12 -> 48), element 16 code 14
  // (-8 -> -32); qs[1] = 0x9D: element 1 code 13 (-6 -> -24), element 17 code 9 (-1 -> -4);
  // qs[15] = 0x85: element 15 code 5 (6 -> 24), element 31 code 8 (the second zero).
  std::uint8_t blk[17] = {};
  blk[0] = 130;
  blk[1] = 0xE7;
  blk[2] = 0x9D;
  blk[16] = 0x85;
  float out[32];
  quant::dequantize_row(DType::MXFP4, blk, 32, out);
  EXPECT_EQ(out[0], 48.0f);
  EXPECT_EQ(out[16], -32.0f);
  EXPECT_EQ(out[1], -24.0f);
  EXPECT_EQ(out[17], -4.0f);
  EXPECT_EQ(out[15], 24.0f);
  EXPECT_EQ(out[31], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(load_as_f32(blk, DType::MXFP4, 17), -4.0f);
  // Every exponent: code 1 (value 1) is the scale itself, 2^(e - 128) exactly, the denormals
  // 2^-128 (e = 0) and 2^-127 (e = 1) and 2^127 (e = 255) included.
  for (int e = 0; e < 256; ++e) {
    blk[0] = static_cast<std::uint8_t>(e);
    std::memset(blk + 1, 0x11, 16);
    quant::dequantize_row(DType::MXFP4, blk, 32, out);
    const float want = std::ldexp(1.0f, e - 128);
    ASSERT_EQ(quant::e8m0_half(static_cast<std::uint8_t>(e)), want) << "e = " << e;
    ASSERT_EQ(out[0], want) << "e = " << e;
    ASSERT_EQ(out[31], want) << "e = " << e;
  }
  EXPECT_EQ(quant::e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_GT(quant::e8m0_half(0), 0.0f);
  EXPECT_EQ(dtype_size(DType::MXFP4), 17u);
  EXPECT_EQ(dtype_block_elements(DType::MXFP4), 32u);
  EXPECT_EQ(parse_dtype("MXFP4"), DType::MXFP4);
  EXPECT_EQ(parse_dtype("mxfp4"), DType::MXFP4);
  EXPECT_EQ(dtype_name(DType::MXFP4), "mxfp4");
  EXPECT_EQ(dtype_of_ggml_type(39), DType::MXFP4);
  EXPECT_EQ(ggml_type_id(DType::MXFP4), 39u);
}

// ggml's MXFP4 quantizer, worked by hand: e = floor(log2(max|x|)) - 2 + 127, then the first
// code of least error (ties go to the lower code), values above 12 f clipped to it.
TEST(QuantFormat, Mxfp4QuantizerWorkedByHand) {
  float x[32] = {};
  // max|x| = 7: floor(log2 7) = 2, e = 127, f = 0.5, so the grid is 0, +-0.5, 1, 1.5, 2, 3, 4, 6.
  x[0] = 7.0f;    // clipped to 6: code 7
  x[1] = 5.0f;    // 4 and 6 equally near: code 6 (4), the first
  x[2] = -0.25f;  // 0 and -0.5 equally near: code 0
  x[3] = -2.4f;   // -2: code 12
  x[16] = 2.6f;   // 3: code 5
  x[17] = 1.25f;  // 1 and 1.5 equally near: code 2 (1)
  x[18] = -5.5f;  // -6: code 15
  x[19] = 0.1f;   // 0: code 0
  x[31] = -0.0f;  // code 0, not 8
  std::uint8_t q[17];
  quant::quantize_row(DType::MXFP4, x, 32, q);
  const std::uint8_t want[17] = {127, 0x57, 0x26, 0xF0, 0x0C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 17; ++i) EXPECT_EQ(q[i], want[i]) << "byte " << i;
  // A power of two: max|x| = 8 gives e = 128 (f = 1), and -8 is code 14.
  std::fill(x, x + 32, 0.0f);
  x[5] = -8.0f;
  quant::quantize_row(DType::MXFP4, x, 32, q);
  EXPECT_EQ(q[0], 128);
  EXPECT_EQ(q[1 + 5], 14);
  // Zeros: e = 0 and code 0 throughout; a maximum below 2^-125 (where ggml's exponent would go
  // negative) keeps e = 0.
  std::fill(x, x + 32, 0.0f);
  quant::quantize_row(DType::MXFP4, x, 32, q);
  for (int i = 0; i < 17; ++i) EXPECT_EQ(q[i], 0) << "byte " << i;
  x[0] = std::ldexp(1.0f, -130);
  quant::quantize_row(DType::MXFP4, x, 32, q);
  EXPECT_EQ(q[0], 0);
}

TEST(QuantFormat, DequantizeMatchesTheFormatDescription) {
  std::mt19937 rng(7);
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::size_t cols = 3 * 256;
    const auto data = random_rows(t, 2, cols, rng);
    std::vector<float> row(cols);
    for (std::size_t r = 0; r < 2; ++r) {
      const std::uint8_t* base = data.data() + r * dtype_row_bytes(t, cols);
      quant::dequantize_row(t, base, cols, row.data());
      for (std::size_t k = 0; k < cols; ++k) {
        const Elem e = oracle(t, base, k);
        ASSERT_NEAR(row[k], e.value, 1e-6 * e.magnitude + 1e-30) << "element " << k;
        ASSERT_EQ(load_as_f32(data.data(), t, r * cols + k), row[k]) << "element " << k;
      }
    }
  }
}

// quantize_row then dequantize: relative RMS error within what each format's step allows for
// uniform data (step / sqrt(12) over the data's RMS: Q8_0 1/254, Q6_K 1/62, Q5_0 1/32, Q4_0 and
// Q4_K 1/16 and 1/15; MXFP4 0.144: on [-1, 1) its scale is 1/16 and its grid 0, 1/16, 1/8, 3/16,
// 1/4, 3/8, 1/2, 3/4, so steps of 1/16, 1/8, 1/4 over the first three quarters of |x| and the
// clipping above 3/4 over the last: mean square error (1/256 + 1/64 + 1/16) / 48 + 1/192), with a
// quarter more for the rounding of the scales; a file written with a wrong layout would be off by
// the data's whole size.
TEST(QuantFormat, QuantizersRoundTrip) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::pair<DType, double> bounds[] = {
      {DType::Q8_0, 1.25 / 254}, {DType::Q6_K, 1.25 / 62}, {DType::Q5_0, 1.25 / 32},
      {DType::Q4_0, 1.25 / 16},  {DType::Q4_K, 1.25 / 15}, {DType::MXFP4, 1.25 * 0.144}};
  for (const auto& [t, bound] : bounds) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::size_t cols = 4096;
    std::vector<float> x(cols), back(cols);
    for (auto& v : x) v = u(rng);
    std::vector<std::uint8_t> q(dtype_row_bytes(t, cols));
    quant::quantize_row(t, x.data(), cols, q.data());
    quant::dequantize_row(t, q.data(), cols, back.data());
    double err = 0.0, ref = 0.0;
    for (std::size_t k = 0; k < cols; ++k) {
      err += (double(back[k]) - x[k]) * (double(back[k]) - x[k]);
      ref += double(x[k]) * x[k];
      ASSERT_EQ(oracle(t, q.data(), k).value, double(back[k])) << k;
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LE(rel, bound) << "relative RMS error " << rel;
    EXPECT_GT(rel, 0.0);
  }
  // A row of zeros quantizes to zeros, and a row that is not a multiple of the block is refused.
  std::vector<float> zeros(256, 0.0f), back(256);
  for (DType t : kTypes) {
    std::vector<std::uint8_t> q(dtype_row_bytes(t, 256));
    quant::quantize_row(t, zeros.data(), 256, q.data());
    quant::dequantize_row(t, q.data(), 256, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f);
    EXPECT_THROW(quant::quantize_row(t, zeros.data(), 48, q.data()), std::exception);
  }
}

// ---- the kernels ------------------------------------------------------------------------------

struct ActOracle {
  std::vector<double> xq;   // the quantized activations as values, q * d
  std::vector<double> err;  // per 32 elements: a bound on |x - q * d|
};

// The documented activation quantization (llama.cpp's x86 CPU backend), done here: per block of
// 32, or for Q4_K/Q6_K weights per 256, s = 127 / max|x| and q = x * s rounded to nearest, ties
// to even; d = max|x| / 127 rounded to f16 (blocks of 32) or 1 / s in float (super-blocks).
ActOracle quantize_x(const std::vector<float>& x, DType weights) {
  const bool super = weights == DType::Q4_K || weights == DType::Q6_K;
  const std::size_t n = super ? 256 : 32;
  ActOracle o;
  o.xq.resize(x.size());
  for (std::size_t b = 0; b < x.size() / n; ++b) {
    float amax = 0.0f;
    for (std::size_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[b * n + k]));
    const float d = amax / 127.0f;
    const float s = amax != 0.0f ? 127.0f / amax : 0.0f;
    const double dq = super ? (amax != 0.0f ? 1.0f / s : 0.0f) : f16_to_f32(f32_to_f16(d));
    for (std::size_t k = 0; k < n; ++k)
      o.xq[b * n + k] = double(std::nearbyint(x[b * n + k] * s)) * dq;
    // |x * id - x / d| adds at most 127 ulps of float to the rounding's half step.
    for (std::size_t k = 0; k < n; k += 32)
      o.err.push_back(0.5 * d * (1 + 1e-4) + 127 * std::fabs(double(d) - dq));
  }
  return o;
}

class QuantizedMatmul : public ::testing::TestWithParam<Isa> {};

// For every type, odd shapes (T up to 70 for the prefill chunks and tails, N not a multiple of the
// 4-row tiles or the 16-row thread slices, several blocks per row):
//  1. against float64 sum(w * xq), with xq the activations as quantized above: the kernels' only
//     rounding is float32 scaling and summing, so 1e-5 of sum |w * xq|;
//  2. against float64 sum(w * x) with the f32 activations: within sum over blocks of
//     |w| * (that block's quantization bound) more;
//  3. against the reference kernel: 1e-5 of sum |w * xq| (same integers, another order).
// Q4_K/Q6_K quantize x in super-blocks of 256, except where the AMX-INT8 tiles run the product
// (blocks of 32 there, so 1 and 2 use that quantization and 3 does not apply).
TEST_P(QuantizedMatmul, AgainstFloat64OraclesAndReference) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU (or this build)";
  const kernels::MatmulRowsFn fn = kernels::matmul_rows_for(isa);
  ASSERT_NE(fn, nullptr);
  std::mt19937 rng(2024);
  for (DType t : kTypes) {
    const bool k_type = dtype_block_elements(t) == 256;
    for (std::size_t T : {1u, 2u, 3u, 5u, 37u, 70u})
      for (std::size_t K :
           k_type ? std::vector<std::size_t>{256, 768} : std::vector<std::size_t>{32, 96, 128, 352})
        for (std::size_t N : {1u, 3u, 6u, 17u, 33u}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " T=" + std::to_string(T) +
                       " K=" + std::to_string(K) + " N=" + std::to_string(N));
          const auto w = random_rows(t, N, K, rng);
          const WeightView view{w.data(), t, N, K};
          const auto x = random_x(T * K, rng);
          std::vector<float> got(T * N, std::numeric_limits<float>::quiet_NaN());
          std::vector<float> ref(T * N, std::numeric_limits<float>::quiet_NaN());
          const std::size_t split = N > 16 ? 16 : N;
          fn(x.data(), T, view, 0, split, got.data(), N);
          if (split < N) fn(x.data(), T, view, split, N, got.data(), N);
          kernels::matmul_rows_reference(x.data(), T, view, 0, N, ref.data(), N);
          // Where the AMX-INT8 tiles run the product, Q4_K/Q6_K take the blocks of 32 there.
          const bool on_tiles = isa != Isa::Reference && isa != Isa::Avx2 &&
                                kernels::amx_int8_enabled() && kernels::quantized_on_tiles(view, T);
          int failures = 0;
          for (std::size_t r = 0; r < T && failures < 3; ++r) {
            const std::vector<float> xr(x.begin() + r * K, x.begin() + (r + 1) * K);
            const ActOracle a = quantize_x(xr, t);
            const ActOracle ak = on_tiles ? quantize_x(xr, DType::Q8_0) : a;
            for (std::size_t n = 0; n < N && failures < 3; ++n) {
              const std::uint8_t* row = w.data() + n * dtype_row_bytes(t, K);
              double exact_q = 0, exact_qk = 0, exact = 0, mag = 0, magk = 0, qerr = 0;
              for (std::size_t k = 0; k < K; ++k) {
                const Elem e = oracle(t, row, k);
                exact_q += e.value * a.xq[k];
                exact_qk += e.value * ak.xq[k];
                exact += e.value * xr[k];
                mag += e.magnitude * std::fabs(a.xq[k]);
                magk += e.magnitude * std::fabs(ak.xq[k]);
                qerr += std::fabs(e.value) * std::max(a.err[k / 32], ak.err[k / 32]);
              }
              const double y = got[r * N + n], yr = ref[r * N + n];
              const double tol = 1e-5 * mag + 1e-6, tolk = 1e-5 * magk + 1e-6;
              const bool ok = std::fabs(y - exact_qk) <= tolk && std::fabs(yr - exact_q) <= tol &&
                              (on_tiles || std::fabs(y - yr) <= tol) &&
                              std::fabs(y - exact) <= tolk + qerr;
              if (!ok) {
                ++failures;
                ADD_FAILURE() << "t=" << r << " n=" << n << ": kernel " << y << ", reference " << yr
                              << ", float64 with quantized x " << exact_q
                              << " (as the kernel quantizes it " << exact_qk
                              << "), float64 with f32 x " << exact << " (tol " << tol
                              << ", activation quantization bound " << qerr << ")";
              }
            }
          }
        }
  }
}

// The activation quantizer of each instruction set gives the reference's bytes, and both quantize
// as llama.cpp's x86 build does (quantize_row_q8_0's AVX path, quantize_row_q8_K): the scale is
// 127 / max|x|, not 1 / (max|x| / 127), and exact halves round to even. Hand-worked cases below.
TEST_P(QuantizedMatmul, ActivationQuantizersAgreeBytewise) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU (or this build)";
  std::mt19937 rng(5);
  const std::size_t T = 3, K = 128;
  auto x = random_x(T * K, rng);
  // Block 2 of row 0: max 127 -> s = d = 1, and exact halves.
  x[64] = 127.0f;
  for (int k = 1; k < 32; ++k) x[64 + k] = static_cast<float>(k - 16) + 0.5f;
  // Block 3 of row 0: max 0x1.e8feb6p+1 (3.8202732), where x = 0x1.71a24cp-5 (0.045121334) times
  // 127 / max is 1.4999999 in float (-> 1) and times 1 / (max / 127) is 1.5 (-> 2).
  x[96] = 0x1.e8feb6p+1f;
  x[97] = 0x1.71a24cp-5f;
  for (int k = 2; k < 32; ++k) x[96 + k] = 0.01f * static_cast<float>(k);
  std::vector<std::int8_t> q1(T * K), q2(T * K);
  std::vector<float> d1(T * K / 32), d2(T * K / 32);
  std::vector<std::int32_t> s1(T * K / 32), s2(T * K / 32);
  quant::quantize_activations(x.data(), T, K, q1.data(), d1.data(), s1.data());
  kernels::quantize_activations_for(isa)(x.data(), T, K, q2.data(), d2.data(), s2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(q1[64 + 1], -14);  // -14.5 -> -14 (ties to even)
  EXPECT_EQ(q1[64 + 17], 2);   // 1.5 -> 2
  EXPECT_EQ(q1[64 + 18], 2);   // 2.5 -> 2
  EXPECT_EQ(q1[64 + 16], 0);   // 0.5 -> 0
  EXPECT_EQ(q1[96], 127);
  EXPECT_EQ(q1[97], 1);
  EXPECT_EQ(d1[3], f16_to_f32(f32_to_f16(0x1.e8feb6p+1f / 127.0f)));
  std::int32_t sum = 0;
  for (int k = 0; k < 32; ++k) sum += q1[64 + k];
  EXPECT_EQ(s1[2], sum);
  // The super-blocks of Q4_K/Q6_K weights: rows of 512 with the same halves at 256 + 64.
  const std::size_t KK = 512;
  auto xk = random_x(T * KK, rng);
  xk[256] = 127.0f;
  for (int k = 1; k < 32; ++k) xk[256 + 64 + k] = static_cast<float>(k - 16) + 0.5f;
  // Super-block 2 (row 1's first): max 0x1.fb4ceep+0, where d = 1 / (127 / max) = 0.015603485 is
  // not max / 127 = 0.0156034855 in float.
  for (std::size_t k = 0; k < 256; ++k) xk[KK + k] = 0.001f * static_cast<float>(k % 7);
  xk[KK] = 0x1.fb4ceep+0f;
  std::vector<std::int8_t> qk1(T * KK), qk2(T * KK);
  std::vector<float> dk1(T * KK / 256), dk2(T * KK / 256);
  std::vector<std::int16_t> b1(T * KK / 16), b2(T * KK / 16);
  std::vector<float> f1(T * KK / 16), f2(T * KK / 16);
  quant::quantize_activations_k(xk.data(), T, KK, qk1.data(), dk1.data(), b1.data(), f1.data());
  kernels::quantize_activations_k_for(isa)(xk.data(), T, KK, qk2.data(), dk2.data(), b2.data(),
                                           f2.data());
  EXPECT_EQ(qk1, qk2);
  EXPECT_EQ(dk1, dk2);
  EXPECT_EQ(b1, b2);
  EXPECT_EQ(f1, f2);
  EXPECT_EQ(dk1[1], 1.0f);            // max|x| of super-block 1 is 127 (random_x stays below)
  EXPECT_EQ(qk1[256 + 64 + 1], -14);  // -14.5 -> -14 (ties to even)
  EXPECT_EQ(qk1[256 + 64 + 17], 2);   // 1.5 -> 2
  EXPECT_EQ(dk1[2], 1.0f / (127.0f / 0x1.fb4ceep+0f));
  EXPECT_NE(dk1[2], 0x1.fb4ceep+0f / 127.0f);
  EXPECT_EQ(qk1[KK], 127);
  for (std::size_t g = 0; g < T * KK / 16; ++g) {
    std::int32_t s16 = 0;
    for (std::size_t k = 0; k < 16; ++k) s16 += qk1[16 * g + k];
    EXPECT_EQ(b1[g], s16) << "group " << g;
    EXPECT_EQ(f1[g], dk1[g / 16] * static_cast<float>(s16)) << "group " << g;
  }
}

// An MXFP4 dot product worked by hand. The activation block is 127 and -3 at elements 0 and 1, 5
// and 2 at 16 and 17, zeros elsewhere: max|x| = 127, so d = 1 and the 8-bit values are x. The
// weight block's codes are 3, 13 (elements 0, 1) and 14, 6 (16, 17), values 3, -6, -8, 8: the
// integer sum is 127 * 3 + (-3) * (-6) + 5 * (-8) + 2 * 8 = 381 + 18 - 40 + 16 = 375. With e =
// 126 (f = 0.25) the product is 93.75; a second block with the same codes and e = 128 (f = 1)
// adds 375: 468.75 for the row of 64.
TEST_P(QuantizedMatmul, Mxfp4DotProductWorkedByHand) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU (or this build)";
  float x[64] = {};
  for (int b = 0; b < 2; ++b) {
    x[32 * b + 0] = 127.0f;
    x[32 * b + 1] = -3.0f;
    x[32 * b + 16] = 5.0f;
    x[32 * b + 17] = 2.0f;
  }
  std::uint8_t w[34] = {};
  w[0] = 126;
  w[1] = 0xE3;  // element 0: code 3 (3); element 16: code 14 (-8)
  w[2] = 0x6D;  // element 1: code 13 (-6); element 17: code 6 (8)
  std::memcpy(w + 17, w, 17);
  w[17] = 128;
  float y = 0.0f;
  kernels::matmul_rows_for(isa)(x, 1, WeightView{w, DType::MXFP4, 1, 32}, 0, 1, &y, 1);
  EXPECT_EQ(y, 93.75f);
  kernels::matmul_rows_for(isa)(x, 1, WeightView{w, DType::MXFP4, 1, 64}, 0, 1, &y, 1);
  EXPECT_EQ(y, 468.75f);
}

// A decode row (T = 1, the kernels' row-by-row path) gives bit for bit what the same activation
// row gets inside a product of several rows (the tiles): continuous batching runs a sequence's
// decode step either way. Odd block counts for the last pair, K of gpt-oss's experts (2880).
TEST_P(QuantizedMatmul, DecodeRowEqualsItsRowInABatch) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU (or this build)";
  const kernels::MatmulRowsFn fn = kernels::matmul_rows_for(isa);
  std::mt19937 rng(17);
  for (DType t : kTypes) {
    const bool k_type = dtype_block_elements(t) == 256;
    for (std::size_t K : k_type ? std::vector<std::size_t>{256, 2816}
                                : std::vector<std::size_t>{32, 96, 352, 2880}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " K=" + std::to_string(K));
      const std::size_t T = 5, N = 37;
      const auto w = random_rows(t, N, K, rng);
      const WeightView view{w.data(), t, N, K};
      if (isa != Isa::Reference && isa != Isa::Avx2 && kernels::amx_int8_enabled() &&
          kernels::quantized_on_tiles(view, T))
        continue;  // the tiles' own arithmetic: batching there is not this path
      const auto x = random_x(T * K, rng);
      std::vector<float> batch(T * N), row(N);
      fn(x.data(), T, view, 0, N, batch.data(), N);
      for (std::size_t r = 0; r < T; ++r) {
        fn(x.data() + r * K, 1, view, 0, N, row.data(), N);
        EXPECT_TRUE(std::equal(row.begin(), row.end(), batch.begin() + r * N)) << "row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantizedMatmul,
                         ::testing::Values(Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           return std::string(kernels::isa_name(param_info.param));
                         });

// Where the CPU has AVX-512 and AVX512-VNNI, the AVX-512 instruction sets run their own quantized
// kernels (so the Isas/QuantizedMatmul instances above test them), not a silent AVX2 fallback.
TEST(QuantizedMatmulDispatch, Avx512RunsTheVnniKernelsWhereTheCpuHasVnni) {
  if (!kernels::isa_supported(Isa::Avx512) || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "this CPU has no AVX-512 with AVX512-VNNI";
  EXPECT_TRUE(kernels::quantized_avx512_uses_vnni());
  EXPECT_NE(kernels::quantized_rows_for(Isa::Avx512), kernels::quantized_rows_for(Isa::Avx2));
  EXPECT_EQ(kernels::quantized_rows_for(Isa::Avx512), kernels::quantized_rows_for(Isa::Avx512Bf16));
}

// Where the CPU has AMX-INT8 (and the kernel grants the tile state), the AVX-512 instruction sets'
// quantized kernels run prefill on tiles, so the Isas/QuantizedMatmul instances above test them
// (T = 37 and 70; Q8_0 at K = 128); ctest Kernels.ParityWithAmxOff runs the same with RKV_AMX=off.
TEST(QuantizedMatmulDispatch, AmxInt8RunsWhereTheCpuHasIt) {
  const char* env = std::getenv("RKV_AMX");
  if (env != nullptr && (std::string(env) == "off" || std::string(env) == "0")) {
    EXPECT_FALSE(kernels::amx_int8_enabled());
    return;
  }
  const Isa isa = kernels::active_isa();
  if ((isa != Isa::Avx512 && isa != Isa::Avx512Bf16) || !__builtin_cpu_supports("avx512vnni") ||
      !__builtin_cpu_supports("amx-int8"))
    GTEST_SKIP() << "this CPU has no AMX-INT8 with AVX512-VNNI (or AVX-512 is not active)";
  EXPECT_TRUE(kernels::amx_int8_enabled()) << "the kernel refused the AMX tile state";
  EXPECT_NE(kernels::kernels_name().find("+amx"), std::string::npos);
}

// kernels::matmul (activations quantized once, rows split over threads) equals the active
// instruction set's row kernel on the whole matrix, bit for bit (same integers, same order).
TEST(QuantizedMatmulDispatch, ThreadedMatmulEqualsTheRowKernel) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  const kernels::MatmulRowsFn fn = kernels::matmul_rows_for(kernels::active_isa());
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::size_t T = 9, K = 512, N = 100;
    const auto w = random_rows(t, N, K, rng);
    const WeightView view{w.data(), t, N, K};
    const auto x = random_x(T * K, rng);
    std::vector<float> a(T * N), b(T * N);
    kernels::matmul(x.data(), T, view, a.data(), pool);
    fn(x.data(), T, view, 0, N, b.data(), N);
    EXPECT_EQ(bit_differences(b, a, N), "");
  }
}

// matmul_many over quantized products of one K gives each product bit for bit what matmul gives
// it alone, whether the list shares one quantization of x (Q4_K with Q6_K: both on Q8_K
// super-blocks; Q8_0 with Q8_0) or not (Q4_K with Q8_0: each product alone), for decode's T = 1
// and a few rows (on an AMX machine T = 33 runs on the tiles, each product alone).
TEST(QuantizedMatmulDispatch, ManyEqualsEachAlone) {
  std::mt19937 rng(5);
  ThreadPool one(1), two(2);
  const std::size_t K = 512;
  const std::vector<std::vector<std::pair<DType, std::size_t>>> lists = {
      {{DType::Q4_K, 300}, {DType::Q6_K, 48}, {DType::Q4_K, 48}},
      {{DType::Q8_0, 130}, {DType::Q8_0, 17}},
      {{DType::Q4_K, 64}, {DType::Q8_0, 80}},
  };
  for (const auto& list : lists)
    for (const std::size_t T : {1u, 3u, 33u}) {
      std::vector<std::vector<std::uint8_t>> ws;
      std::vector<std::vector<float>> want, got;
      std::vector<kernels::MatmulProduct> products;
      for (const auto& [t, N] : list) {
        ws.push_back(random_rows(t, N, K, rng));
        want.emplace_back(T * N, 0.0f);
        got.emplace_back(T * N, std::numeric_limits<float>::quiet_NaN());
      }
      const auto x = random_x(T * K, rng);
      for (std::size_t i = 0; i < list.size(); ++i) {
        const WeightView view{ws[i].data(), list[i].first, list[i].second, K};
        kernels::matmul(x.data(), T, view, want[i].data(), one);
        products.push_back({view, got[i].data()});
      }
      kernels::matmul_many(x.data(), T, products, two);
      for (std::size_t i = 0; i < list.size(); ++i)
        EXPECT_EQ(bit_differences(want[i], got[i], list[i].second), "")
            << "product " << i << " (" << dtype_name(list[i].first) << ") of list "
            << (&list - lists.data()) << ", T=" << T;
    }
}

// matmul_jobs (each product of its own input, as a mixture of experts' chosen experts) gives each
// job bit for bit what matmul gives it alone: jobs on one shared input (x quantized once) and on
// inputs of their own, of different K and kinds of activation blocks in one list (Q4_K and Q6_K
// on Q8_K super-blocks beside Q8_0 and MXFP4 on blocks of 32), for decode's T = 1 and a few rows
// (on an AMX machine T = 33 runs on the tiles, each job alone); and a list with a bf16 job (not
// quantized: each run of jobs on one input through matmul_many).
TEST(QuantizedMatmulDispatch, JobsEqualEachAlone) {
  std::mt19937 rng(6);
  ThreadPool one(1), two(2);
  struct Spec {
    DType t;
    std::size_t N, K;
    int input;  // jobs with the same input index read the same x
  };
  const std::vector<std::vector<Spec>> lists = {
      {{DType::Q4_K, 96, 512, 0},
       {DType::Q4_K, 96, 512, 0},
       {DType::Q6_K, 40, 256, 1},
       {DType::Q4_K, 64, 512, 2},
       {DType::Q4_K, 64, 512, 2},
       {DType::Q6_K, 300, 256, 3}},
      {{DType::Q8_0, 130, 256, 0},
       {DType::MXFP4, 48, 256, 0},
       {DType::Q4_K, 33, 256, 0},
       {DType::Q8_0, 17, 512, 1}},
      {{DType::Q4_K, 64, 256, 0}, {DType::BF16, 80, 256, 0}, {DType::Q8_0, 32, 256, 1}},
  };
  for (const auto& list : lists)
    for (const std::size_t T : {1u, 3u, 33u}) {
      std::vector<std::vector<std::uint8_t>> ws;
      std::vector<std::vector<float>> xs, want, got;
      std::vector<kernels::MatmulJob> jobs;
      for (const Spec& s : list) {
        if (s.t == DType::BF16) {  // finite weights, not random bytes
          const auto v = random_x(s.N * s.K, rng);
          ws.emplace_back(v.size() * 2);
          for (std::size_t k = 0; k < v.size(); ++k) {
            const std::uint16_t b = f32_to_bf16(0.05f * v[k]);
            std::memcpy(ws.back().data() + 2 * k, &b, 2);
          }
        } else {
          ws.push_back(random_rows(s.t, s.N, s.K, rng));
        }
        if (static_cast<std::size_t>(s.input) == xs.size()) xs.push_back(random_x(T * s.K, rng));
        want.emplace_back(T * s.N, 0.0f);
        got.emplace_back(T * s.N, std::numeric_limits<float>::quiet_NaN());
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Spec& s = list[i];
        const WeightView view{ws[i].data(), s.t, s.N, s.K};
        const float* x = xs[static_cast<std::size_t>(s.input)].data();
        kernels::matmul(x, T, view, want[i].data(), one);
        jobs.push_back({x, T, view, got[i].data()});
      }
      kernels::matmul_jobs(jobs, two);
      for (std::size_t i = 0; i < list.size(); ++i)
        EXPECT_EQ(bit_differences(want[i], got[i], list[i].N), "")
            << "job " << i << " (" << dtype_name(list[i].t) << ") of list "
            << (&list - lists.data()) << ", T=" << T;
    }
}

// ---- MXFP4 in llama.cpp's arithmetic ------------------------------------------------------------

// ggml_vec_dot_mxfp4_q8_0 on one weight row and one row of 8-bit activations (q, d per block),
// its float operations written out: the generic C code (sumf += (d_x * f) * (sumi1 + sumi2), block
// by block) and the AVX2 code (eight lanes of four-product integer sums; even blocks FMA'd into
// one vector and odd blocks into another, the two added, summed as hsum_float_8 does, then an odd
// last block added as in the generic code).
float ggml_mxfp4_generic(const std::uint8_t* w, const std::int8_t* q, const float* d,
                         std::size_t nb) {
  float sumf = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + 17 * b;
    const float scale = d[b] * std::ldexp(1.0f, blk[0] - 128);
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < 16; ++j) {
      sumi1 += q[32 * b + j] * kE2m1Doubled[blk[1 + j] & 0xF];
      sumi2 += q[32 * b + 16 + j] * kE2m1Doubled[blk[1 + j] >> 4];
    }
    sumf += scale * static_cast<float>(sumi1 + sumi2);
  }
  return sumf;
}

float ggml_mxfp4_avx2(const std::uint8_t* w, const std::int8_t* q, const float* d, std::size_t nb) {
  float acc[2][8] = {};
  std::size_t b = 0;
  for (; b + 1 < nb; b += 2)
    for (std::size_t h = 0; h < 2; ++h) {
      const std::uint8_t* blk = w + 17 * (b + h);
      const float scale = d[b + h] * std::ldexp(1.0f, blk[0] - 128);
      for (int l = 0; l < 8; ++l) {
        int s = 0;
        for (int k = 4 * l; k < 4 * l + 4; ++k) {
          const int code = k < 16 ? (blk[1 + k] & 0xF) : (blk[1 + k - 16] >> 4);
          s += q[32 * (b + h) + static_cast<std::size_t>(k)] * kE2m1Doubled[code];
        }
        acc[h][l] = std::fma(scale, static_cast<float>(s), acc[h][l]);
      }
    }
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = acc[0][l] + acc[1][l];
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = v[4 + i] + v[i];
  float sumf = (r[0] + r[2]) + (r[1] + r[3]);
  if (b < nb) sumf += ggml_mxfp4_generic(w + 17 * b, q + 32 * b, d + b, 1);
  return sumf;
}

// A non-finite activation (a broken model's) quantizes without undefined behaviour (UBSan checks
// the float-to-int conversion in the sanitizer run): with an infinity in the block the scale is
// 0, so finite values give 0 and the infinity's inf * 0 = NaN is clamped to -127, as a NaN is.
TEST(ActivationQuantization, NonFiniteValuesStayDefined) {
  std::vector<float> x(32, 0.5f);
  x[3] = std::numeric_limits<float>::infinity();
  x[7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::int8_t> q(32);
  std::vector<float> d(1);
  std::vector<std::int32_t> sum(1);
  quant::quantize_activations(x.data(), 1, 32, q.data(), d.data(), sum.data());
  for (int k = 0; k < 32; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(q[static_cast<std::size_t>(k)], k == 3 || k == 7 ? -127 : 0);
  }
  EXPECT_EQ(sum[0], -254);
}

// The reference kernel is llama.cpp's generic arithmetic and the AVX2 kernel its AVX2 arithmetic,
// bit for bit, on every row of x and weight row (odd block counts for the AVX2 tail, tiles of
// 4 x 4, 2 x 1 and the leftovers).
TEST(QuantizedMatmulMxfp4, ReferenceAndAvx2AreLlamaCppArithmetic) {
  std::mt19937 rng(39);
  for (std::size_t K : {32u, 64u, 96u, 352u, 2880u})
    for (std::size_t T : {1u, 3u, 6u})
      for (std::size_t N : {1u, 7u}) {
        SCOPED_TRACE("T=" + std::to_string(T) + " K=" + std::to_string(K) +
                     " N=" + std::to_string(N));
        const std::size_t nb = K / 32;
        const auto w = random_rows(DType::MXFP4, N, K, rng);
        const WeightView view{w.data(), DType::MXFP4, N, K};
        const auto x = random_x(T * K, rng);
        std::vector<std::int8_t> q(T * K);
        std::vector<float> d(T * nb);
        std::vector<std::int32_t> sum(T * nb);
        quant::quantize_activations(x.data(), T, K, q.data(), d.data(), sum.data());
        for (Isa isa : {Isa::Reference, Isa::Avx2}) {
          if (!kernels::isa_supported(isa)) continue;
          std::vector<float> y(T * N, std::numeric_limits<float>::quiet_NaN());
          kernels::quantized_rows_for(isa)({q.data(), d.data(), sum.data()}, T, view, 0, N,
                                           y.data(), N);
          for (std::size_t t = 0; t < T; ++t)
            for (std::size_t n = 0; n < N; ++n) {
              const std::uint8_t* row = w.data() + n * dtype_row_bytes(DType::MXFP4, K);
              const float want = isa == Isa::Reference
                                     ? ggml_mxfp4_generic(row, q.data() + t * K, &d[t * nb], nb)
                                     : ggml_mxfp4_avx2(row, q.data() + t * K, &d[t * nb], nb);
              ASSERT_EQ(y[t * N + n], want) << kernels::isa_name(isa) << " t=" << t << " n=" << n;
            }
        }
      }
}

// gpt-oss-tiny's MXFP4 file was made from its f32 file by gguf-py (quants.quantize(..., MXFP4)):
// quantizing the f32 expert tensors here gives the file's bytes, and the file's blocks
// dequantize to within a quantization step of the f32 values (half the grid's gap around the
// value, or for a value beyond 12 f, the clipping: less than 4 f).
TEST(Mxfp4GoldenFile, QuantizerGivesGgufPysBytes) {
  RKV_REQUIRE_SHARED(shared);
  const std::filesystem::path dir = shared / "golden" / "arch" / "gpt-oss";
  const GgufFile f32_file(dir / "gpt-oss-tiny-s202-f32.gguf");
  const GgufFile mx_file(dir / "gpt-oss-tiny-s202-mxfp4.gguf");
  int checked = 0;
  for (const GgufTensor& mx : mx_file.tensors()) {
    if (mx.type->id != 39) continue;
    SCOPED_TRACE(mx.name);
    const GgufTensor* src = f32_file.find_tensor(mx.name);
    ASSERT_NE(src, nullptr);
    ASSERT_EQ(src->type->id, kGgmlF32);
    ASSERT_EQ(src->dims, mx.dims);
    ASSERT_EQ(dtype_of_ggml_type(mx.type->id), DType::MXFP4);
    const auto cols = static_cast<std::size_t>(mx.dims[0]);
    const std::size_t n = static_cast<std::size_t>(mx.numel()), rows = n / cols;
    const std::size_t rb = dtype_row_bytes(DType::MXFP4, cols);
    ASSERT_EQ(mx.nbytes, rows * rb);
    std::vector<float> x(n), back(n);
    std::memcpy(x.data(), src->data, n * 4);
    std::vector<std::uint8_t> mine(rows * rb);
    for (std::size_t r = 0; r < rows; ++r)
      quant::quantize_row(DType::MXFP4, x.data() + r * cols, cols, mine.data() + r * rb);
    const auto* theirs = reinterpret_cast<const std::uint8_t*>(mx.data);
    std::size_t differ = 0, first = 0;
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (mine[i] != theirs[i] && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "first differing byte " << first << " (block " << first / 17
                          << "): ours " << int(mine[first]) << ", the file's "
                          << int(theirs[first]);
    for (std::size_t r = 0; r < rows; ++r)
      quant::dequantize_row(DType::MXFP4, theirs + r * rb, cols, back.data() + r * cols);
    int failures = 0;
    for (std::size_t i = 0; i < n && failures < 3; ++i) {
      const double f = e8m0_half_exact(theirs[(i / 32) * 17]);
      const double a = std::fabs(double(x[i]));
      // The grid's gap around |x|: f below 4 f, 2 f below 8 f, 4 f up to 12 f.
      const double gap = a <= 4 * f ? f : a <= 8 * f ? 2 * f : 4 * f;
      const double bound = a <= 12 * f ? gap / 2 : 4 * f;
      if (!(std::fabs(double(back[i]) - x[i]) <= bound)) {
        ++failures;
        ADD_FAILURE() << "element " << i << ": f32 " << x[i] << ", dequantized " << back[i]
                      << ", block scale " << f;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 3) << "expected the ffn_{gate,up,down}_exps tensors of every layer";
}

}  // namespace
}  // namespace rkv
