// Unit tests of the compression library: parameter validation, the method table, hand-worked
// small cases of every stage, the h2o accumulator, view checks, and `rkv policy-run`.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compress/golden_case.h"
#include "compress/similarity_tiles.h"
#include "compress/stages.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "rkv/compression.h"
#include "test_util.h"

namespace {

using rkv::CompressionParams;
using rkv::Method;
namespace cs = rkv::compress;

// Expects rkv::Error whose message contains `needle`.
void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no rkv::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const rkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- parameters -------------------------------------------------------------------------------

TEST(CompressionParams, DefaultsOfEveryPresetAreValid) {
  for (const auto& info : rkv::method_table()) {
    EXPECT_NO_THROW(info.defaults.validate()) << info.name;
    EXPECT_EQ(info.defaults.method, info.method);
    EXPECT_EQ(rkv::parse_method(info.name), info.method);
    EXPECT_EQ(rkv::method_name(info.method), info.name);
    for (std::string_view used : info.params) {
      bool known = false;
      for (const auto& p : rkv::compression_param_table()) known |= p.name == used;
      EXPECT_TRUE(known) << info.name << " uses unknown parameter " << used;
    }
  }
  const CompressionParams r = CompressionParams::defaults(Method::rkv);
  EXPECT_EQ(r.budget, 1024);
  EXPECT_EQ(r.buffer, 128);
  EXPECT_EQ(r.window, 8);
  EXPECT_EQ(r.kernel, 7);
  EXPECT_FLOAT_EQ(r.lambda, 0.1f);
  EXPECT_FLOAT_EQ(r.threshold, 0.5f);
  const CompressionParams g = CompressionParams::defaults(Method::gkv);
  EXPECT_EQ(g.window, 16);
  EXPECT_EQ(g.kernel, 5);
  EXPECT_FLOAT_EQ(g.lambda, 0.5f);
  EXPECT_FLOAT_EQ(g.decay, 0.8f);
  EXPECT_EQ(g.smoothing, rkv::Smoothing::max);
  EXPECT_TRUE(g.redundancy);
  EXPECT_FALSE(g.pooling);
  EXPECT_EQ(CompressionParams::defaults(Method::streamingllm).sinks, 4);
}

TEST(CompressionParams, ValidationRejectsBadSettings) {
  struct Bad {
    std::function<void(CompressionParams&)> change;
    const char* needle;
  };
  const std::vector<Bad> cases = {
      {[](auto& p) { p.budget = 8; }, "larger than the window"},
      {[](auto& p) { p.budget = 4; }, "larger than the window"},
      {[](auto& p) { p.window = 0; }, "window must be at least 1"},
      {[](auto& p) { p.buffer = 0; }, "buffer"},
      {[](auto& p) { p.budget = 0; }, "budget"},
      {[](auto& p) { p.kernel = 4; }, "odd"},
      {[](auto& p) { p.kernel = 0; }, "kernel"},
      {[](auto& p) { p.lambda = 1.5f; }, "lambda"},
      {[](auto& p) { p.lambda = -0.1f; }, "lambda"},
      {[](auto& p) { p.lambda = std::nanf(""); }, "lambda"},
      {[](auto& p) { p.threshold = 1.01f; }, "threshold"},
      {[](auto& p) { p.threshold = -2.0f; }, "threshold"},
      {[](auto& p) { p.decay = 1.2f; }, "decay"},
      {[](auto& p) { p.ratio = 0.0f; }, "ratio"},
      {[](auto& p) { p.ratio = 2.0f; }, "ratio"},
      {[](auto& p) { p.shift_gamma = -1.0f; }, "shift_gamma"},
      {[](auto& p) { p.shift_gamma = 200.0f, p.window = 1; }, "window of at least 2"},
  };
  for (const auto& c : cases) {
    CompressionParams p = CompressionParams::defaults(Method::rkv);
    c.change(p);
    expect_error([&] { p.validate(); }, c.needle);
  }
  // streamingllm does not use the window, so only sinks < budget matters there.
  CompressionParams s = CompressionParams::defaults(Method::streamingllm);
  s.budget = 8;
  EXPECT_NO_THROW(s.validate());
  s.sinks = 8;
  expect_error([&] { s.validate(); }, "sinks");
}

TEST(CompressionParams, NamesParseOrExplain) {
  expect_error([] { rkv::parse_method("snapkv2"); }, "expected one of: fullkv, streamingllm");
  expect_error([] { rkv::parse_smoothing("median"); }, "max, mean, sum");
  expect_error([] { rkv::parse_trigger("never"); }, "every-buffer, newline");
  EXPECT_EQ(rkv::parse_smoothing("mean"), rkv::Smoothing::mean);
  EXPECT_EQ(rkv::parse_trigger("newline"), rkv::Trigger::newline);
}

TEST(CompressionParams, SetByName) {
  CompressionParams p;
  for (const auto& info : rkv::compression_param_table()) {
    EXPECT_FALSE(info.name.empty());
    EXPECT_EQ(info.flag.substr(0, 5), "--kv-");
  }
  p.set("method", "gkv");
  p.set("budget", "512");
  p.set("lambda", "0.25");
  p.set("smoothing", "sum");
  p.set("pooling", "on");
  p.set("ratio", "0.5");
  p.set("shift_gamma", "200");
  p.set("trigger", "newline");
  p.set("think_only", "true");
  EXPECT_EQ(p.method, Method::gkv);
  EXPECT_EQ(p.budget, 512);
  EXPECT_FLOAT_EQ(p.lambda, 0.25f);
  EXPECT_EQ(p.smoothing, rkv::Smoothing::sum);
  EXPECT_TRUE(p.pooling);
  ASSERT_TRUE(p.ratio.has_value());
  EXPECT_FLOAT_EQ(*p.ratio, 0.5f);
  EXPECT_TRUE(p.shift_gamma.has_value());
  EXPECT_TRUE(p.think_only);
  p.set("ratio", "none");
  EXPECT_FALSE(p.ratio.has_value());
  expect_error([&] { p.set("budget", "12x"); }, "integer");
  expect_error([&] { p.set("lambda", "inf"); }, "finite");
  expect_error([&] { p.set("pooling", "maybe"); }, "on|off");
  expect_error([&] { p.set("bugdet", "1"); }, "unknown kv parameter 'bugdet'");
  const auto j = nlohmann::json::parse(p.to_json());
  EXPECT_EQ(j["budget"], 512);
  EXPECT_EQ(j["lambda"], 0.25);
  EXPECT_EQ(j["ratio"], nullptr);
}

// Delimiters are token bytes, not necessarily UTF-8: to_json replaces invalid bytes with U+FFFD
// instead of throwing nlohmann::json::type_error (found by fuzz/compression_params.cpp).
TEST(CompressionParams, ToJsonAcceptsInvalidUtf8Lists) {
  rkv::CompressionParams p = rkv::CompressionParams::defaults(rkv::Method::skipkv);
  p.delimiters.push_back("\xc1");
  p.delimiters.push_back("\xe4\xb8");  // an incomplete sequence
  p.keywords.push_back("\xff");
  std::string text;
  ASSERT_NO_THROW(text = p.to_json());
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["delimiters"].back(), "\xef\xbf\xbd");
  EXPECT_EQ(j["keywords"].back(), "\xef\xbf\xbd");
}

