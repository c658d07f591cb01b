// Selection (ALGORITHMS.md 1.3): keep the top `count` candidates by score, store them in
// ascending cache order, then the window. StreamingLLM's positional selection lives here too.
#include <algorithm>
#include <cmath>
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

}  // namespace rkv::compress
