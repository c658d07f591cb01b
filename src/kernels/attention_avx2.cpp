// The attention kernel of attention_impl.h compiled for avx2 (flags from CMakeLists.txt).
#include "kernels/attention.h"
#include "kernels/attention_impl.h"

namespace rkv::kernels {

void attention_avx2(const float* q, int G, int d, const float* keys, const float* values, int n,
                    float scale, float* out, float* probs) {
  attention_impl(q, G, d, keys, values, n, scale, out, probs);
}

void vec_exp_avx2(float* x, int n) {
  exp_inplace(x, n);
}

}  // namespace rkv::kernels