TEST(CompressionParams, MethodsJsonListsEveryPreset) {
  const auto j = nlohmann::json::parse(rkv::methods_json());
  ASSERT_EQ(j.size(), rkv::method_table().size());
  auto entry = [&](const std::string& name) {
    for (const auto& m : j) {
      if (m.at("name") == name) return m;
    }
    ADD_FAILURE() << "no method " << name << " in rkv methods";
    return nlohmann::json::object();
  };
  for (const char* name : {"fullkv", "streamingllm", "h2o", "snapkv", "rkv", "gkv"}) {
    EXPECT_TRUE(entry(name).contains("defaults")) << name;
  }
  EXPECT_EQ(entry("gkv")["defaults"]["window"], 16);
  EXPECT_EQ(entry("gkv")["defaults"]["lambda"], 0.5);
  EXPECT_EQ(entry("rkv")["defaults"]["lambda"], 0.1);
  EXPECT_TRUE(entry("h2o")["needs"]["step_attention"]);
}

TEST(CompressionParams, TriggerAndRatio) {
  CompressionParams p = CompressionParams::defaults(Method::rkv);
  p.budget = 128;
  EXPECT_FALSE(rkv::should_compress(128, p));  // spec 1: n_all <= budget does nothing
  EXPECT_TRUE(rkv::should_compress(129, p));
  p.ratio = 0.5f;
  EXPECT_EQ(p.budget_for(1000), 500);
  EXPECT_EQ(p.budget_for(100), 128);
  EXPECT_FALSE(rkv::should_compress(300, p, 1000));
  EXPECT_TRUE(rkv::should_compress(501, p, 1000));
  EXPECT_FALSE(rkv::should_compress(100000, CompressionParams::defaults(Method::fullkv)));
}

// ---- stages ------------------------------------------------------------------------------------

