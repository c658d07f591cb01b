// The typed KV store (--kv-dtype f32|bf16|f16|q8_0, issue 16): the byte formula, the bytes per
// cached token against today's float32 slot, append and compact per dtype, the attention kernels
// of every instruction set per dtype against the portable reference and against double precision
// on the dequantized values, and the logits of a bf16 / f16 / q8_0 cache against a float32 cache
// on the golden checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/batch_engine.h"
#include "kernels/attention.h"
#include "kv/kv_cache.h"
#include "kv/kv_codec.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

using kernels::Isa;

constexpr KvDtype kAllDtypes[] = {KvDtype::f32, KvDtype::bf16, KvDtype::f16, KvDtype::q8_0};

template <class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an rkv::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- sizes
// ----------------------------------------------------------------------------------------

TEST(KvDtype, NamesParseAndUnknownNamesAreErrors) {
  for (KvDtype t : kAllDtypes) EXPECT_EQ(parse_kv_dtype(kv_dtype_name(t)), t);
  EXPECT_EQ(parse_kv_dtype("bfloat16"), KvDtype::bf16);
  expect_error([] { parse_kv_dtype("q4_0"); }, "expected f32, bf16, f16 or q8_0");
}

TEST(KvDtype, KvBytesForMatchesTheFormula) {
  // 3 layers, 2 KV heads, head size 64, 10 entries: 2 (keys and values) * 3 * 2 * 10 rows.
  KvCacheShape s{3, 2, 4, 64, 10, 0};
  s.dtype = KvDtype::f32;
  EXPECT_EQ(KvCache::kv_bytes_for(s), 2u * 3 * 2 * 10 * 64 * 4);  // 30720
  EXPECT_EQ(KvCache::kv_bytes_for(s), 30720u);
  s.dtype = KvDtype::bf16;
  EXPECT_EQ(KvCache::kv_bytes_for(s), 15360u);
  s.dtype = KvDtype::f16;
  EXPECT_EQ(KvCache::kv_bytes_for(s), 15360u);
  s.dtype = KvDtype::q8_0;  // a row of 64 values: 2 blocks of (2-byte scale + 32 int8) = 68 bytes
  EXPECT_EQ(KvCache::kv_bytes_for(s), 2u * 3 * 2 * 10 * 68);
  EXPECT_EQ(KvCache::kv_bytes_for(s), 8160u);
  // The allocated cache agrees, and used bytes count the entries held.
  for (KvDtype t : kAllDtypes) {
    s.dtype = t;
    KvCache cache(s);
    EXPECT_EQ(cache.allocated_kv_bytes(), KvCache::kv_bytes_for(s));
    std::vector<float> k(2 * 64, 0.5f), v(2 * 64, -0.25f);
    cache.append(0, k.data(), v.data(), 0);
    cache.append(1, k.data(), v.data(), 0);
    EXPECT_EQ(cache.used_kv_bytes(), KvCache::kv_bytes_for(s) / 10 * 2 / 3)
        << kv_dtype_name(t);  // 2 entries of the 30 (layer, entry) pairs
  }
}

TEST(KvDtype, Q8NeedsAHeadSizeMultipleOf32) {
  KvCacheShape s{1, 1, 1, 48, 4, 0};
  s.dtype = KvDtype::q8_0;
  expect_error([&] { KvCache::kv_bytes_for(s); }, "not a multiple of 32");
  expect_error([&] { KvCache cache(s); }, "not a multiple of 32");
  s.dtype = KvDtype::bf16;  // the 2-byte types take any head size
  EXPECT_EQ(KvCache::kv_bytes_for(s), 2u * 4 * 48 * 2);
}

TEST(KvDtype, BytesPerCachedTokenOnTheQwen25Shape) {
  // Qwen2.5-0.5B: 24 layers, 2 KV heads, head size 64. Today's float32 slot per cached token:
  // keys and values 24 * 2 * 64 * 4 bytes each, an int32 position and a float state per
  // (layer, KV head): 12288 + 12288 + 192 + 192 = 24960 bytes.
  const ModelConfig c = shape_config("qwen2.5-0.5b");
  ASSERT_EQ(c.num_layers, 24);
  ASSERT_EQ(c.num_kv_heads, 2);
  ASSERT_EQ(c.head_dim, 64);
  KvCacheShape s{c.num_layers, c.num_kv_heads, c.num_heads, c.head_dim, 1, 0};
  const std::size_t f32_today = 24960;
  s.dtype = KvDtype::f32;
  EXPECT_EQ(KvCache::token_bytes_for(s).total(), f32_today);
  s.dtype = KvDtype::bf16;  // 6144 + 6144 + 192 + 192
  const KvTokenBytes bf16 = KvCache::token_bytes_for(s);
  EXPECT_EQ(bf16.keys, 6144u);
  EXPECT_EQ(bf16.values, 6144u);
  EXPECT_EQ(bf16.positions, 192u);
  EXPECT_EQ(bf16.state, 192u);
  EXPECT_EQ(bf16.total(), 12672u);
  EXPECT_LE(static_cast<double>(bf16.total()) / f32_today, 0.52);
  s.dtype = KvDtype::f16;
  EXPECT_EQ(KvCache::token_bytes_for(s).total(), 12672u);
  s.dtype = KvDtype::q8_0;  // 2 * 24 * 2 * 68 + 384
  const KvTokenBytes q8 = KvCache::token_bytes_for(s);
  EXPECT_EQ(q8.total(), 6912u);
  EXPECT_LE(static_cast<double>(q8.total()) / f32_today, 0.3);
  // The query ring is counted apart: window 8 of 14 query heads of 64 floats per layer.
  s.window = 8;
  EXPECT_EQ(KvCache::ring_bytes_for(s), 24u * 8 * 14 * 64 * 4);
  // A slot (what admission reserves) is both: 1000 bf16 entries per head and the ring.
  s.capacity = 1000;
  s.dtype = KvDtype::bf16;
  EXPECT_EQ(KvCache::ring_bytes_for(s), 688128u);
  EXPECT_EQ(KvCache::slot_bytes_for(s), 1000u * 12672 + 688128);
}

