#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace rkv::kernels {

void attention_reference(const float*, int, int, const float*, const float*, int, float, float*,
                         float*);
void attention_avx2(const float*, int, int, const float*, const float*, int, float, float*, float*);
void attention_avx512(const float*, int, int, const float*, const float*, int, float, float*,
                      float*);
void vec_exp_reference(float*, int);
void vec_exp_avx2(float*, int);
void vec_exp_avx512(float*, int);

AttentionFn attention_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return &attention_avx512;
    case Isa::Avx2:
      return &attention_avx2;
    case Isa::Reference:
      break;
  }
  return &attention_reference;
}

AttentionFn attention_fn() {
  static const AttentionFn fn = attention_for(active_isa());
  return fn;
}

void vec_exp(float* x, int n) {
  static const auto fn = [] {
    switch (active_isa()) {
      case Isa::Avx512:
      case Isa::Avx512Bf16:
        return &vec_exp_avx512;
      case Isa::Avx2:
        return &vec_exp_avx2;
      case Isa::Reference:
        break;
    }
    return &vec_exp_reference;
  }();
  fn(x, n);
}

}  // namespace rkv::kernels
