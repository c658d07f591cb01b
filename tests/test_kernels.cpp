// Parity tests for the matmul kernels (every instruction set against the portable reference, in
// the spirit of llama.cpp's test-backend-ops), the f16/bf16 conversions and the thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "test_util.h"

namespace rkv {
namespace {

using kernels::Isa;
using kernels::WeightView;

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float float_of(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ---- f16 / bf16 conversions -----------------------------------------------------------------

// Straightforward f16 decoding with ldexp: value = (-1)^s * m * 2^(e - 25) for normal numbers.
double f16_reference(std::uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(m + 1024), e - 25);
  }
  return sign ? -v : v;
}

TEST(DType, F16ToF32AllPatterns) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float got = f16_to_f32(h);
    const double want = f16_reference(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "h=" << i;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "h=" << i;
    EXPECT_EQ(std::signbit(got), (i & 0x8000u) != 0) << "h=" << i;
  }
}

TEST(DType, F16RoundTripAllPatterns) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = f16_to_f32(h);
    const std::uint16_t back = f32_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back & 0x7c00u, 0x7c00u) << "h=" << i;
      EXPECT_NE(back & 0x3ffu, 0u) << "h=" << i;
    } else {
      EXPECT_EQ(back, h) << "h=" << i;
    }
  }
}

// f32 -> f16 against a search over all f16 values: the nearest, ties to the even mantissa.
TEST(DType, F32ToF16RoundsToNearestEven) {
  std::vector<double> pos(0x7c01);
  for (std::uint32_t i = 0; i <= 0x7c00; ++i) pos[i] = f16_reference(static_cast<std::uint16_t>(i));
  auto expect_round = [&](float f) {
    const double a = std::fabs(static_cast<double>(f));
    std::uint16_t want;
    if (a >= 65520.0) {
      want = 0x7c00;  // at or past the midpoint between 65504 and 65536 (ties go to even: inf)
    } else {
      std::uint32_t lo = 0;
      while (lo + 1 < 0x7c00 && pos[lo + 1] <= a) ++lo;
      const double dl = a - pos[lo], dh = pos[lo + 1] - a;
      want = static_cast<std::uint16_t>((dl < dh || (dl == dh && (lo & 1) == 0)) ? lo : lo + 1);
    }
    if (std::signbit(f)) want = static_cast<std::uint16_t>(want | 0x8000);
    EXPECT_EQ(f32_to_f16(f), want) << "f=" << f << " bits=" << std::hex << bits_of(f);
  };
  // Exact values, midpoints and their neighbours around subnormal, normal and overflow bounds.
  for (std::uint32_t i :
       {0u, 1u, 2u, 3u, 0x3ffu, 0x400u, 0x401u, 0x3c00u, 0x3c01u, 0x7bfeu, 0x7bffu}) {
    const double v = pos[i], next = f16_reference(static_cast<std::uint16_t>(i + 1));
    const float mid = static_cast<float>((v + next) / 2);
    for (float f :
         {static_cast<float>(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      expect_round(f);
      expect_round(-f);
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> expo(100, 143), mant(0, 0x7fffff);
  for (int i = 0; i < 3000; ++i) expect_round(float_of((expo(rng) << 23) | mant(rng)));
  expect_round(1e-10f);
  expect_round(65519.99f);
  expect_round(65520.0f);
  expect_round(1e10f);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const std::uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00u, 0x7c00u);
  EXPECT_NE(nan & 0x3ffu, 0u);
  // A signalling NaN whose payload lives only in the low bits must stay a NaN.
  EXPECT_NE(f32_to_f16(float_of(0x7f800001u)) & 0x3ffu, 0u);
}

TEST(DType, Bf16) {
  // The upcast is exact.
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    EXPECT_EQ(bits_of(bf16_to_f32(h)), i << 16);
  }
  // Round to nearest, ties to even.
  EXPECT_EQ(f32_to_bf16(float_of(0x3f800000u)), 0x3f80);  // 1.0
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fffu)), 0x3f80);  // below the midpoint
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001u)), 0x3f81);  // above the midpoint
  EXPECT_EQ(f32_to_bf16(float_of(0xbf808001u)), 0xbf81);
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(float_of(0x00000001u)), 0x0000);  // tiny subnormal to zero
  EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002);  // subnormal tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const std::uint16_t b = f32_to_bf16(float_of(nan));
    EXPECT_EQ(b & 0x7f80u, 0x7f80u) << std::hex << nan;
    EXPECT_NE(b & 0x7fu, 0u) << std::hex << nan;  // still a NaN, not inf
    EXPECT_EQ(b & 0x8000u, (nan >> 16) & 0x8000u);
  }
  // Round trip of every non-NaN bf16.
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    if (std::isnan(bf16_to_f32(h))) continue;
    EXPECT_EQ(f32_to_bf16(bf16_to_f32(h)), h);
  }
}

// ---- ThreadPool -----------------------------------------------------------------------------