// ---- append and compact
// -----------------------------------------------------------------------------

// The largest error the stored type allows for x in a row whose block maximum is amax.
double storage_bound(KvDtype t, float x, float amax) {
  switch (t) {
    case KvDtype::f32:
      return 0.0;
    case KvDtype::bf16:
      return std::fabs(x) * 0x1p-8;  // half an ulp of an 8-bit significand
    case KvDtype::f16:
      return std::fabs(x) * 0x1p-11 + 0x1p-25;  // normal range; subnormals: half of 2^-24
    case KvDtype::q8_0:
      return amax / 127.0 * 0.5 * (1.0 + 0x1p-10);  // half a step, the step's f16 rounding
  }
  return 0.0;
}

TEST(KvDtype, AppendAndCompactRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (KvDtype t : kAllDtypes) {
    SCOPED_TRACE(std::string(kv_dtype_name(t)));
    const int L = 2, H = 2, D = 64, N = 9;
    KvCacheShape s{L, H, 4, D, 16, 2};
    s.dtype = t;
    KvCache cache(s);
    EXPECT_EQ(cache.dtype(), t);
    cache.set_initial_state(0.5f);
    // keys/values[layer][token][head][d]
    std::vector<float> keys(static_cast<std::size_t>(L * N * H * D)), values(keys.size());
    for (float& x : keys) x = dist(rng);
    for (float& x : values) x = dist(rng);
    keys[5] = 0.0f;  // exact zero, a tiny and a large value survive as the type allows
    keys[6] = 1e-6f;
    values[7] = 3000.0f;
    for (int tok = 0; tok < N; ++tok)
      for (int l = 0; l < L; ++l) {
        const std::size_t at = static_cast<std::size_t>((l * N + tok) * H * D);
        cache.append(l, keys.data() + at, values.data() + at, 100 + tok);
      }
    auto original = [&](const std::vector<float>& a, int l, int tok, int h, int i) {
      return a[static_cast<std::size_t>(((l * N + tok) * H + h) * D + i)];
    };
    std::vector<float> got(static_cast<std::size_t>(N * D));
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h)
        for (const auto* src : {&keys, &values}) {
          const KvRows rows = src == &keys ? cache.keys(l, h) : cache.values(l, h);
          ASSERT_EQ(rows.n, N);
          EXPECT_EQ(rows.dtype, t);
          EXPECT_EQ(rows.row_bytes, kv_row_bytes(t, D));
          EXPECT_EQ(rows.f32() != nullptr, t == KvDtype::f32);
          kernels::kv_to_f32(rows, got.data());
          for (int tok = 0; tok < N; ++tok) {
            // Encoding a row and decoding it again is what the cache holds, bit for bit.
            std::vector<float> row(D), back(D);
            for (int i = 0; i < D; ++i) row[i] = original(*src, l, tok, h, i);
            std::vector<std::byte> enc(kv_row_bytes(t, D));
            kv_encode_row(t, row.data(), D, enc.data());
            kv_decode_rows_reference(t, enc.data(), 1, D, back.data());
            ASSERT_EQ(std::memcmp(back.data(), got.data() + tok * D, D * sizeof(float)), 0)
                << "l=" << l << " h=" << h << " tok=" << tok;
            ASSERT_EQ(std::memcmp(enc.data(), rows.row(tok), enc.size()), 0);
            for (int i = 0; i < D; ++i) {
              float amax = 0.0f;
              for (int b = i / 32 * 32; b < i / 32 * 32 + 32; ++b)
                amax = std::max(amax, std::fabs(row[b]));
              ASSERT_LE(std::fabs(static_cast<double>(back[i]) - row[i]),
                        storage_bound(t, row[i], amax))
                  << "value " << row[i] << " stored as " << back[i];
            }
          }
        }
    // Compact layer 1: each head keeps its own entries; rows move as stored.
    std::vector<std::vector<float>> before_k(H), before_v(H);
    for (int h = 0; h < H; ++h) {
      before_k[h].resize(static_cast<std::size_t>(N * D));
      before_v[h].resize(static_cast<std::size_t>(N * D));
      kernels::kv_to_f32(cache.keys(1, h), before_k[h].data());
      kernels::kv_to_f32(cache.values(1, h), before_v[h].data());
    }
    const std::vector<std::vector<std::int32_t>> kept = {{0, 2, 5, 8}, {1, 2, 3, 7}};
    cache.compact(1, kept, {{1, 2, 3, 4}, {5, 6, 7, 8}});
    EXPECT_EQ(cache.length(1), 4);
    EXPECT_EQ(cache.length(0), N);
    for (int h = 0; h < H; ++h) {
      std::vector<float> k(4 * D), v(4 * D);
      kernels::kv_to_f32(cache.keys(1, h), k.data());
      kernels::kv_to_f32(cache.values(1, h), v.data());
      for (int i = 0; i < 4; ++i) {
        const int src = kept[h][i];
        EXPECT_EQ(std::memcmp(k.data() + i * D, before_k[h].data() + src * D, D * sizeof(float)),
                  0);
        EXPECT_EQ(std::memcmp(v.data() + i * D, before_v[h].data() + src * D, D * sizeof(float)),
                  0);
        EXPECT_EQ(cache.positions(1, h)[i], 100 + src);
        EXPECT_EQ(cache.state(1, h)[i], static_cast<float>(4 * h + i + 1));
      }
    }
    // Layer 0 is untouched; its state is as appended until the accumulator adds to it.
    EXPECT_EQ(cache.state(0, 1)[3], 0.5f);
    cache.accumulator(0, 1)[3] += 0.25f;
    EXPECT_EQ(cache.state(0, 1)[3], 0.75f);
    expect_error([&] { cache.compact(0, {{3, 1}, {0, 1}}, {}); }, "ascending");
  }
}

