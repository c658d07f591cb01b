// H2O's per-step accumulation (ALGORITHMS.md 4 `h2o`): every decoding step adds the new token's
// attention probabilities, max over the query group, into a per-entry accumulator that the
// cache carries through compressions (new_state of the kept entries). This is the classic H2O;
// G-KV's `sum` recipe, which accumulates only at compression time from the window queries, is
// available as a gkv configuration instead (docs/METHODS.md).
#include <algorithm>
#include <string>

#include "compress/stages.h"
#include "core/error.h"

namespace rkv {

void accumulate_h2o(const float* probs, int q_heads, int kv_heads, int n_all,
                    std::span<float* const> accumulators) {
  if (kv_heads < 1 || q_heads < kv_heads || q_heads % kv_heads != 0 || n_all < 0) {
    throw Error("accumulate_h2o: invalid shape (q_heads " + std::to_string(q_heads) +
                ", kv_heads " + std::to_string(kv_heads) + ", n_all " + std::to_string(n_all) +
                ")");
  }
  if (accumulators.size() != static_cast<std::size_t>(kv_heads)) {
    throw Error("accumulate_h2o: need one accumulator array per KV head (" +
                std::to_string(kv_heads) + "), got " + std::to_string(accumulators.size()));
  }
  const int group = q_heads / kv_heads;
  for (int h = 0; h < kv_heads; ++h) {
    float* acc = accumulators[h];
    for (int i = 0; i < n_all; ++i) {
      float m = probs[static_cast<std::size_t>(h) * group * n_all + i];
      for (int g = 1; g < group; ++g) {
        m = std::max(m, probs[(static_cast<std::size_t>(h) * group + g) * n_all + i]);
      }
      acc[i] = has_state(acc[i]) ? acc[i] + m : m;  // a new entry starts from 0
    }
  }
}

}  // namespace rkv
