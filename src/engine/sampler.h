// Token sampling: greedy, temperature, top-k, top-p, min-p, seeded. The filters apply in
// Hugging Face's order (temperature, top-k, top-p, min-p); temperature 0 means greedy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "rkv/sampling.h"

namespace rkv {

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