TEST(KvDtype, Q8EncodesLikeLlamaCpp) {
  // One block: scale max|x| / 127 rounded to f16, values rounded to the nearest step.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.1f;
  std::vector<std::byte> enc(kQ8BlockBytes);
  kv_encode_row(KvDtype::q8_0, x.data(), 32, enc.data());
  const float scale = q8_block_scale(enc.data());
  EXPECT_EQ(scale, f16_to_f32(f32_to_f16(1.6f / 127.0f)));
  std::int8_t q0, q31;
  std::memcpy(&q0, enc.data() + 2, 1);
  std::memcpy(&q31, enc.data() + 2 + 31, 1);
  EXPECT_EQ(q0, -127);  // the largest magnitude maps to the edge of the range
  EXPECT_EQ(q31, static_cast<std::int8_t>(std::nearbyint(x[31] * (1.0f / scale))));
  // An all-zero block has scale 0 and decodes to zeros; infinities and NaN do not crash.
  std::vector<float> z(32, 0.0f), out(32, 1.0f);
  kv_encode_row(KvDtype::q8_0, z.data(), 32, enc.data());
  kv_decode_rows_reference(KvDtype::q8_0, enc.data(), 1, 32, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  z[3] = std::numeric_limits<float>::infinity();
  z[4] = std::numeric_limits<float>::quiet_NaN();
  kv_encode_row(KvDtype::q8_0, z.data(), 32, enc.data());
  kv_decode_rows_reference(KvDtype::q8_0, enc.data(), 1, 32, out.data());
  EXPECT_EQ(out[3], 127.0f * 65504.0f);  // the scale saturates at f16's largest finite value
  EXPECT_EQ(out[4], 0.0f);
}

// ---- kernels
// --------------------------------------------------------------------------------------

struct KernelCase {
  Isa isa;
  KvDtype dtype;
};

class KvAttentionParity : public ::testing::TestWithParam<KernelCase> {};

// n rows of d keys and of d values, standard normal, encoded in dtype (row stride
// kv_row_bytes(dtype, d)).
void random_kv(KvDtype dtype, int d, std::size_t n, std::mt19937& rng, std::vector<std::byte>& ks,
               std::vector<std::byte>& vs) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto D = static_cast<std::size_t>(d);
  const std::size_t rb = kv_row_bytes(dtype, d);
  std::vector<float> k(n * D), v(n * D);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  ks.assign(n * rb, std::byte{0});
  vs.assign(n * rb, std::byte{0});
  for (std::size_t j = 0; j < n; ++j) {
    kv_encode_row(dtype, k.data() + j * D, d, ks.data() + j * rb);
    kv_encode_row(dtype, v.data() + j * D, d, vs.data() + j * rb);
  }
}

