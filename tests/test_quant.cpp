// Block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K): the formats against a float64
// dequantization written here from the format descriptions (not from src/core/quant.cpp), the
// quantizers' round trip, and the matmul kernels of every instruction set against the portable
// reference and against float64 oracles, on random blocks and odd shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace rkv {
namespace {

using kernels::Isa;
using kernels::WeightView;

const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q6_K};

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
// Q4_K 1/16 and 1/15), with a quarter more for the rounding of the scales; a file written with
// a wrong layout would be off by the data's whole size.
TEST(QuantFormat, QuantizersRoundTrip) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::pair<DType, double> bounds[] = {{DType::Q8_0, 1.25 / 254},
                                             {DType::Q6_K, 1.25 / 62},
                                             {DType::Q5_0, 1.25 / 32},
                                             {DType::Q4_0, 1.25 / 16},
                                             {DType::Q4_K, 1.25 / 15}};
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
  std::vector<double> err;  // per 32-block: a bound on |x - q * d|
};

// The documented activation quantization, done here: d = max|x| / 127 (then rounded to f16),
// q = x * (1 / d) rounded half away from zero.
ActOracle quantize_x(const std::vector<float>& x) {
  ActOracle o;
  o.xq.resize(x.size());
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[b * 32 + k]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const double d16 = f16_to_f32(f32_to_f16(d));
    for (int k = 0; k < 32; ++k) o.xq[b * 32 + k] = double(std::lround(x[b * 32 + k] * id)) * d16;
    // |x * id - x / d| adds at most 127 ulps of float to the rounding's half step.
    o.err.push_back(0.5 * d * (1 + 1e-4) + 127 * std::fabs(double(d) - d16));
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
           k_type ? std::vector<std::size_t>{256, 768} : std::vector<std::size_t>{32, 96, 352})
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
          int failures = 0;
          for (std::size_t r = 0; r < T && failures < 3; ++r) {
            const std::vector<float> xr(x.begin() + r * K, x.begin() + (r + 1) * K);
            const ActOracle a = quantize_x(xr);
            for (std::size_t n = 0; n < N && failures < 3; ++n) {
              const std::uint8_t* row = w.data() + n * dtype_row_bytes(t, K);
              double exact_q = 0, exact = 0, mag = 0, qerr = 0;
              for (std::size_t k = 0; k < K; ++k) {
                const Elem e = oracle(t, row, k);
                exact_q += e.value * a.xq[k];
                exact += e.value * xr[k];
                mag += e.magnitude * std::fabs(a.xq[k]);
                qerr += std::fabs(e.value) * a.err[k / 32];
              }
              const double y = got[r * N + n], yr = ref[r * N + n];
              const double tol = 1e-5 * mag + 1e-6;
              const bool ok = std::fabs(y - exact_q) <= tol && std::fabs(yr - exact_q) <= tol &&
                              std::fabs(y - yr) <= tol && std::fabs(y - exact) <= tol + qerr;
              if (!ok) {
                ++failures;
                ADD_FAILURE() << "t=" << r << " n=" << n << ": kernel " << y << ", reference " << yr
                              << ", float64 with quantized x " << exact_q << ", float64 with f32 x "
                              << exact << " (tol " << tol << ", activation quantization bound "
                              << qerr << ")";
              }
            }
          }
        }
  }
}

// The activation quantizer of each instruction set gives the reference's bytes, ties included
// (x * (1/d) exactly k + 0.5 rounds away from zero).
TEST_P(QuantizedMatmul, ActivationQuantizersAgreeBytewise) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU (or this build)";
  std::mt19937 rng(5);
  const std::size_t T = 3, K = 128;
  auto x = random_x(T * K, rng);
  // Block 2 of row 0: max 127 -> d = 1, and exact halves.
  x[64] = 127.0f;
  for (int k = 1; k < 32; ++k) x[64 + k] = static_cast<float>(k - 16) + 0.5f;
  std::vector<std::int8_t> q1(T * K), q2(T * K);
  std::vector<float> d1(T * K / 32), d2(T * K / 32);
  std::vector<std::int32_t> s1(T * K / 32), s2(T * K / 32);
  quant::quantize_activations(x.data(), T, K, q1.data(), d1.data(), s1.data());
  kernels::quantize_activations_for(isa)(x.data(), T, K, q2.data(), d2.data(), s2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(q1[64 + 1], -15);  // -14.5 -> -15
  EXPECT_EQ(q1[64 + 17], 2);   // 1.5 -> 2
  std::int32_t sum = 0;
  for (int k = 0; k < 32; ++k) sum += q1[64 + k];
  EXPECT_EQ(s1[2], sum);
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
    EXPECT_EQ(a, b);
  }
}

}  // namespace
}  // namespace rkv