TEST(ThreadPool, ParallelForCoversEachTaskOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (std::size_t n : {0u, 1u, 2u, 3u, 7u, 16u, 100u, 1000u, 4097u}) {
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](std::size_t i) { hits[i].fetch_add(1); });
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelRangesAlignedAndCovering) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (std::size_t n : {1u, 15u, 16u, 17u, 100u, 896u, 1000u, 4864u, 151936u}) {
      for (std::size_t align : {1u, 16u, 64u}) {
        for (int chunks : {1, 4}) {
          std::vector<std::atomic<int>> hits(n);
          std::atomic<int> bad{0};
          pool.parallel_ranges(
              n, align,
              [&](std::size_t b, std::size_t e) {
                if (b % align != 0 || b >= e || e > n || (e != n && e % align != 0)) ++bad;
                for (std::size_t i = b; i < e && i < n; ++i) hits[i].fetch_add(1);
              },
              chunks);
          ASSERT_EQ(bad.load(), 0) << "n=" << n << " align=" << align;
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
        }
      }
    }
  }
}

// RangeSplit: min(units, max_chunks) contiguous ranges covering [0, n) in order, boundaries on
// the alignment, sizes (in units) at most one apart; nothing for n = 0.
TEST(ThreadPool, RangeSplitCountsAndSizes) {
  EXPECT_EQ(RangeSplit(0, 16, 8).chunks(), 0u);
  for (std::size_t n : {1u, 17u, 128u, 896u, 1000u})
    for (std::size_t align : {1u, 16u})
      for (std::size_t max_chunks : {1u, 3u, 8u, 1000u}) {
        const RangeSplit split(n, align, max_chunks);
        const std::size_t units = (n + align - 1) / align;
        ASSERT_EQ(split.chunks(), std::min(units, max_chunks));
        std::size_t at = 0, smallest = units, largest = 0;
        for (std::size_t c = 0; c < split.chunks(); ++c) {
          const auto [b, e] = split.range(c);
          ASSERT_EQ(b, at) << "n=" << n << " c=" << c;
          ASSERT_EQ(b % align, 0u);
          const std::size_t u = (e - b + align - 1) / align;
          smallest = std::min(smallest, u);
          largest = std::max(largest, u);
          at = e;
        }
        EXPECT_EQ(at, n);
        EXPECT_LE(largest - smallest, 1u) << "n=" << n << " align=" << align;
      }
}

// ---- matmul parity --------------------------------------------------------------------------

struct Weights {
  std::vector<float> f32;        // the exact values (as the reference sees them)
  std::vector<std::uint16_t> h;  // bf16 / f16 storage
  std::vector<float> wf;         // f32 storage
  DType dtype;
  std::size_t rows, cols;

  WeightView view() const {
    return {dtype == DType::F32 ? static_cast<const void*>(wf.data()) : h.data(), dtype, rows,
            cols};
  }
};

Weights make_weights(DType dt, std::size_t N, std::size_t K, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Weights w{{}, {}, {}, dt, N, K};
  w.f32.resize(N * K);
  if (dt == DType::F32)
    w.wf.resize(N * K);
  else
    w.h.resize(N * K);
  for (std::size_t i = 0; i < N * K; ++i) {
    const float v = dist(rng);
    switch (dt) {
      case DType::F32:
        w.wf[i] = v;
        w.f32[i] = v;
        break;
      case DType::BF16:
        w.h[i] = f32_to_bf16(v);
        w.f32[i] = bf16_to_f32(w.h[i]);
        break;
      case DType::F16:
        w.h[i] = f32_to_f16(v);
        w.f32[i] = f16_to_f32(w.h[i]);
        break;
      default:  // quantized types: tests/test_quant.cpp
        ADD_FAILURE() << "make_weights takes f32, bf16 or f16";
        return w;
    }
  }
  return w;
}

std::vector<float> make_x(std::size_t T, std::size_t K, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(T * K);
  // Full float32 mantissas (not bf16-representable), with a spread of magnitudes.
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = dist(rng) * (i % 7 == 0 ? 20.0f : 1.0f);
  return x;
}

// Tolerance: the kernels accumulate in float32 in a different order than the reference (and the
// bf16 dot-product kernel represents x as hi + lo bf16 parts, an error of ~2^-17 relative per
// element), so the difference is bounded by a small multiple of eps_f32 * K * sum_k |x_k w_k|
// in the worst case and by ~sqrt(K) * eps_f32 * sum |x_k w_k| in practice; 1e-4 * sum |x_k w_k|
// covers K up to several thousand with margin while still catching any wrong element
// (a wrong or missing term is of the order of |x_k w_k| itself), and 1e-6 absorbs sums near 0.
// Checks `got` (T x N) against the reference product of x and w, to the tolerance above.
void expect_matches_reference(const std::string& what, DType dt, std::size_t T, std::size_t K,
                              std::size_t N, const std::vector<float>& x, const Weights& w,
                              const std::vector<float>& got) {
  std::vector<float> ref(T * N, 0.0f);
  kernels::matmul_rows_reference(x.data(), T, w.view(), 0, N, ref.data(), N);
  int failures = 0;
  for (std::size_t t = 0; t < T && failures < 5; ++t) {
    for (std::size_t n = 0; n < N && failures < 5; ++n) {
      double mag = 0.0;
      for (std::size_t k = 0; k < K; ++k)
        mag += std::fabs(static_cast<double>(x[t * K + k]) * w.f32[n * K + k]);
      const double tol = 1e-4 * mag + 1e-6;
      const double diff = std::fabs(static_cast<double>(got[t * N + n]) - ref[t * N + n]);
      if (!(diff <= tol)) {
        ++failures;
        ADD_FAILURE() << what << " " << dtype_name(dt) << " T=" << T << " K=" << K << " N=" << N
                      << " at t=" << t << " n=" << n << ": got " << got[t * N + n] << " want "
                      << ref[t * N + n] << " (tol " << tol << ")";
      }
    }
  }
}