// Every instruction set's kernel for a cache dtype, against (1) the formula in double precision
// on the dequantized keys and values (what the kernel must compute: the stored values exactly)
// and (2) the portable reference kernel. Head sizes 64 and 128 take the blocked kernels (256 too
// on AVX2), others the converted loops; n covers partial blocks of 16 keys and chunks of 64
// values.
TEST_P(KvAttentionParity, AgainstReferenceAndDoublePrecision) {
  const auto [isa, dtype] = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU";
  const kernels::AttentionFn attention = kernels::attention_for(isa, dtype);
  const kernels::AttentionFn reference = kernels::attention_for(Isa::Reference, dtype);
  const kernels::KvDecodeFn decode = kernels::kv_decode_for(isa);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<int> dims = {64, 128, 256, 96};
  if (dtype != KvDtype::q8_0) dims.push_back(80);
  for (int d : dims) {
    for (int G : {1, 4, 6, 7, 9, 12, 16}) {
      for (int n : {1, 17, 65, 300}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " G=" + std::to_string(G) +
                     " n=" + std::to_string(n));
        const auto D = static_cast<std::size_t>(d);
        const auto N = static_cast<std::size_t>(n);
        std::vector<float> q(static_cast<std::size_t>(G) * D);
        for (float& x : q) x = dist(rng);
        std::vector<std::byte> ks, vs;
        random_kv(dtype, d, N, rng, ks, vs);
        // The dequantized values: the reference conversion, and this ISA's (bit for bit).
        std::vector<float> kd(N * D), vd(N * D), kd_isa(N * D, -1.0f);
        kv_decode_rows_reference(dtype, ks.data(), N, d, kd.data());
        kv_decode_rows_reference(dtype, vs.data(), N, d, vd.data());
        decode(dtype, ks.data(), N, d, kd_isa.data());
        ASSERT_EQ(std::memcmp(kd.data(), kd_isa.data(), kd.size() * sizeof(float)), 0);

        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        std::vector<float> out(static_cast<std::size_t>(G) * D, -1.0f),
            probs(static_cast<std::size_t>(G) * N, -1.0f), out_ref(out), probs_ref(probs);
        attention(q.data(), G, d, ks.data(), vs.data(), n, scale, out.data(), probs.data());
        reference(q.data(), G, d, ks.data(), vs.data(), n, scale, out_ref.data(), probs_ref.data());
        ::rkv::test::expect_attention_near(q, G, d, kd, vd, scale, probs, out, &probs_ref,
                                           &out_ref);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// attention_rows_for: R consecutive query rows of one sequence (row i sees n0 + i keys) give
// each row what the one-row kernel gives it, bit for bit (AVX-512 shares key transposes and value
// conversions across the rows; the others run the rows one by one). Strides are not G * d, and
// n0 and R put rows' ends inside and at the edges of blocks of 16 keys (AVX2), of 32 keys and
// their halves (AVX-512), and of chunks of 64 values; G = 7 takes the output's passes of 4 and 3.
// On AVX-512 one row of up to 8 heads runs the decode scores (16 keys transposed in registers,
// G = 1, 7, 8) and more heads the blocked ones (G = 9), so the rows (R > 1, blocked) check both.
TEST_P(KvAttentionParity, RowsEqualEachRowAlone) {
  const auto [isa, dtype] = GetParam();
  if (!kernels::isa_supported(isa))
    GTEST_SKIP() << kernels::isa_name(isa) << " is not supported by this CPU";
  const kernels::AttentionFn one = kernels::attention_for(isa, dtype);
  const kernels::AttentionRowsFn rows =
      kernels::attention_rows_for(isa, dtype, kernels::AttentionPrecision::Exact);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<int> dims = {64, 128};
  if (dtype != KvDtype::q8_0) dims.push_back(80);
  for (int d : dims)
    for (int G : {1, 4, 6, 7, 8, 9})
      for (int n0 : {1, 15, 16, 17, 31, 33, 64, 100})
        for (int R : {1, 2, 16, 20}) {
          SCOPED_TRACE("d=" + std::to_string(d) + " G=" + std::to_string(G) +
                       " n0=" + std::to_string(n0) + " R=" + std::to_string(R));
          const auto D = static_cast<std::size_t>(d);
          const auto N = static_cast<std::size_t>(n0 + R - 1);
          const std::size_t qs = static_cast<std::size_t>(G) * D + 3, os = qs + 2;
          const auto RR = static_cast<std::size_t>(R);
          std::vector<float> q(RR * qs);
          for (float& x : q) x = dist(rng);
          std::vector<std::byte> ks, vs;
          random_kv(dtype, d, N, rng, ks, vs);
          const float scale = 1.0f / std::sqrt(static_cast<float>(d));
          std::vector<float> want(RR * os, 0.0f), got(RR * os, 0.0f);
          std::vector<float> probs(static_cast<std::size_t>(G) * N), scratch(RR * G * N);
          for (int i = 0; i < R; ++i)
            one(q.data() + static_cast<std::size_t>(i) * qs, G, d, ks.data(), vs.data(), n0 + i,
                scale, want.data() + static_cast<std::size_t>(i) * os, probs.data());
          rows(q.data(), qs, R, G, d, ks.data(), vs.data(), n0, scale, got.data(), os,
               scratch.data());
          for (std::size_t i = 0; i < RR; ++i)
            ASSERT_EQ(std::memcmp(want.data() + i * os, got.data() + i * os,
                                  static_cast<std::size_t>(G) * D * sizeof(float)),
                      0)
                << "row " << i;
        }
}

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512})
    for (KvDtype t : kAllDtypes) cases.push_back({isa, t});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(IsasAndDtypes, KvAttentionParity, ::testing::ValuesIn(kernel_cases()),
                         [](const ::testing::TestParamInfo<KernelCase>& param_info) {
                           return std::string(kernels::isa_name(param_info.param.isa)) + "_" +
                                  std::string(kv_dtype_name(param_info.param.dtype));
                         });

// The AMX kernel (the scores on AMX-BF16 tiles, q as three bf16 parts) for a bf16 cache, where
// the CPU has AMX and it is on: against the formula in double precision and the AVX-512 kernel
// with KvAttentionParity's tolerances, at head sizes 64 and 128 (the tiles; n covers a partial
// block of 16 and the padded copy it reads from) and at 96 and 9 heads (the AVX-512 kernel it
// hands over to). Where AMX is on, attention_fn picks it and attention_rows_fn gives each row
// what it gives; elsewhere (RKV_AMX=off: Kernels.ParityWithAmxOff) neither does.
TEST(KvAttention, AmxKernelAgainstDoublePrecision) {
  const kernels::AttentionFn amx = kernels::attention_amx_for(KvDtype::bf16);
  EXPECT_EQ(kernels::attention_amx_for(KvDtype::f32), nullptr);
  EXPECT_EQ(kernels::attention_amx_for(KvDtype::q8_0), nullptr);
  if (!kernels::amx_enabled()) {
    EXPECT_NE(kernels::attention_fn(KvDtype::bf16), amx);
    GTEST_SKIP() << "AMX is not enabled here (no AMX-BF16, the tile state refused, or RKV_AMX=off)";
  }
  ASSERT_NE(amx, nullptr);
  EXPECT_EQ(kernels::attention_fn(KvDtype::bf16), amx);
  const kernels::AttentionFn avx512 = kernels::attention_for(Isa::Avx512, KvDtype::bf16);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int d : {64, 128, 96}) {
    for (int G : {1, 2, 5, 7, 8, 9}) {
      for (int n : {1, 15, 16, 17, 33, 300}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " G=" + std::to_string(G) +
                     " n=" + std::to_string(n));
        const auto D = static_cast<std::size_t>(d);
        const auto N = static_cast<std::size_t>(n);
        std::vector<float> q(static_cast<std::size_t>(G) * D);
        // Spread q over magnitudes so that its mid and lo parts matter.
        for (float& x : q) x = dist(rng) * std::exp2(static_cast<float>(rng() % 5) - 2.0f);
        std::vector<std::byte> ks, vs;
        random_kv(KvDtype::bf16, d, N, rng, ks, vs);
        std::vector<float> kd(N * D), vd(N * D);
        kv_decode_rows_reference(KvDtype::bf16, ks.data(), N, d, kd.data());
        kv_decode_rows_reference(KvDtype::bf16, vs.data(), N, d, vd.data());
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        std::vector<float> out(static_cast<std::size_t>(G) * D, -1.0f),
            probs(static_cast<std::size_t>(G) * N, -1.0f), out_avx(out), probs_avx(probs);
        amx(q.data(), G, d, ks.data(), vs.data(), n, scale, out.data(), probs.data());
        avx512(q.data(), G, d, ks.data(), vs.data(), n, scale, out_avx.data(), probs_avx.data());
        ::rkv::test::expect_attention_near(q, G, d, kd, vd, scale, probs, out, &probs_avx,
                                           &out_avx);
        if (HasFatalFailure()) return;
        if (d == 96 || G == 9) {  // handed over: the AVX-512 kernel's bits
          ASSERT_EQ(std::memcmp(out.data(), out_avx.data(), out.size() * sizeof(float)), 0);
        }
        // The rows (the AMX kernel's, reading each block of keys once for all of them; the
        // AVX-512 kernel's for the shapes handed over): each row what the one-row kernel gives
        // it, bit for bit.
        const int R = n < 20 ? n : 20, n0 = n - R + 1;
        const kernels::AttentionRowsFn rows =
            kernels::attention_rows_fn(KvDtype::bf16, kernels::AttentionPrecision::Exact);
        const std::size_t qs = static_cast<std::size_t>(G) * D;
        std::vector<float> rq(static_cast<std::size_t>(R) * qs);
        for (float& x : rq) x = dist(rng);
        std::vector<float> got(rq.size()), want(rq.size()), scratch(rq.size() / D * N);
        rows(rq.data(), qs, R, G, d, ks.data(), vs.data(), n0, scale, got.data(), qs,
             scratch.data());
        for (int i = 0; i < R; ++i)
          amx(rq.data() + static_cast<std::size_t>(i) * qs, G, d, ks.data(), vs.data(), n0 + i,
              scale, want.data() + static_cast<std::size_t>(i) * qs, probs.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

// The float32 kernels did not change: the typed dispatch's f32 entry is the one the float32
// goldens run, and float32 rows given as bytes give the same bits as before.
TEST(KvAttention, F32IsTheDefault) {
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512}) {
    if (!kernels::isa_supported(isa)) continue;
    EXPECT_EQ(kernels::attention_for(isa), kernels::attention_for(isa, KvDtype::f32));
  }
  EXPECT_EQ(kernels::attention_fn(), kernels::attention_fn(KvDtype::f32));
}

// ---- logits
// ---------------------------------------------------------------------------------------

// Logits of `model` over a prompt (one prefill pass, all positions) and then `steps` decode
// steps fed the given tokens, with a cache of `dtype`: [positions][vocab].
std::vector<float> run_logits(const Model& model, KvDtype dtype, const std::vector<int>& prompt,
                              const std::vector<int>& decode_tokens) {
  const int V = model.config().vocab_size;
  const int total = static_cast<int>(prompt.size() + decode_tokens.size());
  KvCache cache(model.cache_shape(total, 8, dtype));
  EXPECT_EQ(cache.dtype(), dtype);
  ThreadPool pool(2);
  ForwardScratch scratch;
  std::vector<float> logits(static_cast<std::size_t>(total) * V);
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({&cache, prompt[i], static_cast<int>(i), true});
  model.forward(rows, scratch, pool, logits.data());
  int pos = static_cast<int>(prompt.size());
  for (int token : decode_tokens) {
    ForwardRow row{&cache, token, pos, true};
    model.forward({&row, 1}, scratch, pool, logits.data() + static_cast<std::size_t>(pos) * V);
    ++pos;
  }
  return logits;
}

// max |logit(dtype) - logit(f32)| / max |logit(f32)| over every position and vocabulary entry.
double relative_logit_error(const std::vector<float>& got, const std::vector<float>& f32) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < f32.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - f32[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(f32[i])));
  }
  return diff / scale;
}

