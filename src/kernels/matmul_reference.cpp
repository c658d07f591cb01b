#include "kernels/kernels.h"

namespace rkv::kernels {

void matmul_rows_reference(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                           std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t K = w.cols;
  for (std::size_t n = n0; n < n1; ++n) {
    for (std::size_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      float acc = 0.0f;
      for (std::size_t k = 0; k < K; ++k) acc += xt[k] * load_as_f32(w.data, w.dtype, n * K + k);
      y[t * ldy + n] = acc;
    }
  }
}

}  // namespace rkv::kernels
