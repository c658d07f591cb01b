// G-KV's global score (ALGORITHMS.md 4 `gkv`; golden README 6.3 step 6). Each kept entry carries
// the global score g it had at the previous compression; entries without one (tokens appended
// since, and the previous window) stand in with their current local score for max/mean (so
// max(a*x, x) = x and a*x + (1-a)*x = x) and with 0 for sum (H2O-like accumulation).
#include <algorithm>

#include "compress/stages.h"

namespace rkv::compress {

void smooth_global(std::span<const float> local, std::span<const float> old_state,
                   Smoothing smoothing, float decay, std::span<float> global_out,
                   std::span<float> old_out) {
  const std::size_t n = local.size();
  for (std::size_t i = 0; i < n; ++i) {
    const bool cached = i < old_state.size() && has_state(old_state[i]);
    const float l = local[i];
    float old = 0.0f;
    float g = l;
    switch (smoothing) {
      case Smoothing::none:
        old = l;
        break;
      case Smoothing::max:
        old = cached ? old_state[i] : l;
        g = cached ? std::max(decay * old, l) : l;
        break;
      case Smoothing::mean:
        old = cached ? old_state[i] : l;
        g = cached ? decay * old + (1.0f - decay) * l : l;
        break;
      case Smoothing::sum:
        old = cached ? old_state[i] : 0.0f;
        g = cached ? decay * old + l : l;
        break;
    }
    global_out[i] = g;
    if (!old_out.empty()) old_out[i] = old;
  }
}

}  // namespace rkv::compress