// The bound of a q8_0 cache (docs/PERFORMANCE-LOG.md), from what it measured on 2026-11-23 on the
// checkpoints of head size 32 (max |diff| / max |f32 logit|: 0.0066 on qwen3_qknorm_f32, 0.0072
// on the self-made tiny one; bf16 measured 0.0014-0.0023, f16 0.00017-0.0003), with about 3x
// room.
constexpr double kQ8LogitBound = 2e-2;

class KvDtypeLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(KvDtypeLogits, LowPrecisionCachesStayCloseToFloat32) {
  RKV_REQUIRE_SHARED(shared);
  const auto dir = shared / "golden/models" / GetParam();
  const auto golden = test::read_json(dir / "golden.json");
  auto model = Model::load(dir);
  // Prefill the golden prompt, then decode the golden greedy continuation (the same tokens for
  // every dtype, so the logits compare position by position): both attention paths.
  const auto prompt = golden["input_ids"].get<std::vector<int>>();
  const auto next = golden["greedy_new_tokens"].get<std::vector<int>>();
  const std::vector<float> f32 = run_logits(*model, KvDtype::f32, prompt, next);
  for (KvDtype t : {KvDtype::bf16, KvDtype::f16}) {
    const double err = relative_logit_error(run_logits(*model, t, prompt, next), f32);
    RecordProperty(std::string(kv_dtype_name(t)), std::to_string(err));
    std::printf("[ logits   ] %s %s: max |diff| / max |f32 logit| = %.3g\n", GetParam().c_str(),
                std::string(kv_dtype_name(t)).c_str(), err);
    EXPECT_LE(err, 2e-2) << kv_dtype_name(t);
    EXPECT_GT(err, 0.0) << kv_dtype_name(t) << ": the cache did not round anything";
  }
  if (model->config().head_dim % 32 == 0) {
    const double err = relative_logit_error(run_logits(*model, KvDtype::q8_0, prompt, next), f32);
    std::printf("[ logits   ] %s q8_0: max |diff| / max |f32 logit| = %.3g\n", GetParam().c_str(),
                err);
    EXPECT_LE(err, kQ8LogitBound);
  } else {
    expect_error([&] { KvCache cache(model->cache_shape(4, 0, KvDtype::q8_0)); },
                 "not a multiple of 32");
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, KvDtypeLogits,
                         ::testing::Values("llama_gqa_f32", "llama3_rope_scaled_f32",
                                           "qwen2_bias_f32", "qwen2_tied_bf16",
                                           "qwen3_qknorm_f32"));

// The llama.cpp-precision mode (--matmul-precision llamacpp: activations rounded to bf16 before
// each product with bf16 weights) on the bf16 checkpoints of ../shared, with an f32 cache: the
// logits move from the exact mode's by at most kLlamaCppPrecisionBound relative to the largest
// logit (measured 2026-11-24, docs/PERFORMANCE-LOG.md; about 3x room), and by something.
constexpr double kLlamaCppPrecisionBound = 2e-2;

TEST(MatmulPrecisionLogits, LlamaCppModeWithinItsBoundOfExact) {
  RKV_REQUIRE_SHARED(shared);
  const std::vector<int> next = {5, 17, 92, 3, 44, 60, 7, 250};
  for (const auto& path :
       {shared / "golden/models/qwen2_tied_bf16", shared / "golden/gguf/stories260K-bf16.gguf"}) {
    auto model = Model::load(path);
    std::vector<int> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % 500);
    const std::vector<float> exact = run_logits(*model, KvDtype::f32, prompt, next);
    model->set_matmul_precision(kernels::MatmulPrecision::Rounded);
    EXPECT_EQ(model->matmul_precision(), kernels::MatmulPrecision::Rounded);
    const double err = relative_logit_error(run_logits(*model, KvDtype::f32, prompt, next), exact);
    std::printf(
        "[ logits   ] %s --matmul-precision llamacpp: max |diff| / max |exact logit| = %.3g\n",
        path.filename().c_str(), err);
    EXPECT_LE(err, kLlamaCppPrecisionBound) << path;
    EXPECT_GT(err, 0.0) << path << ": nothing was rounded";
  }
}