void expect_parity(Isa isa, DType dt, std::size_t T, std::size_t K, std::size_t N,
                   std::mt19937& rng) {
  const Weights w = make_weights(dt, N, K, rng);
  const std::vector<float> x = make_x(T, K, rng);
  const kernels::MatmulRowsFn fn = kernels::matmul_rows_for(isa);
  ASSERT_NE(fn, nullptr);
  // Poison y so that unwritten outputs show up.
  std::vector<float> got(T * N, std::numeric_limits<float>::quiet_NaN());
  // Call the kernel on 16-aligned slices, as dispatch does, and on the whole range.
  const std::size_t split = N > 32 ? (N / 32) * 16 : N;
  fn(x.data(), T, w.view(), 0, split, got.data(), N);
  if (split < N) fn(x.data(), T, w.view(), split, N, got.data(), N);
  expect_matches_reference(std::string(kernels::isa_name(isa)), dt, T, K, N, x, w, got);
}

class MatmulParity : public ::testing::TestWithParam<Isa> {};

TEST_P(MatmulParity, AgainstReference) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa)) {
    GTEST_SKIP() << kernels::isa_name(isa)
                 << " is not supported by this CPU (or has no kernel in this build)";
  }
  std::mt19937 rng(1234);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (std::size_t T : {1u, 2u, 3u, 7u, 16u, 33u})
      for (std::size_t K : {64u, 96u, 200u, 896u})
        for (std::size_t N : {16u, 48u, 1000u}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(T) +
                       " K=" + std::to_string(K) + " N=" + std::to_string(N));
          expect_parity(isa, dt, T, K, N, rng);
        }
}

// Odd shapes: K not a multiple of 2/8/16, tiny N, a T that exercises every GEMM tail.
TEST_P(MatmulParity, OddShapes) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa)) {
    GTEST_SKIP() << kernels::isa_name(isa)
                 << " is not supported by this CPU (or has no kernel in this build)";
  }
  std::mt19937 rng(99);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (std::size_t T : {1u, 5u, 8u, 13u, 64u})
      for (std::size_t K : {1u, 7u, 31u, 33u, 300u, 1537u})
        for (std::size_t N : {1u, 5u, 17u, 40u}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(T) +
                       " K=" + std::to_string(K) + " N=" + std::to_string(N));
          expect_parity(isa, dt, T, K, N, rng);
        }
}

// The blocked GEMM's edges: more input rows than one row block (96 on AVX2), more weight rows
// than one packed block (256), K over one K block (256 on AVX2, 8192 on AVX512-BF16), each with
// partial blocks and panels.
// Where the CPU has AMX-BF16 (and RKV_AMX is not off), the kernel grants the tile state and the
// bf16 GEMM runs on tiles; the parity tests above then check the tile kernel. ctest also runs
// them with RKV_AMX=off (Kernels.ParityWithAmxOff).
TEST(Matmul, AmxRunsWhereTheCpuHasIt) {
  const char* env = std::getenv("RKV_AMX");
  const bool off = env != nullptr && (std::string(env) == "off" || std::string(env) == "0");
  if (off) {
    EXPECT_FALSE(kernels::amx_enabled());
    return;
  }
  if (kernels::active_isa() != Isa::Avx512Bf16 || !__builtin_cpu_supports("amx-bf16"))
    GTEST_SKIP() << "this CPU has no AMX-BF16 (or AVX512-BF16 is not the active ISA)";
  EXPECT_TRUE(kernels::amx_enabled()) << "the kernel refused the AMX tile state";
  EXPECT_EQ(kernels::kernels_name(), "avx512bf16+amx");
}

TEST_P(MatmulParity, BlockedGemmShapes) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa)) {
    GTEST_SKIP() << kernels::isa_name(isa)
                 << " is not supported by this CPU (or has no kernel in this build)";
  }
  std::mt19937 rng(7);
  struct Case {
    std::size_t T, K, N;
  };
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const Case c :
         {Case{97, 300, 530}, Case{200, 600, 300}, Case{34, 257, 17}, Case{41, 8300, 50}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(c.T) +
                   " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N));
      expect_parity(isa, dt, c.T, c.K, c.N, rng);
    }
}

