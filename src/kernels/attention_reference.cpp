// The attention kernel of attention_impl.h compiled for reference (flags from CMakeLists.txt):
// float32 caches directly, the others converted to float32 by kv/kv_codec.cpp first. The
// ground truth of the parity tests for every dtype.
#include "kernels/attention.h"
#include "kernels/attention_impl.h"
#include "kv/kv_codec.h"

namespace rkv::kernels {

void kv_decode_reference(KvDtype dtype, const void* rows, std::size_t n, int d, float* out) {
  kv_decode_rows_reference(dtype, static_cast<const std::byte*>(rows), n, d, out);
}

namespace {

void attention_reference_f32(const float* q, int G, int d, const void* keys, const void* values,
                             int n, float scale, float* out, float* probs) {
  attention_impl(q, G, d, static_cast<const float*>(keys), static_cast<const float*>(values), n,
                 scale, out, probs);
}

template <KvDtype T>
void attention_reference_typed(const float* q, int G, int d, const void* keys, const void* values,
                               int n, float scale, float* out, float* probs) {
  attention_decoded(&kv_decode_reference, T, q, G, d, keys, values, n, scale, out, probs);
}

}  // namespace

AttentionFn attention_reference_for(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return &attention_reference_f32;
    case KvDtype::bf16:
      return &attention_reference_typed<KvDtype::bf16>;
    case KvDtype::f16:
      return &attention_reference_typed<KvDtype::f16>;
    case KvDtype::q8_0:
      return &attention_reference_typed<KvDtype::q8_0>;
  }
  return &attention_reference_f32;
}

void vec_exp_reference(float* x, int n) {
  exp_inplace(x, n);
}

}  // namespace rkv::kernels