TEST(CompressionStages, MaxPoolIgnoresOutOfRangeNeighbours) {
  const std::vector<float> in = {1, 5, 2, 0, 0, 3};
  std::vector<float> out(in.size());
  cs::max_pool_1d(in, 3, out);
  EXPECT_EQ(out, (std::vector<float>{5, 5, 5, 2, 3, 3}));
  cs::max_pool_1d(in, 5, out);
  EXPECT_EQ(out, (std::vector<float>{5, 5, 5, 5, 3, 3}));
  cs::max_pool_1d(in, 1, out);
  EXPECT_EQ(out, in);
  const std::vector<float> neg = {-3, -1, -2};  // padding must never win, even over negatives
  std::vector<float> out3(3);
  cs::max_pool_1d(neg, 7, out3);
  EXPECT_EQ(out3, (std::vector<float>{-1, -1, -1}));
}

TEST(CompressionStages, NormalizeByMax) {
  std::vector<float> v = {1, 4, 2};
  cs::normalize_by_max(v);
  EXPECT_EQ(v, (std::vector<float>{0.25f, 1, 0.5f}));
  std::vector<float> z = {0, 0};
  cs::normalize_by_max(z);  // left alone rather than NaN
  EXPECT_EQ(z, (std::vector<float>{0, 0}));
}

TEST(CompressionStages, GlobalSmoothingFormulas) {
  const std::vector<float> local = {0.2f, 1.0f, 0.5f};
  const std::vector<float> old = {0.5f, rkv::kNoState, 1.0f};
  std::vector<float> g(3), o(3);
  cs::smooth_global(local, old, rkv::Smoothing::max, 0.8f, g, o);
  EXPECT_FLOAT_EQ(g[0], 0.4f);  // max(0.8 * 0.5, 0.2)
  EXPECT_FLOAT_EQ(g[1], 1.0f);  // no previous score: the local one
  EXPECT_FLOAT_EQ(g[2], 0.8f);  // max(0.8 * 1.0, 0.5)
  EXPECT_FLOAT_EQ(o[1], 1.0f);
  cs::smooth_global(local, old, rkv::Smoothing::mean, 0.8f, g, o);
  EXPECT_FLOAT_EQ(g[0], 0.44f);  // 0.8 * 0.5 + 0.2 * 0.2
  EXPECT_FLOAT_EQ(g[1], 1.0f);
  EXPECT_FLOAT_EQ(g[2], 0.9f);  // 0.8 * 1.0 + 0.2 * 0.5
  cs::smooth_global(local, old, rkv::Smoothing::sum, 0.8f, g, o);
  EXPECT_FLOAT_EQ(g[0], 0.6f);  // 0.8 * 0.5 + 0.2
  EXPECT_FLOAT_EQ(g[1], 1.0f);  // old = 0
  EXPECT_FLOAT_EQ(g[2], 1.3f);  // 0.8 * 1.0 + 0.5
  EXPECT_FLOAT_EQ(o[1], 0.0f);
  cs::smooth_global(local, {}, rkv::Smoothing::max, 0.8f, g);  // no state at all
  EXPECT_EQ(g, local);
}

TEST(CompressionStages, UnbiasedColumnStd) {
  const std::vector<float> rows = {1, 0, 3, 0};  // [2][2]
  std::vector<float> sd(2);
  cs::column_std_unbiased(rows.data(), 2, 2, sd.data());
  EXPECT_FLOAT_EQ(sd[0], std::sqrt(2.0f));  // values 1, 3: mean 2, (1 + 1) / (2 - 1)
  EXPECT_FLOAT_EQ(sd[1], 0.0f);
}

TEST(CompressionStages, TopKOrderTiesAndNaN) {
  const std::vector<float> s = {0.5f, std::nanf(""), 0.9f, 0.5f, 0.1f};
  EXPECT_EQ(cs::top_k_by_score(s, 3), (std::vector<std::int32_t>{2, 0, 3}));
  EXPECT_EQ(cs::top_k_by_score(s, 5).back(), 1);  // NaN ranks lowest
  EXPECT_EQ(cs::kept_with_window({3, 0}, 4, 6), (std::vector<std::int32_t>{0, 3, 4, 5}));
  EXPECT_EQ(cs::sinks_and_recent(10, 6, 2), (std::vector<std::int32_t>{0, 1, 6, 7, 8, 9}));
}

// d = 4 unit keys. Expected column means follow the golden README 6.4 walk-through.
std::vector<float> unit_keys(const std::vector<int>& axes) {
  std::vector<float> k(axes.size() * 4, 0.0f);
  for (std::size_t i = 0; i < axes.size(); ++i) k[i * 4 + axes[i]] = 2.0f;  // norm 2, not 1
  return k;
}

TEST(CompressionStages, RedundancyPairOfDuplicatesIsNotPenalised) {
  const auto k = unit_keys({0, 1, 2, 0});  // entries 0 and 3 are copies
  std::vector<float> r(4);
  cs::RedundancyDetail d;
  cs::redundancy_scores(k.data(), 4, 4, 0.5f, r.data(), cs::RetainDirection::last, &d);
  EXPECT_EQ(d.retain_index, (std::vector<std::int32_t>{3, 0, 0, 0}));
  EXPECT_EQ(d.n_above_threshold, (std::vector<std::int32_t>{1, 0, 0, 1}));
  for (float m : d.column_mean) EXPECT_NEAR(m, 0.0f, 1e-7);
  for (float x : r) EXPECT_NEAR(x, 0.25f, 1e-7);
}