// The activations keep float32 precision: x = 1 + 2^-10 is not representable in bf16 (it rounds
// to 1), so a kernel that rounded x to bf16 would be off by K * 2^-10 here; with w = 1 the exact
// result is representable and float32 accumulation of K = 64 terms is exact.
TEST_P(MatmulParity, ActivationsKeepFloat32Precision) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa)) {
    GTEST_SKIP() << kernels::isa_name(isa)
                 << " is not supported by this CPU (or has no kernel in this build)";
  }
  const std::size_t K = 64, N = 16;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (std::size_t T : {1u, 16u, 40u}) {  // 40: the GEMM (on AMX tiles where there are)
      std::vector<std::uint16_t> h(N * K,
                                   static_cast<std::uint16_t>(dt == DType::BF16 ? 0x3f80 : 0x3c00));
      std::vector<float> wf(N * K, 1.0f);
      const WeightView w{dt == DType::F32 ? static_cast<const void*>(wf.data()) : h.data(), dt, N,
                         K};
      std::vector<float> x(T * K, 1.0f + 0x1p-10f), y(T * N, 0.0f);
      kernels::matmul_rows_for(isa)(x.data(), T, w, 0, N, y.data(), N);
      for (float v : y) EXPECT_NEAR(v, 64.0f * (1.0f + 0x1p-10f), 1e-5f) << dtype_name(dt);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, MatmulParity,
                         ::testing::Values(Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           return std::string(kernels::isa_name(param_info.param));
                         });

// Attention of one query token (G heads) against n cache entries, per instruction set, against
// the formula evaluated in double precision: probs = softmax(scale * q k^T), out = probs v.
// Head sizes 64 and 128 take the blocked AVX-512 path, others the portable loops (float32
// caches, as here, at head size 256 too); n covers
// partial blocks of 16 and 32 keys (and a 32's second half) and chunks of 64 values, G partial
// groups of heads.
class AttentionParity : public ::testing::TestWithParam<Isa> {};

TEST_P(AttentionParity, AgainstDoublePrecision) {
  const Isa isa = GetParam();
  if (!kernels::isa_supported(isa)) {
    GTEST_SKIP() << kernels::isa_name(isa)
                 << " is not supported by this CPU (or has no kernel in this build)";
  }
  const kernels::AttentionFn attention = kernels::attention_for(isa);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int d : {64, 128, 256, 80}) {
    for (int G : {1, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
      for (int n : {1, 5, 16, 17, 45, 64, 65, 300}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " G=" + std::to_string(G) +
                     " n=" + std::to_string(n));
        const auto D = static_cast<std::size_t>(d);
        const auto N = static_cast<std::size_t>(n);
        std::vector<float> q(static_cast<std::size_t>(G) * D), k(N * D), v(N * D);
        for (float& x : q) x = dist(rng);
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        std::vector<float> out(static_cast<std::size_t>(G) * D, -1.0f),
            probs(static_cast<std::size_t>(G) * N, -1.0f);
        attention(q.data(), G, d, k.data(), v.data(), n, scale, out.data(), probs.data());
        ::rkv::test::expect_attention_near(q, G, d, k, v, scale, probs, out);
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionParity,
                         ::testing::Values(Isa::Reference, Isa::Avx2, Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           return std::string(kernels::isa_name(param_info.param));
                         });

// The per-ISA kernels are reached only through weak references (dispatch.cpp), and a static
// library member is not pulled in by a weak reference: this catches a link that silently falls
// back to the reference kernel on a CPU that could run the fast ones.
TEST(Matmul, FastKernelsAreLinkedIn) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    EXPECT_NE(kernels::matmul_rows_for(Isa::Avx2), nullptr) << "matmul_avx2.cpp not linked in";
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    EXPECT_NE(kernels::matmul_rows_for(Isa::Avx512), nullptr) << "matmul_avx512.cpp not linked in";
  }
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

// vec_exp (the softmaxes' and SiLU's exp) against exp in double over the whole non-overflowing
// range: its documented error is about 2 ulp, the bound (2^-22 relative); it measures 1.2 ulp.
TEST(VecExp, WithinTwoUlpOverTheRange) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.001953125f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 0.34657359f, -0.34657359f})
    x.push_back(v);
  std::vector<float> y = x;
  kernels::vec_exp(y.data(), static_cast<int>(y.size()));
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / want);
  }
  EXPECT_LE(worst, 0x1p-22) << kernels::isa_name(kernels::active_isa());
}

