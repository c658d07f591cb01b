// Attention of one query token against one KV head's cache arrays (DESIGN.md property 6).
#pragma once

#include "kernels/kernels.h"

namespace rkv::kernels {

// q: [G][d], the G query heads that share this KV head (consecutive heads, HF repeat_kv order).
// keys, values: [n][d] (the cache arrays of one (layer, KV head), visible prefix only).
// out: [G][d] = softmax(q k^T * scale) v, softmax in float32.
// probs: [G][n] scratch; on return it holds the attention probabilities (H2O reads them).
using AttentionFn = void (*)(const float* q, int G, int d, const float* keys, const float* values,
                             int n, float scale, float* out, float* probs);

// The implementation for the active instruction set (see kernels.h).
AttentionFn attention_fn();

// The implementation for one instruction set (callers check kernels::isa_supported first).
AttentionFn attention_for(Isa isa);

// exp(x) for a vector (in place), vectorised; max error about 2 ulp. Used by softmaxes.
void vec_exp(float* x, int n);

}  // namespace rkv::kernels
