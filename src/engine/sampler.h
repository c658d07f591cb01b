// Token sampling: greedy, temperature, top-k, top-p, min-p, seeded. The filters apply in
// Hugging Face's order (temperature, top-k, top-p, min-p); temperature 0 means greedy.
#pragma once

#include <cstdint>
#include <vector>

namespace rkv {

struct SamplingParams {
  float temperature = 0.6f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.0f;        // 0: off
  std::uint64_t seed = 0;

  // Throws rkv::Error on values outside their ranges.
  void validate() const;
};

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