// q8_0 on a checkpoint rkv writes itself (tiny shape, head size 32, f32), without ../shared.
TEST(KvDtypeLogitsSelfMade, Q8AndBf16WithinTheirBounds) {
  auto model = Model::load(test::self_made_model());
  EXPECT_EQ(model->default_kv_dtype(), KvDtype::f32);
  std::vector<int> prompt, next;
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 37) % 500);
  for (int i = 0; i < 8; ++i) next.push_back(5 + (i * 91) % 700);
  const std::vector<float> f32 = run_logits(*model, KvDtype::f32, prompt, next);
  const double bf16 = relative_logit_error(run_logits(*model, KvDtype::bf16, prompt, next), f32);
  const double q8 = relative_logit_error(run_logits(*model, KvDtype::q8_0, prompt, next), f32);
  std::printf("[ logits   ] self-made tiny: bf16 %.3g, q8_0 %.3g\n", bf16, q8);
  EXPECT_LE(bf16, 2e-2);
  EXPECT_LE(q8, kQ8LogitBound);
}

TEST(KvDtypeModel, DefaultFollowsTheCheckpoint) {
  RKV_REQUIRE_SHARED(shared);
  EXPECT_EQ(Model::load(shared / "golden/models/qwen2_tied_bf16")->default_kv_dtype(),
            KvDtype::bf16);
  EXPECT_EQ(Model::load(shared / "golden/models/llama_gqa_f32")->default_kv_dtype(), KvDtype::f32);
  auto model = Model::load(shared / "golden/models/qwen2_tied_bf16");
  EXPECT_EQ(model->cache_shape(4, 0).dtype, KvDtype::bf16);
  EXPECT_EQ(model->cache_shape(4, 0, KvDtype::f32).dtype, KvDtype::f32);
}

