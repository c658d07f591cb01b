// llama.cpp's CPU flash-attention arithmetic, for `--attention-precision llamacpp`
// (kernels::AttentionPrecision::LlamaCpp). llama.cpp's graph casts an f32 KV cache to f16 before
// flash attention (on by default on the CPU) and its kernel (ggml-cpu ops.cpp,
// ggml_compute_forward_flash_attn_ext_f16_one_chunk, the path every query takes below 64 query
// rows and 512 keys) then, for each query head:
//   * rounds q to f16 (the vec_dot_type of f16 keys), so q . k is a sum of exact f32 products;
//     s = (q . k) * scale in float32;
//   * runs the online softmax over the keys in order: on a new maximum M = s, ms = expf(Mold - M)
//     and the accumulator is scaled by ms; otherwise vs = expf(s - M);
//   * keeps the weighted sum of the values in an f16 buffer, rounded to nearest even after every
//     rescale (acc * ms) and every key (fma(v, vs, acc)); S = S * ms + vs in float32;
//   * writes float(acc) * (1 / S).
// Keys and values are read from the cache in its dtype, widened to float32 and rounded to f16
// (as llama.cpp's cast of its cache). The dot products are summed in double: llama.cpp's are
// float32 sums in a machine-dependent order (double for head sizes below 32), and the products
// are exact, so this differs from it by float32 rounding at most. probs holds the softmax of the
// same scores (for the compression policies that read attention).
//
// This mode exists to compare with llama.cpp, not for speed: portable scalar code, every element
// rounded to f16 in software.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace rkv::kernels {
namespace {

inline float round_f16(float x) {
  return f16_to_f32(f32_to_f16(x));
}

template <KvDtype T>
void attention_llamacpp(const float* q, int G, int d, const void* keys, const void* values, int n,
                        float scale, float* out, float* probs) {
  const std::size_t nd = static_cast<std::size_t>(n) * static_cast<std::size_t>(d);
  thread_local std::vector<float> k16, v16, q16, acc;
  k16.resize(nd);
  v16.resize(nd);
  q16.resize(static_cast<std::size_t>(d));
  acc.resize(static_cast<std::size_t>(d));
  kv_to_f32(T, keys, static_cast<std::size_t>(n), d, k16.data());
  kv_to_f32(T, values, static_cast<std::size_t>(n), d, v16.data());
  for (float& x : k16) x = round_f16(x);
  for (float& x : v16) x = round_f16(x);
  for (int g = 0; g < G; ++g) {
    const float* qg = q + static_cast<std::size_t>(g) * d;
    float* pr = probs + static_cast<std::size_t>(g) * n;
    for (int j = 0; j < d; ++j) q16[j] = round_f16(qg[j]);
    for (float& a : acc) a = 0.0f;
    float M = -std::numeric_limits<float>::infinity(), S = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float* kr = k16.data() + static_cast<std::size_t>(i) * d;
      const float* vr = v16.data() + static_cast<std::size_t>(i) * d;
      double dot = 0.0;
      for (int j = 0; j < d; ++j) dot += static_cast<double>(q16[j] * kr[j]);
      const float s = static_cast<float>(dot) * scale;
      pr[i] = s;
      float ms = 1.0f, vs = 1.0f;
      if (s > M) {
        const float m_old = M;
        M = s;
        ms = std::exp(m_old - M);
        for (float& a : acc) a = round_f16(a * ms);
      } else {
        vs = std::exp(s - M);
      }
      for (int j = 0; j < d; ++j) acc[j] = round_f16(std::fma(vr[j], vs, acc[j]));
      S = S * ms + vs;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    float* og = out + static_cast<std::size_t>(g) * d;
    for (int j = 0; j < d; ++j) og[j] = acc[j] * inv;
    for (int i = 0; i < n; ++i) pr[i] = std::exp(pr[i] - M) * inv;
  }
}

}  // namespace

AttentionFn attention_llamacpp_for(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return &attention_llamacpp<KvDtype::f32>;
    case KvDtype::bf16:
      return &attention_llamacpp<KvDtype::bf16>;
    case KvDtype::f16:
      return &attention_llamacpp<KvDtype::f16>;
    case KvDtype::q8_0:
      return &attention_llamacpp<KvDtype::q8_0>;
  }
  return &attention_llamacpp<KvDtype::f32>;
}

}  // namespace rkv::kernels
