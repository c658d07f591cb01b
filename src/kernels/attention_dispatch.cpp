#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"

namespace rkv::kernels {

AttentionFn attention_reference_for(KvDtype dtype);
void kv_decode_reference(KvDtype dtype, const void* rows, std::size_t n, int d, float* out);
void vec_exp_reference(float*, int);
#if defined(__x86_64__)
AttentionFn attention_avx2_for(KvDtype dtype);
AttentionFn attention_avx512_for(KvDtype dtype);
AttentionRowsFn attention_rows_avx512_for(KvDtype dtype);
AttentionFn attention_amx_bf16_fn();
AttentionRowsFn attention_rows_amx_bf16_fn();
KvDecodeFn kv_decode_avx2_fn();
KvDecodeFn kv_decode_avx512_fn();
void vec_exp_avx2(float*, int);
void vec_exp_avx512(float*, int);
#endif

AttentionFn attention_for(Isa isa, KvDtype dtype) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return attention_avx512_for(dtype);
    case Isa::Avx2:
      return attention_avx2_for(dtype);
    case Isa::Reference:
      break;
  }
#endif
  return attention_reference_for(dtype);
}

AttentionFn attention_amx_for(KvDtype dtype) {
#if defined(__x86_64__)
  if (dtype == KvDtype::bf16) return attention_amx_bf16_fn();
#endif
  (void)dtype;
  return nullptr;
}

namespace {

// The active instruction set's kernel, or the AMX one where amx_enabled() and it has one.
AttentionFn active_attention(KvDtype dtype) {
  if (amx_enabled())
    if (const AttentionFn amx = attention_amx_for(dtype)) return amx;
  return attention_for(active_isa(), dtype);
}

}  // namespace

AttentionFn attention_fn(KvDtype dtype) {
  static const AttentionFn fns[] = {active_attention(KvDtype::f32), active_attention(KvDtype::bf16),
                                    active_attention(KvDtype::f16),
                                    active_attention(KvDtype::q8_0)};
  return fns[static_cast<int>(dtype)];
}

AttentionFn attention_fn(KvDtype dtype, AttentionPrecision precision) {
  return precision == AttentionPrecision::LlamaCpp ? attention_llamacpp_for(dtype)
                                                   : attention_fn(dtype);
}

namespace {

// AttentionRowsFn row by row through an AttentionFn.
template <AttentionFn (*Pick)(KvDtype), KvDtype T>
void attention_rows_each(const float* q, std::size_t q_stride, int R, int G, int d,
                         const void* keys, const void* values, int n0, float scale, float* out,
                         std::size_t out_stride, float* probs) {
  static const AttentionFn fn = Pick(T);
  for (int i = 0; i < R; ++i)
    fn(q + static_cast<std::size_t>(i) * q_stride, G, d, keys, values, n0 + i, scale,
       out + static_cast<std::size_t>(i) * out_stride, probs);
}

template <AttentionFn (*Pick)(KvDtype)>
AttentionRowsFn rows_each(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return &attention_rows_each<Pick, KvDtype::f32>;
    case KvDtype::bf16:
      return &attention_rows_each<Pick, KvDtype::bf16>;
    case KvDtype::f16:
      return &attention_rows_each<Pick, KvDtype::f16>;
    case KvDtype::q8_0:
      return &attention_rows_each<Pick, KvDtype::q8_0>;
  }
  return &attention_rows_each<Pick, KvDtype::f32>;
}

AttentionFn reference_exact(KvDtype dtype) {
  return attention_reference_for(dtype);
}
#if defined(__x86_64__)
AttentionFn avx2_exact(KvDtype dtype) {
  return attention_avx2_for(dtype);
}
#endif

}  // namespace

AttentionRowsFn attention_rows_for(Isa isa, KvDtype dtype, AttentionPrecision precision) {
  if (precision == AttentionPrecision::LlamaCpp) return rows_each<&attention_llamacpp_for>(dtype);
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return attention_rows_avx512_for(dtype);
    case Isa::Avx2:
      return rows_each<&avx2_exact>(dtype);
    case Isa::Reference:
      break;
  }
#endif
  (void)isa;
  return rows_each<&reference_exact>(dtype);
}

AttentionRowsFn attention_rows_fn(KvDtype dtype, AttentionPrecision precision) {
  // On AMX the AMX kernel's rows, so that each row gets what decode gives it.
#if defined(__x86_64__)
  if (precision == AttentionPrecision::Exact && amx_enabled() && dtype == KvDtype::bf16)
    return attention_rows_amx_bf16_fn();
#endif
  return attention_rows_for(active_isa(), dtype, precision);
}

std::string_view attention_precision_name(AttentionPrecision p) {
  return p == AttentionPrecision::Exact ? "exact" : "llamacpp";
}

AttentionPrecision parse_attention_precision(std::string_view name) {
  if (name == "exact") return AttentionPrecision::Exact;
  if (name == "llamacpp") return AttentionPrecision::LlamaCpp;
  throw Error("unknown attention precision '" + std::string(name) +
              "': expected exact or llamacpp");
}

KvDecodeFn kv_decode_for(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return kv_decode_avx512_fn();
    case Isa::Avx2:
      return kv_decode_avx2_fn();
    case Isa::Reference:
      break;
  }
#endif
  return &kv_decode_reference;
}

void kv_to_f32(KvDtype dtype, const void* rows, std::size_t n, int d, float* out) {
  static const KvDecodeFn fn = kv_decode_for(active_isa());
  fn(dtype, rows, n, d, out);
}

void kv_to_f32(const KvRows& rows, float* out) {
  kv_to_f32(rows.dtype, rows.data, static_cast<std::size_t>(rows.n), rows.head_dim, out);
}

void vec_exp(float* x, int n) {
  static const auto fn = [] {
#if defined(__x86_64__)
    switch (active_isa()) {
      case Isa::Avx512:
      case Isa::Avx512Bf16:
        return &vec_exp_avx512;
      case Isa::Avx2:
        return &vec_exp_avx2;
      case Isa::Reference:
        break;
    }
#endif
    return &vec_exp_reference;
  }();
  fn(x, n);
}

void silu_mul(float* gate, const float* up, std::size_t n) {
  constexpr std::size_t kBlock = 256;  // exp of a block at a time, from a stack buffer
  float e[kBlock];
  for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
    const std::size_t m = std::min(kBlock, n - i0);
    for (std::size_t i = 0; i < m; ++i) e[i] = -gate[i0 + i];
    vec_exp(e, static_cast<int>(m));
    for (std::size_t i = 0; i < m; ++i) {
      const float g = gate[i0 + i];
      gate[i0 + i] = g / (1.0f + e[i]) * up[i0 + i];
    }
  }
}

}  // namespace rkv::kernels