// ---- engine, admission, command line
// --------------------------------------------------------------

Request batch_request(const std::string& method, std::optional<KvDtype> dtype) {
  Request r;
  for (int i = 0; i < 24; ++i) r.prompt_ids.push_back(3 + (i * 37) % 500);
  r.decode_text = false;
  r.max_new_tokens = 48;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.compression = CompressionParams::defaults(parse_method(method));
  if (method != "fullkv") {
    r.compression.budget = 20;
    r.compression.buffer = 8;
    r.compression.window = 4;
  }
  r.kv_dtype = dtype;
  return r;
}

TEST(KvDtypeEngine, SlotsAdmissionAndCompressionUseTheStoredBytes) {
  auto model = Model::load(test::self_made_model());  // tiny: 4 layers, 2 KV heads, head 32
  ThreadPool pool(2);
  const Engine sizing(*model, nullptr, pool);
  const auto slot_bytes = [&](const Engine& e, const Request& r) {
    return e.prepare(r).slot_bytes;
  };
  // A slot reserves everything its cache allocates: per (layer, KV head) and entry the key and
  // the value in the stored dtype, an int32 position and a float state; fullkv keeps no query
  // ring. 4 layers * 2 KV heads, 24 + 48 entries, head size 32.
  const std::size_t f32 = slot_bytes(sizing, batch_request("fullkv", std::nullopt));
  EXPECT_EQ(f32, 4u * 2 * (24 + 48) * (2 * 32 * 4 + 4 + 4));  // the f32 checkpoint's default
  EXPECT_EQ(f32, 152064u);
  EXPECT_EQ(slot_bytes(sizing, batch_request("fullkv", KvDtype::bf16)), 4u * 2 * 72 * (128 + 8));
  EXPECT_EQ(slot_bytes(sizing, batch_request("fullkv", KvDtype::f16)), 78336u);
  EXPECT_EQ(slot_bytes(sizing, batch_request("fullkv", KvDtype::q8_0)), 4u * 2 * 72 * (68 + 8));
  // A compressing method's slot adds its query ring: `window` float32 queries of every query
  // head per layer.
  const std::size_t q_heads = static_cast<std::size_t>(model->config().num_heads);
  EXPECT_EQ(slot_bytes(sizing, batch_request("rkv", KvDtype::bf16)),
            4u * 2 * (20 + 8) * (128 + 8) + 4u * 4 * q_heads * 32 * 4);
  // The engine's default dtype applies to requests that name none.
  EngineOptions eo;
  eo.kv_dtype = KvDtype::bf16;
  const Engine preparer(*model, nullptr, pool, eo);
  const auto prepared = [&](const std::string& method, std::optional<KvDtype> dtype) {
    return preparer.prepare(batch_request(method, dtype));
  };
  BatchEngineOptions o;
  o.kv_memory_bytes = 5 * 78336;  // five bf16 slots, two f32 ones (2.58)
  BatchEngine capped(*model, pool, o);
  EXPECT_EQ(capped.max_concurrent(prepared("fullkv", KvDtype::f32)), 2);
  EXPECT_EQ(capped.max_concurrent(prepared("fullkv", std::nullopt)), 5);
  // Every method runs on every dtype: compression converts the keys it scores, H2O accumulates
  // into the cache's state, and what a sequence holds is reported in the stored bytes.
  for (const char* method : {"rkv", "snapkv", "h2o", "gkv", "streamingllm"}) {
    for (KvDtype t : kAllDtypes) {
      SCOPED_TRACE(std::string(method) + " " + std::string(kv_dtype_name(t)));
      for (int i = 0; i < 5; ++i) capped.submit(prepared(method, t));
      capped.run();
      const auto results = capped.take_results();
      ASSERT_EQ(results.size(), 5u);
      for (const BatchResult& r : results) {
        EXPECT_EQ(r.tokens.size(), 48u);
        EXPECT_GT(r.compressions, 0);
        EXPECT_EQ(r.kv_dtype, t);
        EXPECT_EQ(r.kv_bytes,
                  4u * 2 * (20 + 8) * (2 * kv_row_bytes(t, 32) + 8) + 4u * 4 * q_heads * 32 * 4);
        EXPECT_LE(r.max_cache_entries, 28);
        const std::size_t per_entry = 2u * 4 * 2 * kv_row_bytes(t, 32);  // keys + values
        EXPECT_GT(r.kv_bytes_used, 0u);
        EXPECT_EQ(r.kv_bytes_used % per_entry, 0u);
        EXPECT_LE(r.kv_bytes_used, per_entry * static_cast<std::size_t>(r.max_cache_entries));
      }
      EXPECT_LE(capped.peak_kv_bytes(), o.kv_memory_bytes);
    }
  }
  // A greedy bf16 run of the f32 model mostly agrees with the f32 one (not bit for bit).
  BatchEngine plain(*model, pool, {});
  plain.submit(prepared("fullkv", KvDtype::f32));
  plain.submit(prepared("fullkv", KvDtype::bf16));
  plain.run();
  auto r = plain.take_results();
  ASSERT_EQ(r.size(), 2u);
  int same = 0;
  for (std::size_t i = 0; i < r[0].tokens.size(); ++i) same += r[0].tokens[i] == r[1].tokens[i];
  EXPECT_GE(same, 24) << "of 48 greedy tokens";
}

