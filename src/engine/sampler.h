// Token sampling: greedy, temperature, top-k, top-p, min-p, seeded, after the logit bias and the
// repetition, presence and frequency penalties (rkv/sampling.h). The filters apply in Hugging
// Face's order (temperature, top-k, top-p, min-p); temperature 0 means greedy.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/rng.h"
#include "rkv/sampling.h"

namespace rkv {

class Sampler {
 public:
  // `context`: the prompt's tokens (the repetition penalty applies to them too).
  explicit Sampler(const SamplingParams& params, std::span<const int> context = {});
  // Picks the next token from logits [vocab] (adjust(), then the filters). `logits` is used as
  // scratch. The token picked counts as generated for the penalties of the next call.
  int sample(float* logits, int vocab);
  // The logit bias and the penalties for what has been generated so far, in place.
  void adjust(float* logits, int vocab) const;

 private:
  int pick(float* logits, int vocab);  // the filters and the draw

  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, int>> candidates_;
  std::unordered_map<int, int> generated_;  // token -> times generated (presence, frequency)
  std::unordered_set<int> seen_;            // prompt and generated tokens (repetition)
};

// The first index of the largest of v[0..n) (NaNs are passed over; 0 when none is larger than
// -infinity or n is 0).
int argmax(const float* v, int n);

}  // namespace rkv
