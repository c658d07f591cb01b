// GQA group pooling: the element-wise MAX over the query heads that share a KV head. R-KV applies
// it to the logits (before the softmax), G-KV to the probabilities (after); neither averages
// (golden README 7.1).
#include <algorithm>

#include "compress/stages.h"

namespace rkv::compress {

void group_max(std::span<const float* const> in, int len, float* out) {
  if (in.empty()) return;
  if (out != in[0]) std::copy(in[0], in[0] + len, out);
  for (std::size_t g = 1; g < in.size(); ++g) {
    const float* src = in[g];
    for (int i = 0; i < len; ++i) out[i] = std::max(out[i], src[i]);
  }
}

}  // namespace rkv::compress