TEST(KvDtypeEngine, AHeadSizeQ8CannotHoldIsAClearError) {
  auto model = Model::load(test::shipped_model_dir());  // head size 48
  const Tokenizer tokenizer = Tokenizer::load(test::shipped_model_dir());
  ThreadPool pool(1);
  Engine engine(*model, &tokenizer, pool);
  Request r;
  r.prompt_ids = {1, 2, 3};
  r.kv_dtype = KvDtype::q8_0;
  expect_error([&] { engine.prepare(r); }, "not a multiple of 32");
  r.kv_dtype = KvDtype::bf16;
  const PreparedRequest p = engine.prepare(r);
  EXPECT_EQ(p.request.kv_dtype, KvDtype::bf16);
  EngineOptions o;
  o.kv_dtype = KvDtype::q8_0;
  expect_error([&] { Engine e(*model, &tokenizer, pool, o); }, "not a multiple of 32");
}

TEST(KvDtypeCli, FlagOnEveryCommandAndClearErrors) {
  std::string out;
  for (const char* cmd :
       {"generate", "eval", "bench", "bench-decode", "serve", "steer-calibrate"}) {
    ASSERT_EQ(test::run_command(test::rkv_binary() + " " + cmd + " --help 2>&1", out), 0) << cmd;
    EXPECT_NE(out.find("--kv-dtype"), std::string::npos) << cmd;
  }
  const std::string base = test::rkv_binary() + " generate --prompt-ids 1,2,3 --print-ids -n 4 ";
  EXPECT_EQ(test::run_command(base + "-m " + test::self_made_model().string() +
                                  " --temp 0 --kv-dtype bf16 2>&1 >/dev/null",
                              out),
            0);
  EXPECT_NE(out.find("bf16, "), std::string::npos) << out;
  EXPECT_EQ(test::run_command(
                base + "-m " + test::shipped_model_dir().string() + " --kv-dtype q8_0 2>&1", out),
            1);
  EXPECT_NE(out.find("not a multiple of 32"), std::string::npos) << out;
  EXPECT_NE(test::run_command(
                base + "-m " + test::self_made_model().string() + " --kv-dtype q4 2>&1", out),
            0);
  EXPECT_NE(out.find("--kv-dtype"), std::string::npos) << out;
}

// A precision flag (--matmul-precision, --attention-precision) is on every command that runs the
// model.
void expect_flag_on_every_model_command(const std::string& flag) {
  std::string out;
  for (const char* cmd : {"generate", "eval", "bench", "bench-decode", "serve", "logits"}) {
    ASSERT_EQ(test::run_command(test::rkv_binary() + " " + cmd + " --help 2>&1", out), 0) << cmd;
    EXPECT_NE(out.find(flag), std::string::npos) << cmd;
  }
}

// `logits` on `model`: the flag's default equals `exact`, `llamacpp` changes the logits, and the
// value `bad` is refused with an error naming the flag.
void expect_llamacpp_changes_logits(const std::string& flag, const std::string& model,
                                    const std::string& bad) {
  const std::string base = test::rkv_binary() + " logits --ids 1,2,3 -m " + model + " ";
  std::string out, exact, llamacpp;
  ASSERT_EQ(test::run_command(base + "2>&1", exact), 0) << exact;
  ASSERT_EQ(test::run_command(base + flag + " exact 2>&1", out), 0) << out;
  EXPECT_EQ(out, exact);
  ASSERT_EQ(test::run_command(base + flag + " llamacpp 2>&1", llamacpp), 0) << llamacpp;
  const auto a = nlohmann::json::parse(exact)["logits"][0].get<std::vector<float>>();
  const auto b = nlohmann::json::parse(llamacpp)["logits"][0].get<std::vector<float>>();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
  EXPECT_NE(test::run_command(base + flag + " " + bad + " 2>&1", out), 0);
  EXPECT_NE(out.find(flag), std::string::npos) << out;
}

// --matmul-precision on every command that runs the model; `logits` in llamacpp precision on a
// bf16 checkpoint differs from exact (the rounding reaches the output); a bad value is refused.
TEST(MatmulPrecisionCli, FlagOnEveryCommandAndClearErrors) {
  expect_flag_on_every_model_command("--matmul-precision");
  RKV_REQUIRE_SHARED(shared);
  expect_llamacpp_changes_logits("--matmul-precision",
                                 (shared / "golden/models/qwen2_tied_bf16").string(), "fast");
}

// --attention-precision likewise: on every command that runs the model, changes the logits of a
// checkpoint (its values are not f16 numbers), and a bad value is refused.
TEST(AttentionPrecisionCli, FlagOnEveryCommandAndClearErrors) {
  expect_flag_on_every_model_command("--attention-precision");
  expect_llamacpp_changes_logits("--attention-precision", test::self_made_model().string(), "f16");
}

}  // namespace
}  // namespace rkv