#if defined(__x86_64__)
}  // namespace
namespace kernels {  // the x86 vec_exp bodies (attention_dispatch.cpp picks one per ISA)
void vec_exp_avx512(float* x, int n);
void vec_exp_avx2(float* x, int n);
}  // namespace kernels
namespace {

// `exp` on a sweep of the range, past the clamps and on a tail of 7 lanes, bit for bit against
// exp_inplace's formula with its multiply-adds fused (scalar std::fma), as GCC compiles that loop
// with FMA.
void expect_fused_exp_formula(void (*exp)(float*, int)) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0009765625f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, -87.3f, 88.3f, -1e30f, 1e30f}) x.push_back(v);
  x.resize(x.size() / 16 * 16 + 7, 0.25f);  // a tail of 7
  std::vector<float> got = x;
  exp(got.data(), static_cast<int>(got.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = std::min(std::max(x[i], -87.3f), 88.3f);
    const float r = std::nearbyint(v * 1.44269504088896341f);
    const float f = std::fma(-r, 1.428606765330187045e-06f, std::fma(-r, 0.693145751953125f, v));
    float p = std::fma(1.0f / 5040.0f, f, 1.0f / 720.0f);
    for (const float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
      p = std::fma(p, f, c);
    const float want = p * std::ldexp(1.0f, static_cast<int>(r));
    ASSERT_EQ(std::memcmp(&want, &got[i], sizeof(float)), 0)
        << "exp(" << x[i] << "): " << got[i] << ", the fused formula " << want;
  }
  // A NaN stays a NaN through the clamps, as through the loop's comparisons.
  std::vector<float> nan(23, std::numeric_limits<float>::quiet_NaN());
  exp(nan.data(), static_cast<int>(nan.size()));
  for (float y : nan) EXPECT_TRUE(std::isnan(y)) << y;
}
#endif

// The AVX-512 and AVX2 exps (written out in intrinsics, as the softmax's fused pass needs them)
// are exp_inplace's formula with its multiply-adds fused.
TEST(VecExp, Avx512IsTheFusedFormula) {
#if defined(__x86_64__)
  if (!kernels::isa_supported(Isa::Avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  expect_fused_exp_formula(&kernels::vec_exp_avx512);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

TEST(VecExp, Avx2IsTheFusedFormula) {
#if defined(__x86_64__)
  if (!kernels::isa_supported(Isa::Avx2)) GTEST_SKIP() << "this CPU has no AVX2";
  expect_fused_exp_formula(&kernels::vec_exp_avx2);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

// silu_mul against g / (1 + exp(-g)) * u in double: within 1e-6 relative where exp(-g) is in
// range, and (the clamp) at most 1e-36 |u| below it.
TEST(SiluMul, AgainstTheFormulaInDouble) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::size_t n = 1000;  // not a multiple of the 256-value block
  std::vector<float> g(n), u(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = dist(rng) * (i % 3 == 0 ? 20.0f : 3.0f);
    u[i] = dist(rng) * 4.0f;
  }
  g[7] = -100.0f;
  g[8] = 100.0f;
  g[9] = 0.0f;
  std::vector<float> got = g;
  kernels::silu_mul(got.data(), u.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const double gd = g[i];
    const double want = gd / (1.0 + std::exp(-gd)) * u[i];
    if (g[i] < -87.0f) {
      EXPECT_LE(std::fabs(got[i]), 1e-36 * std::fabs(u[i])) << g[i];
    } else {
      EXPECT_NEAR(got[i], want, 1e-6 * std::fabs(want) + 1e-30) << "g=" << g[i] << " u=" << u[i];
    }
  }
}

// The product as the model calls it (kernels::matmul on a pool of two threads, which on
// AVX512-BF16 splits bf16 activations once for every thread's rows) against the reference, with
// the parity tolerance of expect_parity, on shapes with GEMV and GEMM tails and uneven row splits.
TEST(Matmul, DispatchAgreesWithReference) {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (std::size_t T : {1u, 3u, 33u, 34u, 97u})
      for (std::size_t K : {31u, 300u, 1537u})
        for (std::size_t N : {5u, 40u, 1000u}) {
          const Weights w = make_weights(dt, N, K, rng);
          const std::vector<float> x = make_x(T, K, rng);
          std::vector<float> got(T * N, std::numeric_limits<float>::quiet_NaN());
          kernels::matmul(x.data(), T, w.view(), got.data(), pool);
          expect_matches_reference(
              "matmul on " + std::string(kernels::isa_name(kernels::active_isa())), dt, T, K, N, x,
              w, got);
        }
}

TEST(Matmul, PoolOneAndTwoThreadsIdentical) {
  std::mt19937 rng(5);
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    // T = 97 and 200: 21 panels of 48 rows for 2 threads, the last split by input rows.
    for (std::size_t T : {1u, 4u, 40u, 97u, 200u}) {
      const std::size_t K = 896, N = 1000;
      const Weights w = make_weights(dt, N, K, rng);
      const std::vector<float> x = make_x(T, K, rng);
      std::vector<float> y1(T * N), y2(T * N, -1.0f);
      ThreadPool one(1), two(2);
      kernels::matmul(x.data(), T, w.view(), y1.data(), one);
      kernels::matmul(x.data(), T, w.view(), y2.data(), two);
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0)
          << dtype_name(dt) << " T=" << T << " (" << kernels::isa_name(kernels::active_isa())
          << ")";
    }
  }
}

// On AMX tiles, below the GEMM's row count (decode and decode batches), an input row gets the
// same bits alone as in a batch, for both precisions (the tiles take up to 32 rows as one
// operand; 33 rows are three groups of 16). K = 300 and 896, N = 1000 and 17 (a block of weight
// rows past the matrix's end, copied). The AVX512-BF16 GEMV does not: its batches sum in
// another order than one row (checked with RKV_AMX=off, 2026-11-29: every row of T = 2 to 33
// differs in some bits).
TEST(Matmul, Bf16DecodeRowsAloneEqualTheirBatchOnAmx) {
  if (!kernels::amx_enabled())
    GTEST_SKIP() << "the AMX tiles are off (no AMX-BF16, RKV_AMX=off, or the tile state refused)";
  std::mt19937 rng(9);
  ThreadPool pool(2);
  for (const auto precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Rounded})
    for (std::size_t K : {300u, 896u})
      for (std::size_t N : {17u, 1000u}) {
        const Weights w = make_weights(DType::BF16, N, K, rng);
        WeightView v = w.view();
        v.precision = precision;
        for (std::size_t T : {2u, 7u, 16u, 18u, 32u, 33u}) {
          const std::vector<float> x = make_x(T, K, rng);
          std::vector<float> batch(T * N), alone(N);
          kernels::matmul(x.data(), T, v, batch.data(), pool);
          for (std::size_t t = 0; t < T; ++t) {
            kernels::matmul(x.data() + t * K, 1, v, alone.data(), pool);
            ASSERT_EQ(std::memcmp(alone.data(), batch.data() + t * N, N * sizeof(float)), 0)
                << "row " << t << " of " << T << ", K=" << K << " N=" << N << " ("
                << kernels::kernels_name() << ")";
          }
        }
      }
}

// Block-quantized weights the same: one thread and two give the same bits, for decode, the
// tiles, and (Q4_K, Q6_K) the panels the AVX512-VNNI kernels lay out per thread (T = 8, 16, 70
// and 200; 1000 rows, 63 panels of 16, the last of 8).
TEST(Matmul, QuantizedPoolOneAndTwoThreadsIdentical) {
  std::mt19937 rng(6);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  for (DType dt : {DType::Q4_K, DType::Q6_K, DType::Q8_0}) {
    const std::size_t K = 768, N = 1000;
    std::vector<float> row(K);
    std::vector<std::uint8_t> w(N * dtype_row_bytes(dt, K));
    for (std::size_t n = 0; n < N; ++n) {
      for (float& v : row) v = dist(rng);
      quant::quantize_row(dt, row.data(), K, w.data() + n * dtype_row_bytes(dt, K));
    }
    const WeightView view{w.data(), dt, N, K};
    for (std::size_t T : {1u, 3u, 8u, 16u, 70u, 200u}) {
      const std::vector<float> x = make_x(T, K, rng);
      std::vector<float> y1(T * N), y2(T * N, -1.0f);
      ThreadPool one(1), two(2);
      kernels::matmul(x.data(), T, view, y1.data(), one);
      kernels::matmul(x.data(), T, view, y2.data(), two);
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0)
          << dtype_name(dt) << " T=" << T << " (" << kernels::isa_name(kernels::active_isa())
          << ")";
      for (float v : y1) ASSERT_TRUE(std::isfinite(v)) << dtype_name(dt) << " T=" << T;
    }
  }
}

