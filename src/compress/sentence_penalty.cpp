// SkipKV's sentence-level stage (ALGORITHMS.md 5): the pairwise cosine of sentence embeddings,
// the redundant set with its penalties, and the per-entry penalty lookup by original position.
// The penalty is subtracted from R-KV's score, so whole redundant sentences are evicted before
// any other token, and only as many of their tokens as the budget requires.
#include <cmath>
#include <string>

#include "compress/stages.h"
#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {

float sentence_cosine(const float* x, const float* y, int dim) {
  double xx = 0.0, yy = 0.0, xy = 0.0;
  for (int i = 0; i < dim; ++i) {
    xx += static_cast<double>(x[i]) * x[i];
    yy += static_cast<double>(y[i]) * y[i];
    xy += static_cast<double>(x[i]) * y[i];
  }
  // Each vector normalised as v / (|v| + 1e-8) (ALGORITHMS.md 3's convention): a zero vector has
  // cosine 0 with everything instead of NaN.
  return static_cast<float>(xy / ((std::sqrt(xx) + 1e-8) * (std::sqrt(yy) + 1e-8)));
}

std::vector<float> sentence_penalties(std::span<const float> embeddings, int count, int dim,
                                      float tau) {
  if (count < 0 || dim < 1 ||
      embeddings.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(dim)) {
    throw Error("sentence_penalties: " + std::to_string(embeddings.size()) +
                " floats do not hold " + std::to_string(count) + " embeddings of size " +
                std::to_string(dim));
  }
  std::vector<float> penalty(static_cast<std::size_t>(count), 0.0f);
  const float* v = embeddings.data();
  for (int i = 0; i < count; ++i) {
    for (int j = i + 1; j < count; ++j) {
      const float c = sentence_cosine(v + static_cast<std::size_t>(i) * dim,
                                      v + static_cast<std::size_t>(j) * dim, dim);
      // Only the EARLIER sentence of a similar pair is redundant.
      if (c > tau && c > penalty[i]) penalty[i] = c;
    }
  }
  return penalty;
}

namespace compress {

void sentence_penalty_of(const std::int32_t* positions, int n,
                         std::span<const float> position_penalty, std::span<float> out) {
  for (int i = 0; i < n; ++i) {
    float p = 0.0f;
    if (!position_penalty.empty()) {
      const std::int32_t pos = positions[i];
      if (pos >= 0 && static_cast<std::size_t>(pos) < position_penalty.size())
        p = position_penalty[static_cast<std::size_t>(pos)];
    }
    out[i] = p;
  }
}

}  // namespace compress
}  // namespace rkv
