// Sampling and stop strings against hand-worked expectations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace rkv {
namespace {

std::vector<int> draw(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    out.push_back(s.sample(l.data(), static_cast<int>(l.size())));
  }
  return out;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f};

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  for (int t : draw(p, kLogits, 5)) EXPECT_EQ(t, 1);
}

// argmax's blocks and lanes against std::max_element: every length around the block size, ties
// (the first index wins, inside a block and across blocks), the maximum in the tail.
TEST(Sampler, ArgmaxIsTheFirstLargestIndex) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3);  // few distinct values: many ties
  for (int n : {1, 2, 15, 16, 17, 511, 512, 513, 1024, 1500, 151936}) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (float& x : v) x = trial % 2 == 0 ? static_cast<float>(small(rng)) : rng() * 1e-9f - 2.0f;
      if (trial == 3) v.back() = 1e30f;  // the maximum in the last element
      const int expected = static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
      EXPECT_EQ(argmax(v.data(), n), expected) << "n=" << n << " trial " << trial;
    }
  }
  const std::vector<float> all_low(1000, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(argmax(all_low.data(), 1000), 0);
  EXPECT_EQ(argmax(nullptr, 0), 0);
}

TEST(Sampler, SameSeedSameOutputDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.seed = 42;
  const auto a = draw(p, kLogits, 200), b = draw(p, kLogits, 200);
  EXPECT_EQ(a, b);
  p.seed = 43;
  EXPECT_NE(a, draw(p, kLogits, 200));
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.seed = 7;
  const int n = 20000;
  std::map<int, int> counts;
  for (int t : draw(p, kLogits, n)) ++counts[t];
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (int i = 0; i < 5; ++i) {
    const double expected = std::exp(kLogits[static_cast<std::size_t>(i)]) / z;
    // 5 standard deviations of a binomial proportion.
    EXPECT_NEAR(counts[i] / double(n), expected, 5 * std::sqrt(expected * (1 - expected) / n))
        << "token " << i;
  }
}

TEST(Sampler, TopKTopPMinPRestrictTheSupport) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.top_k = 2;  // tokens 1 and 4
  for (int t : draw(p, kLogits, 300)) EXPECT_TRUE(t == 1 || t == 4) << t;
  p.top_k = 0;
  // Probabilities: 3.0 -> 0.350, 2.9 -> 0.317, 2.0 -> 0.129, 1.0 -> 0.047, 0.5 -> 0.029 (of e^x / Z
  // with Z = sum e^x = 57.3). top-p 0.6 keeps the smallest prefix reaching 0.6: tokens 1 and 4.
  p.top_p = 0.6f;
  for (int t : draw(p, kLogits, 300)) EXPECT_TRUE(t == 1 || t == 4) << t;
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keep p >= 0.3 * 0.350: tokens 1, 4 and 2 (0.129)
  std::map<int, int> seen;
  for (int t : draw(p, kLogits, 600)) ++seen[t];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_GT(seen[2], 0);
  EXPECT_EQ(seen.count(0) + seen.count(3), 0u);
}

// The logit bias and the penalties, worked by hand (rkv/sampling.h): prompt {1, 2}, repetition
// 2, presence 0.5, frequency 0.25, +3 on token 4; greedy.
TEST(Sampler, BiasAndPenaltiesAdjustTheLogitsAsWorkedByHand) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{4, 3.0f}};
  const std::vector<int> prompt = {1, 2};
  Sampler s(p, prompt);
  const std::vector<float> raw = {2.0f, 1.0f, -0.5f, 0.5f, -1.0f};
  const auto adjusted = [&] {
    std::vector<float> l = raw;
    s.adjust(l.data(), 5);
    return l;
  };
  const auto next = [&] {
    std::vector<float> l = raw;
    return s.sample(l.data(), 5);
  };
  // Nothing generated: bias 4 -> 2; the prompt's 1 -> 1 / 2, 2 -> -0.5 * 2.
  EXPECT_EQ(adjusted(), (std::vector<float>{2.0f, 0.5f, -1.0f, 0.5f, 2.0f}));
  EXPECT_EQ(next(), 0);  // 0 and 4 tie at 2: the lower id
  // 0 generated once: 2 / 2 - 0.25 * 1 - 0.5.
  EXPECT_EQ(adjusted(), (std::vector<float>{0.25f, 0.5f, -1.0f, 0.5f, 2.0f}));
  EXPECT_EQ(next(), 4);
  // 4 generated once: (-1 + 3) / 2 - 0.25 - 0.5.
  EXPECT_EQ(adjusted(), (std::vector<float>{0.25f, 0.5f, -1.0f, 0.5f, 0.25f}));
  EXPECT_EQ(next(), 1);
  // 1 now generated too: 1 / 2 - 0.25 - 0.5 (the prompt's repetition applies once).
  EXPECT_EQ(adjusted(), (std::vector<float>{0.25f, -0.25f, -1.0f, 0.5f, 0.25f}));
  // A count of 2: 2 / 2 - 0.25 * 2 - 0.5.
  s.sample(std::vector<float>{9.0f, 0.0f, 0.0f, 0.0f, 0.0f}.data(), 5);
  EXPECT_EQ(adjusted()[0], 0.0f);
}

TEST(Sampler, ABiasOfMinus100BansAndPlus100Forces) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  p.logit_bias = {{1, -100.0f}, {4, -100.0f}};
  for (int t : draw(p, kLogits, 200)) EXPECT_TRUE(t != 1 && t != 4) << t;
  p.logit_bias = {{3, 100.0f}};
  for (int t : draw(p, kLogits, 200)) EXPECT_EQ(t, 3);
}

TEST(Sampler, InvalidParametersAreRejected) {
  SamplingParams p;
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.min_p = 1.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.top_k = -2;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.frequency_penalty = -2.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.logit_bias = {{3, 101.0f}};
  EXPECT_THROW(Sampler{p}, Error);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(StopMatcher, HoldsBackPartialMatchesAndCutsAtTheStop) {
  StopMatcher m({"</answer>", "STOP"});
  EXPECT_EQ(m.push("The result is 4"), "The result is 4");
  EXPECT_EQ(m.push(" </ans"), " ");  // "</ans" might begin "</answer>"
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("wer> trailing"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</answer>");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenItStopsMatching) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("AR"), "STAR");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

}  // namespace
}  // namespace rkv