TEST(CompressionStages, RedundancyTripleProtectsTheNewestCopy) {
  const auto k = unit_keys({0, 0, 0, 1});  // entries 0 < 1 < 2 are copies
  std::vector<float> r(4);
  cs::RedundancyDetail d;
  cs::redundancy_scores(k.data(), 4, 4, 0.5f, r.data(), cs::RetainDirection::last, &d);
  EXPECT_EQ(d.retain_index, (std::vector<std::int32_t>{2, 2, 1, 0}));
  // Column 0 keeps S[1,0] + S[2,0], column 1 keeps S[0,1], column 2 nothing; divided by 4.
  EXPECT_NEAR(d.column_mean[0], 0.5f, 1e-6);
  EXPECT_NEAR(d.column_mean[1], 0.25f, 1e-6);
  EXPECT_NEAR(d.column_mean[2], 0.0f, 1e-6);
  EXPECT_NEAR(d.column_mean[3], 0.0f, 1e-6);
  EXPECT_GT(r[0], r[1]);
  EXPECT_GT(r[1], r[2]);
}

TEST(CompressionStages, RedundancyColumnZeroQuirk) {
  // Key 1 has cosine 0.3 with key 0: below T, so row 1 zeroes column 0 anyway (README 6.4.3).
  const std::vector<float> k = {1.0f, 0.0f, 0.3f, std::sqrt(1.0f - 0.09f)};
  std::vector<float> r(2);
  cs::RedundancyDetail d;
  cs::redundancy_scores(k.data(), 2, 2, 0.5f, r.data(), cs::RetainDirection::last, &d);
  EXPECT_EQ(d.retain_index, (std::vector<std::int32_t>{0, 0}));
  EXPECT_NEAR(d.column_mean[0], 0.0f, 1e-7);   // S[1,0] zeroed by the quirk
  EXPECT_NEAR(d.column_mean[1], 0.15f, 1e-6);  // S[0,1] / 2
}

double cosine(const std::vector<float>& k, int i, int j, int d) {
  double ij = 0, ii = 0, jj = 0;
  for (int c = 0; c < d; ++c) {
    const double a = k[static_cast<std::size_t>(i) * d + c],
                 b = k[static_cast<std::size_t>(j) * d + c];
    ij += a * b, ii += a * a, jj += b * b;
  }
  return ij / std::sqrt(ii * jj);
}

TEST(CompressionStages, FastRedundancyMatchesTheNaiveOracle) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {1, 2, 3, 5, 17, 64, 100, 257}) {
    for (int d : {3, 16, 33}) {
      // A shared direction makes many cosines exceed the threshold (as with real keys).
      std::vector<float> bias(d);
      for (float& b : bias) b = normal(rng);
      std::vector<float> k(static_cast<std::size_t>(n) * d);
      for (std::size_t i = 0; i < k.size(); ++i) k[i] = normal(rng) + 0.8f * bias[i % d];
      for (auto dir : {cs::RetainDirection::last, cs::RetainDirection::first}) {
        for (float t : {0.5f, -0.2f}) {
          std::vector<float> fast(n), slow(n);
          cs::RedundancyDetail detail;
          cs::redundancy_scores(k.data(), n, d, t, fast.data(), dir, &detail);
          const auto m = cs::redundancy_reference(k.data(), n, d, t, slow.data(), dir);
          for (int i = 0; i < n; ++i) {
            ASSERT_NEAR(fast[i], slow[i], 1e-6f * slow[i] + 1e-9f) << "n " << n << " d " << d;
            // Retained column and count, from cosines recomputed here in double.
            int above = 0, last = -1;
            bool near_threshold = false;
            for (int j = 0; j < n; ++j) {
              const double c = i == j ? 0.0 : cosine(k, i, j, d);
              near_threshold |= std::fabs(c - t) < 1e-5;
              if (c > t) ++above, last = j;
            }
            if (near_threshold) continue;
            EXPECT_EQ(detail.n_above_threshold[i], above);
            const int want = dir == cs::RetainDirection::last && last >= 0 ? last : 0;
            EXPECT_EQ(detail.retain_index[i], want);
            EXPECT_EQ(m[static_cast<std::size_t>(i) * n + want], 0.0f);
          }
        }
      }
    }
  }
}

