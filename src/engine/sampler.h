// Token sampling: greedy, temperature, top-k, top-p, min-p, seeded. The filters apply in
// Hugging Face's order (temperature, top-k, top-p, min-p); temperature 0 means greedy.
#pragma once

#include <cstdint>
#include <vector>

#include "rkv/sampling.h"

namespace rkv {

// A deterministic generator: the same seed gives the same draws on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  double uniform();  // [0, 1)

 private:
  std::uint64_t s_[4];
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Picks the next token from logits [vocab]. `logits` is used as scratch.
  int sample(float* logits, int vocab);

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, int>> candidates_;
};

int argmax(const float* v, int n);

}  // namespace rkv
