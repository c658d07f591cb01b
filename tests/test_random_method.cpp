// The `random` method (issue 19): the floor every scoring method must beat. It keeps the
// observation window and budget - window entries drawn uniformly per KV head, reproducibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "compress/stages.h"
#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {
namespace {

TEST(RandomMethod, SamplesAreDistinctInRangeAndReproducible) {
  for (int n : {1, 7, 100}) {
    for (int count : {0, 1, n / 2, n}) {
      const auto a = compress::uniform_sample(n, count, 42);
      ASSERT_EQ(static_cast<int>(a.size()), count);
      std::set<std::int32_t> distinct(a.begin(), a.end());
      EXPECT_EQ(static_cast<int>(distinct.size()), count);
      for (std::int32_t i : a) EXPECT_TRUE(i >= 0 && i < n);
      EXPECT_EQ(a, compress::uniform_sample(n, count, 42));
    }
  }
  EXPECT_EQ(compress::uniform_sample(5, 9, 1).size(), 5u);  // clamped
  EXPECT_NE(compress::uniform_sample(100, 10, 1), compress::uniform_sample(100, 10, 2));
}

// Every index is kept with probability count / n: over 6000 draws of 20 of 50, each count is
// Binomial(6000, 0.4) (mean 2400, sd 37.9); 5 sd on either side holds for all 50 indices unless
// the sampler is biased (a modulo bias or an off-by-one leaves an index out or favours the ends).
TEST(RandomMethod, EveryCandidateIsEquallyLikelyToBeKept) {
  const int n = 50, count = 20, draws = 6000;
  std::vector<int> kept(n, 0);
  for (int d = 0; d < draws; ++d)
    for (std::int32_t i : compress::uniform_sample(n, count, compress::draw_seed(7, 0, 0, d)))
      ++kept[static_cast<std::size_t>(i)];
  const double mean = draws * 0.4, sd = std::sqrt(draws * 0.4 * 0.6);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(kept[static_cast<std::size_t>(i)], mean, 5 * sd) << i;
  // And pairs are independent enough: the first and last index kept together 0.4 * 19/49.
  int both = 0;
  for (int d = 0; d < draws; ++d) {
    const auto s = compress::uniform_sample(n, count, compress::draw_seed(7, 0, 0, d));
    both += std::count(s.begin(), s.end(), 0) * std::count(s.begin(), s.end(), n - 1);
  }
  const double p = 0.4 * 19.0 / 49.0;
  EXPECT_NEAR(both, draws * p, 5 * std::sqrt(draws * p * (1 - p)));
}

LayerView view_of(int n_all, int kv_heads, int layer, std::int64_t seq_len) {
  LayerView v;
  v.q_heads = kv_heads * 2;
  v.kv_heads = kv_heads;
  v.head_dim = 4;
  v.n_all = n_all;
  v.window = 8;
  v.layer = layer;
  v.seq_len = seq_len;
  return v;  // no keys, queries or state: random reads none
}

TEST(RandomMethod, KeepsTheWindowAndBudgetMinusWindowDrawsPerHead) {
  CompressionParams p = CompressionParams::defaults(Method::random);
  p.budget = 40;
  p.seed = 3;
  const Selection s = compress_layer(view_of(56, 4, 2, 300), p);
  ASSERT_TRUE(s.compressed);
  ASSERT_EQ(s.kept.size(), 4u);
  for (const auto& kept : s.kept) {
    ASSERT_EQ(kept.size(), 40u);
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(kept[32 + i], 48 + i);  // the window, last
    EXPECT_LT(kept[31], 48);
  }
  EXPECT_NE(s.kept[0], s.kept[1]);  // each head its own draw
  // Reproducible from (seed, layer, head, sequence length); any of them changes the draw.
  EXPECT_EQ(compress_layer(view_of(56, 4, 2, 300), p).kept, s.kept);
  EXPECT_NE(compress_layer(view_of(56, 4, 3, 300), p).kept, s.kept);
  EXPECT_NE(compress_layer(view_of(56, 4, 2, 301), p).kept, s.kept);
  p.seed = 4;
  EXPECT_NE(compress_layer(view_of(56, 4, 2, 300), p).kept, s.kept);
  // Below the budget nothing happens.
  EXPECT_FALSE(compress_layer(view_of(40, 4, 2, 300), p).compressed);
}

TEST(RandomMethod, SeedIsAParameterLikeAnyOther) {
  CompressionParams p = CompressionParams::defaults(Method::random);
  p.set("seed", "4294967295");
  EXPECT_EQ(p.seed, 4294967295u);
  EXPECT_NE(p.to_json().find("\"seed\":4294967295"), std::string::npos);
  EXPECT_THROW(p.set("seed", "-1"), Error);
  EXPECT_THROW(p.set("seed", "4294967296"), Error);
  EXPECT_EQ(parse_method("random"), Method::random);
  p.budget = 8;  // not larger than the window
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace rkv