TEST(CompressionStages, PortableSimilarityRowsAgreeWithPlainDots) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int d = 24, rows = 2 * cs::kSimRows, cols_pad = 48;
  std::vector<float> kn(static_cast<std::size_t>(rows) * d),
      knt(static_cast<std::size_t>(d) * cols_pad);
  for (float& x : kn) x = normal(rng);
  for (float& x : knt) x = normal(rng);
  {
    const std::string name = "portable";
    const auto fn = &cs::similarity_rows_portable;
    for (int i0 : {0, cs::kSimRows}) {
      for (int j0 : {0, 16, 32}) {
        std::vector<float> out(static_cast<std::size_t>(cs::kSimRows) * cols_pad, -7.0f);
        fn(kn.data(), knt.data(), d, cols_pad, i0, j0, out.data());
        for (int r = 0; r < cs::kSimRows; ++r) {
          for (int j = 0; j < cols_pad; ++j) {
            double want = 0;
            for (int c = 0; c < d; ++c) {
              want += double(kn[static_cast<std::size_t>(i0 + r) * d + c]) *
                      knt[cs::panel_index(c, j, d)];
            }
            const float got = out[static_cast<std::size_t>(r) * cols_pad + j];
            if (j < j0) {
              EXPECT_EQ(got, -7.0f) << name;  // columns before j0 untouched
            } else {
              EXPECT_NEAR(got, want, 1e-4) << name << " r " << r << " j " << j;
            }
          }
        }
      }
    }
  }
}

// n random keys of size d sharing a direction (weight `shared`), normalised: kn row-major with
// rows up to the next multiple of kSimRows (zero), knt the same keys panelled key-major
// (panel_index) up to the next multiple of kSimCols (zero).
void similar_normalised_keys(std::mt19937& rng, int n, int d, float shared, std::vector<float>& kn,
                             std::vector<float>& knt) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int rows_pad = (n + cs::kSimRows - 1) / cs::kSimRows * cs::kSimRows;
  const int cols_pad = (n + cs::kSimCols - 1) / cs::kSimCols * cs::kSimCols;
  std::vector<float> bias(d);
  for (float& b : bias) b = normal(rng);
  kn.assign(static_cast<std::size_t>(rows_pad) * d, 0.0f);
  knt.assign(static_cast<std::size_t>(d) * cols_pad, 0.0f);
  for (int i = 0; i < n; ++i) {
    double norm = 0;
    float* k = kn.data() + static_cast<std::size_t>(i) * d;
    for (int c = 0; c < d; ++c) {
      k[c] = normal(rng) + shared * bias[c];
      norm += double(k[c]) * k[c];
    }
    for (int c = 0; c < d; ++c) {
      k[c] = static_cast<float>(k[c] / std::sqrt(norm));
      knt[cs::panel_index(c, i, d)] = k[c];
    }
  }
}

// The vector similarity kernels this CPU can run (AVX2, AVX-512), by name.
std::vector<std::pair<std::string, cs::SimilarityBlockFn>> vector_similarity_kernels() {
  std::vector<std::pair<std::string, cs::SimilarityBlockFn>> kernels;
#if defined(__x86_64__)
  if (rkv::kernels::isa_supported(rkv::kernels::Isa::Avx2))
    kernels.emplace_back("avx2", &cs::similarity_block_avx2);
  if (rkv::kernels::isa_supported(rkv::kernels::Isa::Avx512))
    kernels.emplace_back("avx512", &cs::similarity_block_avx512);
#endif
  return kernels;
}

// What a block kernel tallies over all of similar_normalised_keys' n keys at threshold t, the
// blocks of kSimRows rows in ascending order (the arrays as redundancy_scores initialises them:
// rows to the next multiple of kSimRows, columns to that of kSimCols).
struct SimilarityTallies {
  std::vector<std::int32_t> upper_last, upper_above, lower_last, lower_above;
};

SimilarityTallies tally_all_blocks(cs::SimilarityBlockFn fn, const std::vector<float>& kn,
                                   const std::vector<float>& knt, int n, int d, float t) {
  const int rows_pad = (n + cs::kSimRows - 1) / cs::kSimRows * cs::kSimRows;
  const int cols_pad = (n + cs::kSimCols - 1) / cs::kSimCols * cs::kSimCols;
  SimilarityTallies out{
      std::vector<std::int32_t>(rows_pad, -1), std::vector<std::int32_t>(rows_pad, 0),
      std::vector<std::int32_t>(cols_pad, -1), std::vector<std::int32_t>(cols_pad, 0)};
  const cs::SimilarityTally tally{n,
                                  t,
                                  out.upper_last.data(),
                                  out.upper_above.data(),
                                  out.lower_last.data(),
                                  out.lower_above.data()};
  for (int i0 = 0; i0 < n; i0 += cs::kSimRows) fn(kn.data(), knt.data(), d, cols_pad, i0, tally);
  return out;
}