// matmul_many gives every product bit for bit what matmul gives it alone on one thread, for
// GEMV and GEMM row counts, an odd number of panels in all (split by input rows at the end),
// both precisions, and a list that mixes dtypes (matmul for each).
TEST(Matmul, ManyEqualsEachAlone) {
  std::mt19937 rng(8);
  ThreadPool one(1), two(2);
  for (const auto precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Rounded})
    for (const bool mixed : {false, true})
      // T = 70: two slices would be 40 + 30 rows, the second too few for the GEMM: not split.
      for (std::size_t T : {1u, 5u, 33u, 34u, 70u, 97u, 200u}) {
        const std::size_t K = 300;
        // 1000 + 130 + 17 + 0 rows: 21 + 3 + 1 panels, 25 for two threads.
        std::vector<Weights> ws;
        ws.push_back(make_weights(DType::BF16, 1000, K, rng));
        ws.push_back(make_weights(mixed ? DType::F32 : DType::BF16, 130, K, rng));
        ws.push_back(make_weights(DType::BF16, 17, K, rng));
        ws.push_back(make_weights(DType::BF16, 0, K, rng));  // no rows: nothing to do
        const std::vector<float> x = make_x(T, K, rng);
        std::vector<std::vector<float>> want(ws.size()), got(ws.size());
        std::vector<kernels::MatmulProduct> products;
        for (std::size_t i = 0; i < ws.size(); ++i) {
          WeightView v = ws[i].view();
          v.precision = precision;
          want[i].assign(T * v.rows, 0.0f);
          got[i].assign(T * v.rows, std::numeric_limits<float>::quiet_NaN());
          kernels::matmul(x.data(), T, v, want[i].data(), one);
          products.push_back({v, got[i].data()});
        }
        kernels::matmul_many(x.data(), T, products, two);
        for (std::size_t i = 0; i < ws.size(); ++i)
          EXPECT_TRUE(want[i].empty() ||  // (memcmp may not be given the null of an empty vector)
                      std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)) ==
                          0)
              << "product " << i << " T=" << T << (mixed ? " mixed" : "") << " "
              << kernels::matmul_precision_name(precision) << " ("
              << kernels::isa_name(kernels::active_isa()) << ")";
      }
}

// ---- the llama.cpp-precision mode (MatmulPrecision::Rounded) -------------------------------

