// Selection (ALGORITHMS.md 1.3): keep the top `count` candidates by score, store them in
// ascending cache order, then the window. StreamingLLM's positional selection lives here too.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "compress/stages.h"

namespace rkv::compress {

std::vector<std::int32_t> top_k_by_score(std::span<const float> score, int count) {
  const int n = static_cast<int>(score.size());
  count = std::clamp(count, 0, n);
  std::vector<std::int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  // Descending score; ties by lower index (deterministic, unlike torch.topk); NaN ranks lowest
  // so that one bad score can never push out a real one.
  auto better = [&](std::int32_t a, std::int32_t b) {
    const float sa = score[a];
    const float sb = score[b];
    const bool na = std::isnan(sa);
    const bool nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  if (count < n) std::nth_element(idx.begin(), idx.begin() + count, idx.end(), better);
  idx.resize(count);
  std::sort(idx.begin(), idx.end(), better);
  return idx;
}

std::vector<std::int32_t> kept_with_window(std::vector<std::int32_t> top, int n, int n_all) {
  std::sort(top.begin(), top.end());
  top.reserve(top.size() + static_cast<std::size_t>(n_all - n));
  for (int i = n; i < n_all; ++i) top.push_back(i);
  return top;
}

std::vector<std::int32_t> sinks_and_recent(int n_all, int budget, int sinks) {
  std::vector<std::int32_t> kept;
  if (n_all <= budget) {
    kept.resize(n_all);
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  kept.reserve(budget);
  for (int i = 0; i < sinks; ++i) kept.push_back(i);
  for (int i = n_all - (budget - sinks); i < n_all; ++i) kept.push_back(i);
  return kept;
}

namespace {
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

std::uint64_t draw_seed(std::uint32_t seed, int layer, int head, std::int64_t seq_len) {
  std::uint64_t state = seed;
  std::uint64_t h = splitmix64(state);
  for (std::uint64_t part : {static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(head),
                             static_cast<std::uint64_t>(seq_len)}) {
    state = h ^ part;
    h = splitmix64(state);
  }
  return h;
}

std::vector<std::int32_t> uniform_sample(int n, int count, std::uint64_t seed) {
  count = std::clamp(count, 0, std::max(n, 0));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(std::max(n, 0)));
  std::iota(idx.begin(), idx.end(), 0);
  std::uint64_t state = seed;
  for (int i = 0; i < count; ++i) {
    // j uniform in [i, n): reject the top values that would bias the modulo.
    const std::uint64_t range = static_cast<std::uint64_t>(n - i);
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    std::uint64_t r = splitmix64(state);
    while (r >= limit) r = splitmix64(state);
    std::swap(idx[static_cast<std::size_t>(i)], idx[static_cast<std::size_t>(i + r % range)]);
  }
  idx.resize(static_cast<std::size_t>(count));
  return idx;
}

}  // namespace rkv::compress
