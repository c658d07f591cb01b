// A query group's logits, and GQA group pooling: the element-wise MAX over the query heads that
// share a KV head. R-KV applies it to the logits (before the softmax), G-KV to the probabilities
// (after); neither averages (golden README 7.1).
#include <algorithm>

#include "compress/stages.h"
#include "kernels/kernels.h"

namespace rkv::compress {

void group_max(std::span<const float* const> in, int len, float* out) {
  if (in.empty()) return;
  if (out != in[0]) std::copy(in[0], in[0] + len, out);
  for (std::size_t g = 1; g < in.size(); ++g) {
    const float* src = in[g];
    for (int i = 0; i < len; ++i) out[i] = std::max(out[i], src[i]);
  }
}

void group_logits(const float* queries, int rows, const float* keys, int n, int d, float* out) {
  if (rows <= 0 || n <= 0) return;
  static const kernels::MatmulRowsFn matmul_rows = kernels::matmul_rows_for(kernels::active_isa());
  const kernels::WeightView w{keys, DType::F32, static_cast<std::size_t>(n),
                              static_cast<std::size_t>(d)};
  matmul_rows(queries, static_cast<std::size_t>(rows), w, 0, w.rows, out, w.rows);
}

}  // namespace rkv::compress