TEST(MatmulPrecision, NamesParseAndUnknownNamesAreErrors) {
  EXPECT_EQ(kernels::parse_matmul_precision("exact"), kernels::MatmulPrecision::Exact);
  EXPECT_EQ(kernels::parse_matmul_precision("llamacpp"), kernels::MatmulPrecision::Rounded);
  EXPECT_EQ(kernels::matmul_precision_name(kernels::MatmulPrecision::Rounded), "llamacpp");
  EXPECT_THROW(kernels::parse_matmul_precision("bf16"), Error);
}

// ---- llama.cpp's attention arithmetic (AttentionPrecision::LlamaCpp) --------------------------

TEST(AttentionPrecision, NamesParseAndUnknownNamesAreErrors) {
  EXPECT_EQ(kernels::parse_attention_precision("exact"), kernels::AttentionPrecision::Exact);
  EXPECT_EQ(kernels::parse_attention_precision("llamacpp"), kernels::AttentionPrecision::LlamaCpp);
  EXPECT_EQ(kernels::attention_precision_name(kernels::AttentionPrecision::LlamaCpp), "llamacpp");
  EXPECT_THROW(kernels::parse_attention_precision("f16"), Error);
}

// Hand-worked. q = 0, so every score is 0 and the softmax is uniform (probs 1/3). The values
// 2048, 1, 1 summed in float32 give 2050 / 3; in llama.cpp's f16 accumulator 2048 + 1 = 2049 lies
// halfway between the f16 neighbours 2048 and 2050 and rounds to the even 2048, twice, so the
// output is 2048 / 3. A second head with q = 1/3 (not an f16 value: rounded to 0.333251953125)
// and keys 3, 0, 0 (scale 1): the first score is 3 * 0.333251953125 = 0.999755859375, not 1.
TEST(AttentionPrecision, LlamaCppKeepsTheValueSumInF16) {
  for (KvDtype dtype : {KvDtype::f32, KvDtype::bf16, KvDtype::f16}) {
    SCOPED_TRACE(std::string(kv_dtype_name(dtype)));
    const int n = 3, d = 1;
    const std::vector<float> keys_f{3.0f, 0.0f, 0.0f}, values_f{2048.0f, 1.0f, 1.0f};
    std::vector<std::byte> keys(kv_row_bytes(dtype, d) * n), values(kv_row_bytes(dtype, d) * n);
    for (int i = 0; i < n; ++i) {
      kv_encode_row(dtype, &keys_f[i], d, keys.data() + kv_row_bytes(dtype, d) * i);
      kv_encode_row(dtype, &values_f[i], d, values.data() + kv_row_bytes(dtype, d) * i);
    }
    const float q[2] = {0.0f, 1.0f / 3.0f};
    float out[2], probs[6];
    kernels::attention_fn(dtype, kernels::AttentionPrecision::LlamaCpp)(
        q, 2, d, keys.data(), values.data(), n, 1.0f, out, probs);
    EXPECT_EQ(out[0], 2048.0f * (1.0f / 3.0f));
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(probs[i], 1.0f / 3.0f);
    const double s0 = 3.0 * 0.333251953125;  // exact in float
    const double e = std::exp(-s0), S = 1.0 + 2.0 * e;
    EXPECT_NEAR(probs[3], 1.0 / S, 1e-6);
    EXPECT_NEAR(probs[4], e / S, 1e-6);
    // f16(2048 * 1 + 1 * e) = 2048 (e < 1 is below half the unit 2), then the same again.
    EXPECT_NEAR(out[1], 2048.0 / S, 2e-3);
    // The exact kernel sums in float32: 2048 + 2e over S.
    kernels::attention_fn(dtype)(q, 2, d, keys.data(), values.data(), n, 1.0f, out, probs);
    EXPECT_FLOAT_EQ(out[0], 2050.0f / 3.0f);
  }
}

// Hand-worked roundings to nearest even: bf16 keeps 7 fraction bits (a unit in the last place of
// 2^-7 at 1), f16 keeps 10 (2^-10).
TEST(MatmulPrecision, ActivationsRoundToNearestEven) {
  const std::vector<float> x = {1.0f + 0x1p-8f,             // half an ulp: ties to even, 1
                                1.0f + 3 * 0x1p-8f,         // 1.5 ulps: ties to even, 1 + 2^-6
                                1.0f + 0x1p-8f + 0x1p-20f,  // above half: 1 + 2^-7
                                -(1.0f + 0x1p-9f),          // below half: -1
                                0.0f};
  std::vector<float> out(x.size());
  kernels::round_activations(x.data(), x.size(), DType::BF16, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -1.0f, 0.0f}));
  const std::vector<float> h = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f,
                                70000.0f};
  out.resize(h.size());
  kernels::round_activations(h.data(), h.size(), DType::F16, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 0x1p-9f);
  EXPECT_EQ(out[2], 1.0f + 0x1p-10f);
  EXPECT_TRUE(std::isinf(out[3]));  // past f16's largest finite value, as llama.cpp's conversion
  kernels::round_activations(x.data(), x.size(), DType::F32, out.data());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 5), x);
}