// The redundancy stage's block kernels (portable, AVX2, AVX-512) against the pairs counted in
// double: for every row its largest similar column above it, for every column its largest similar
// row below it, and the counts; n is not a multiple of the tile, and a negative threshold makes the
// zero padding "similar" if the kernel let it in.
TEST(CompressionStages, SimilarityBlockKernelsTallyTheSimilarPairs) {
  std::mt19937 rng(5);
  const int n = 37, d = 24;
  std::vector<float> kn, knt;
  similar_normalised_keys(rng, n, d, 0.7f, kn, knt);
  auto cos = [&](int i, int j) {
    double v = 0;
    for (int c = 0; c < d; ++c)
      v +=
          double(kn[static_cast<std::size_t>(i) * d + c]) * kn[static_cast<std::size_t>(j) * d + c];
    return v;
  };
  std::vector<std::pair<std::string, cs::SimilarityBlockFn>> kernels = {
      {"portable", &cs::similarity_block_portable}};
  for (auto& k : vector_similarity_kernels()) kernels.push_back(std::move(k));
  for (const auto& [name, fn] : kernels) {
    for (float t : {0.3f, -0.1f}) {
      const SimilarityTallies got = tally_all_blocks(fn, kn, knt, n, d, t);
      int hits = 0;
      for (int i = 0; i < n; ++i) {
        int up_last = -1, up_count = 0, low_last = -1, low_count = 0;
        for (int j = 0; j < n; ++j) {
          if (j == i) continue;
          const double c = cos(i, j);
          ASSERT_GT(std::fabs(c - t), 1e-5) << "the data has a pair on the threshold";
          if (c <= t) continue;
          ++hits;
          if (j > i) up_last = j, ++up_count;
          if (j < i) low_last = j, ++low_count;
        }
        SCOPED_TRACE(name + " t " + std::to_string(t) + " entry " + std::to_string(i));
        EXPECT_EQ(got.upper_last[i], up_last);
        EXPECT_EQ(got.upper_above[i], up_count);
        EXPECT_EQ(got.lower_last[i], low_last);
        EXPECT_EQ(got.lower_above[i], low_count);
      }
      EXPECT_GT(hits, n) << "too few similar pairs to test anything";
      EXPECT_LT(hits, n * (n - 1)) << "every pair similar: nothing tested";
      for (std::size_t j = n; j < got.lower_above.size(); ++j)
        EXPECT_EQ(got.lower_above[j], 0) << name << " padding";
    }
  }
}

// The vector kernels compute each cosine as one chain of FMAs over the components in order
// (std::fma here), so a threshold equal to one of those sums is a tie that neither may count,
// and the next float above it is not a hit while the one below is: the AVX2 and AVX-512 kernels
// tally exactly the pairs that chain puts above the threshold (n = 70 spans both of AVX-512's
// tile widths, 32 and 16 columns, and rows past the end of a block).
TEST(CompressionStages, SimilarityBlockKernelsCountExactlyTheFmaChainsAbove) {
  const auto kernels = vector_similarity_kernels();
  if (kernels.empty()) GTEST_SKIP() << "no vector similarity kernel on this CPU";
  std::mt19937 rng(17);
  for (int d : {64, 128}) {
    const int n = 70;
    std::vector<float> kn, knt;
    similar_normalised_keys(rng, n, d, 1.0f, kn, knt);
    auto chain = [&](int i, int j) {
      float s = 0.0f;
      for (int c = 0; c < d; ++c)
        s = std::fma(kn[static_cast<std::size_t>(i) * d + c],
                     kn[static_cast<std::size_t>(j) * d + c], s);
      return s;
    };
    const float tie = chain(5, 40);
    for (float t : {tie, std::nextafter(tie, 2.0f), std::nextafter(tie, -2.0f), chain(0, 69)}) {
      for (const auto& [name, fn] : kernels) {
        SCOPED_TRACE(name + " d " + std::to_string(d) + " t " + std::to_string(t));
        const SimilarityTallies got = tally_all_blocks(fn, kn, knt, n, d, t);
        for (int i = 0; i < n; ++i) {
          int up_last = -1, up_count = 0, low_last = -1, low_count = 0;
          for (int j = i + 1; j < n; ++j)
            if (chain(i, j) > t) up_last = j, ++up_count;
          for (int j = 0; j < i; ++j)
            if (chain(j, i) > t) low_last = j, ++low_count;
          ASSERT_EQ(got.upper_last[i], up_last) << "entry " << i;
          ASSERT_EQ(got.upper_above[i], up_count) << "entry " << i;
          ASSERT_EQ(got.lower_last[i], low_last) << "entry " << i;
          ASSERT_EQ(got.lower_above[i], low_count) << "entry " << i;
        }
      }
    }
    // The tie and the float below it differ by the pair (5, 40) alone at least: the test can tell
    // a kernel that rounds differently.
    int at_tie = 0, below = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        at_tie += chain(i, j) > tie;
        below += chain(i, j) > std::nextafter(tie, -2.0f);
      }
    EXPECT_GT(below, at_tie);
    EXPECT_GT(at_tie, 0);
  }
}

