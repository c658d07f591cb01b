// Sampling settings of one request: greedy, temperature, top-k, top-p, min-p, seeded. The
// filters apply in Hugging Face's order (temperature, top-k, top-p, min-p).
#pragma once

#include <cstdint>

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

}  // namespace rkv