// With precision Rounded, matmul (every ISA's kernel behind it, GEMV and GEMM) multiplies the
// rounded activations: it agrees with the reference on round_activations(x) to the parity
// tolerance, and a difference the rounding makes is visible (x = 1 + 2^-12 against weights of 1:
// rounded to 1 in bf16 and f16, so K rows of it sum to exactly K instead of K (1 + 2^-12)).
TEST(MatmulPrecision, RoundedMatmulMultipliesTheRoundedActivations) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    for (std::size_t T : {1u, 5u, 40u}) {
      const std::size_t K = 300, N = 70;
      Weights w = make_weights(dt, N, K, rng);
      WeightView view = w.view();
      view.precision = kernels::MatmulPrecision::Rounded;
      const std::vector<float> x = make_x(T, K, rng);
      std::vector<float> xr(x.size()), got(T * N), want(T * N);
      kernels::round_activations(x.data(), x.size(), dt, xr.data());
      if (dt == DType::F32) {
        EXPECT_EQ(xr, x);
      }
      kernels::matmul(x.data(), T, view, got.data(), pool);
      kernels::matmul_rows_reference(xr.data(), T, w.view(), 0, N, want.data(), N);
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t n = 0; n < N; ++n) {
          double mag = 0.0;
          for (std::size_t k = 0; k < K; ++k)
            mag += std::fabs(static_cast<double>(xr[t * K + k]) * w.f32[n * K + k]);
          ASSERT_NEAR(got[t * N + n], want[t * N + n], 1e-4 * mag + 1e-6)
              << dtype_name(dt) << " T=" << T << " t=" << t << " n=" << n;
        }
    }
    const std::size_t K = 64, N = 16;
    std::vector<std::uint16_t> ones(
        N * K, static_cast<std::uint16_t>(dt == DType::BF16 ? 0x3f80 : 0x3c00));
    std::vector<float> onesf(N * K, 1.0f);
    const void* data = dt == DType::F32 ? static_cast<const void*>(onesf.data()) : ones.data();
    const WeightView exact{data, dt, N, K},
        rounded{data, dt, N, K, kernels::MatmulPrecision::Rounded};
    for (std::size_t T : {1u, 40u}) {
      std::vector<float> x(T * K, 1.0f + 0x1p-12f), y(T * N), ye(T * N);
      kernels::matmul(x.data(), T, rounded, y.data(), pool);
      kernels::matmul(x.data(), T, exact, ye.data(), pool);
      for (std::size_t i = 0; i < y.size(); ++i) {
        EXPECT_NEAR(ye[i], 64.0f * (1.0f + 0x1p-12f), 1e-5f) << dtype_name(dt) << " T=" << T;
        if (dt == DType::F32)
          EXPECT_EQ(y[i], ye[i]) << "f32 weights: Rounded leaves x as it is";
        else
          EXPECT_EQ(y[i], 64.0f) << dtype_name(dt) << " T=" << T;
      }
    }
  }
}

// matmul hands the row kernels activations it has rounded already. Each ISA's row kernel given a
// Rounded view then computes what it computes for an Exact view, bit for bit: on AVX512-BF16 the
// Rounded view runs the single-product kernel (hi only) and the Exact one the two-product kernel
// (hi and lo, lo being zero here), so this checks the single-product GEMV and GEMM and their
// tails; the other ISAs widen bf16 to float32 and have one kernel for both. The single-product
// kernel rounds unrounded activations itself (hi is their bf16 rounding) to the same result.
TEST(MatmulPrecision, SingleProductKernelsEqualTheExactKernelsOnRoundedActivations) {
  std::mt19937 rng(21);
  int ran = 0;
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (!kernels::isa_supported(isa)) continue;
    ++ran;
    const kernels::MatmulRowsFn fn = kernels::matmul_rows_for(isa);
    for (std::size_t T : {1u, 3u, 5u, 33u, 34u, 97u})
      for (std::size_t K : {31u, 64u, 300u, 600u})
        for (std::size_t N : {1u, 17u, 40u, 530u}) {
          const Weights w = make_weights(DType::BF16, N, K, rng);
          const std::vector<float> x = make_x(T, K, rng);
          std::vector<float> xr(x.size());
          kernels::round_activations(x.data(), x.size(), DType::BF16, xr.data());
          WeightView rounded = w.view();
          rounded.precision = kernels::MatmulPrecision::Rounded;
          std::vector<float> want(T * N);
          fn(xr.data(), T, w.view(), 0, N, want.data(), N);
          for (const std::vector<float>* input : {&std::as_const(xr), &x}) {
            if (input == &x && isa != Isa::Avx512Bf16) continue;
            // The exact kernel on unrounded x first: its non-zero lo parts stay in the kernel's
            // scratch, where a single-product kernel that read lo parts would find them.
            std::vector<float> got(T * N);
            fn(x.data(), T, w.view(), 0, N, got.data(), N);
            std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());
            const std::size_t split = N > 32 ? (N / 32) * 16 : N;  // 16-aligned, as dispatch
            fn(input->data(), T, rounded, 0, split, got.data(), N);
            if (split < N) fn(input->data(), T, rounded, split, N, got.data(), N);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << kernels::isa_name(isa) << (input == &x ? " (unrounded x)" : "") << " T=" << T
                << " K=" << K << " N=" << N;
          }
        }
  }
  EXPECT_GE(ran, 1);
}

}  // namespace
}  // namespace rkv