TEST(CompressionStages, PrefillSeedSumsCausalAttention) {
  // One KV head, one query head, two entries, head_dim 1: query 0 sees only key 0 (p = 1);
  // query 1 splits between keys 0 and 1.
  const std::vector<float> q = {1.0f, 2.0f};
  const std::vector<float> k = {0.5f, -0.5f};
  std::vector<float> out(2);
  const float* keys[] = {k.data()};
  float* outs[] = {out.data()};
  rkv::gkv_prefill_scores(q.data(), keys, 1, 1, 1, 2, outs);
  const float e0 = std::exp(2.0f * 0.5f), e1 = std::exp(2.0f * -0.5f);
  EXPECT_NEAR(out[0], 1.0f + e0 / (e0 + e1), 1e-6);
  EXPECT_NEAR(out[1], e1 / (e0 + e1), 1e-6);
}

// ---- whole methods -----------------------------------------------------------------------------

// A small random layer: 4 query heads over 2 KV heads, d 8.
struct Layer {
  int q_heads = 4, kv_heads = 2, d = 8, n_all, window;
  std::vector<float> queries;
  std::vector<std::vector<float>> keys, state;
  Layer(int n, int w, unsigned seed) : n_all(n), window(w) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    queries.resize(static_cast<std::size_t>(q_heads) * w * d);
    for (float& x : queries) x = normal(rng);
    keys.assign(kv_heads, std::vector<float>(static_cast<std::size_t>(n) * d));
    for (auto& k : keys) {
      for (float& x : k) x = normal(rng);
    }
    state.assign(kv_heads, std::vector<float>(n, rkv::kNoState));
  }
  rkv::LayerView view() const {
    rkv::LayerView v;
    v.q_heads = q_heads, v.kv_heads = kv_heads, v.head_dim = d, v.n_all = n_all, v.window = window;
    v.queries = queries.data();
    for (const auto& k : keys) v.keys.push_back(k.data());
    for (const auto& s : state) v.state.push_back(s.data());
    return v;
  }
};

TEST(CompressionMethods, StreamingLlmKeepsSinksAndRecent) {
  Layer layer(20, 4, 1);
  CompressionParams p = CompressionParams::defaults(Method::streamingllm);
  p.budget = 10;
  p.sinks = 3;
  const auto sel = rkv::compress_layer(layer.view(), p);
  ASSERT_TRUE(sel.compressed);
  for (const auto& kept : sel.kept) {
    EXPECT_EQ(kept, (std::vector<std::int32_t>{0, 1, 2, 13, 14, 15, 16, 17, 18, 19}));
  }
}

TEST(CompressionMethods, NothingHappensAtOrBelowTheBudget) {
  Layer layer(16, 4, 2);
  CompressionParams p = CompressionParams::defaults(Method::rkv);
  p.window = 4;
  p.budget = 16;
  EXPECT_FALSE(rkv::compress_layer(layer.view(), p).compressed);
  // The R-KV reference's own trigger (>=) still scores at n_all == budget: every entry is kept.
  const auto sel = rkv::score_and_select(layer.view(), p);
  ASSERT_TRUE(sel.compressed);
  for (const auto& kept : sel.kept) EXPECT_EQ(kept.size(), 16u);
}

TEST(CompressionMethods, KeptIndicesAscendingWithWindowAndGkvState) {
  Layer layer(40, 4, 3);
  CompressionParams p = CompressionParams::defaults(Method::gkv);
  p.window = 4;
  p.budget = 12;
  rkv::Diagnostics diag;
  const auto sel = rkv::compress_layer(layer.view(), p, &diag);
  ASSERT_TRUE(sel.compressed);
  ASSERT_EQ(diag.heads.size(), 2u);
  for (int h = 0; h < 2; ++h) {
    const auto& kept = sel.kept[h];
    ASSERT_EQ(kept.size(), 12u);
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(kept[8 + i], 36 + i);  // the window, never evicted
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(sel.new_state[h][i], diag.heads[h].global_score[kept[i]]);
    }
    for (int i = 8; i < 12; ++i) EXPECT_FALSE(rkv::has_state(sel.new_state[h][i]));
  }
}

TEST(CompressionMethods, ThreadPoolGivesTheSameSelection) {
  Layer layer(300, 8, 4);
  CompressionParams p = CompressionParams::defaults(Method::rkv);
  p.budget = 100;
  rkv::ThreadPool pool(2);
  const auto a = rkv::compress_layer(layer.view(), p);
  const auto b = rkv::compress_layer(layer.view(), p, nullptr, &pool);
  EXPECT_EQ(a.kept, b.kept);
}

TEST(CompressionMethods, H2oAccumulatesGroupMaxAndKeepsHeavyHitters) {
  // q_heads 4 -> kv_heads 2 (group 2), n_all 6.
  const std::vector<float> probs = {
      0.1f, 0.5f, 0.0f, 0.2f, 0.1f, 0.1f,  // q0 (kv 0)
      0.3f, 0.1f, 0.0f, 0.1f, 0.4f, 0.1f,  // q1 (kv 0)
      0.0f, 0.0f, 0.9f, 0.0f, 0.0f, 0.1f,  // q2 (kv 1)
      0.0f, 0.6f, 0.2f, 0.0f, 0.1f, 0.1f,  // q3 (kv 1)
  };
  std::vector<std::vector<float>> acc = {{1.0f, 0, 0, 0, 0, rkv::kNoState},
                                         {0, 0, 0, 0, 0, rkv::kNoState}};
  std::vector<float*> ptrs = {acc[0].data(), acc[1].data()};
  rkv::accumulate_h2o(probs.data(), 4, 2, 6, ptrs);
  EXPECT_FLOAT_EQ(acc[0][0], 1.3f);  // 1 + max(0.1, 0.3)
  EXPECT_FLOAT_EQ(acc[0][1], 0.5f);
  EXPECT_FLOAT_EQ(acc[0][5], 0.1f);  // a new entry starts from 0
  EXPECT_FLOAT_EQ(acc[1][2], 0.9f);
  EXPECT_FLOAT_EQ(acc[1][1], 0.6f);

  rkv::LayerView view;
  view.q_heads = 4, view.kv_heads = 2, view.head_dim = 8, view.n_all = 6;
  view.state = {acc[0].data(), acc[1].data()};
  CompressionParams p = CompressionParams::defaults(Method::h2o);
  p.budget = 4;
  p.window = 2;
  const auto sel = rkv::compress_layer(view, p);
  ASSERT_TRUE(sel.compressed);
  EXPECT_EQ(sel.kept[0], (std::vector<std::int32_t>{0, 1, 4, 5}));
  EXPECT_EQ(sel.kept[1], (std::vector<std::int32_t>{1, 2, 4, 5}));
  EXPECT_FLOAT_EQ(sel.new_state[0][0], 1.3f);  // accumulators survive the compression
  EXPECT_FLOAT_EQ(sel.new_state[1][3], acc[1][5]);

  view.state.clear();
  expect_error([&] { rkv::compress_layer(view, p); }, "state");
}

TEST(CompressionMethods, ViewChecks) {
  Layer layer(40, 4, 5);
  CompressionParams p = CompressionParams::defaults(Method::rkv);
  p.budget = 12;
  expect_error([&] { rkv::compress_layer(layer.view(), p); }, "window 8");  // 4 queries given
  p.window = 4;
  auto v = layer.view();
  v.queries = nullptr;
  expect_error([&] { rkv::compress_layer(v, p); }, "window queries");
  v = layer.view();
  v.q_heads = 3;
  expect_error([&] { rkv::compress_layer(v, p); }, "multiple of kv_heads");
  v = layer.view();
  v.keys.pop_back();
  expect_error([&] { rkv::compress_layer(v, p); }, "keys");
  p.budget = 41;
  expect_error([&] { rkv::score_and_select(layer.view(), p); }, "fewer than the budget");
}

// ---- rkv policy-run -----------------------------------------------------------------------------

TEST(PolicyRunCli, OutputMatchesTheLibrary) {
  RKV_REQUIRE_SHARED(shared);
  const auto case_path = shared / "golden" / "compression" / "snapkv_gqa8x2_d16_b128.json";
  const auto out_path = std::filesystem::temp_directory_path() /
                        ("rkv_policy_run_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = rkv::test::rkv_binary() + " policy-run --case '" + case_path.string() +
                          "' --out '" + out_path.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto got = rkv::test::read_json(out_path);
  std::filesystem::remove(out_path);
  const auto want = cs::run_case(cs::load_case(case_path));
  EXPECT_EQ(got, want);
  // And it has the shape of the case's `expected`.
  const auto expected = cs::load_case(case_path).at("expected");
  for (const auto& [key, value] : expected.items()) {
    if (key != "key_out" && key != "value_out") {
      EXPECT_TRUE(got.contains(key)) << key;
    }
  }
}

TEST(PolicyRunCli, BadCaseIsAnErrorNotACrash) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("rkv_policy_bad_" + std::to_string(::getpid()) + ".json");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{\"method\": \"rkv\", \"params\": {\"budget\": 4, \"window_size\": 8}}", f);
    std::fclose(f);
  }
  const std::string cmd =
      rkv::test::rkv_binary() + " policy-run --case '" + path.string() + "' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  std::filesystem::remove(path);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // rkv::Error -> "error: ..." and status 1
}

}  // namespace
