// Attention of one query token against one KV head's cache arrays (DESIGN.md property 6), for
// every dtype the KV cache stores (rkv/kv_dtype.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/kernels.h"
#include "rkv/kv_dtype.h"

namespace rkv {
struct KvRows;
}

namespace rkv::kernels {

// q: [G][d], the G query heads that share this KV head (consecutive heads, HF repeat_kv order).
// keys, values: n rows of d values each in the dtype the function was chosen for, row stride
// kv_row_bytes(dtype, d) (the cache arrays of one (layer, KV head), visible prefix only; for f32
// simply [n][d] floats).
// out: [G][d] = softmax(q k^T * scale) v, softmax and accumulation in float32, keys and values
// read as their exact float32 values (bf16 and f16 widen exactly, q8_0 is scale * q).
// probs: [G][n] scratch; on return it holds the attention probabilities (H2O reads them).
using AttentionFn = void (*)(const float* q, int G, int d, const void* keys, const void* values,
                             int n, float scale, float* out, float* probs);

// Causal attention of R consecutive query tokens of one sequence against one KV head's cache:
// row i (its G heads at q + i * q_stride) sees the first n0 + i rows of keys and values, and its
// output goes to out + i * out_stride. Every row's result is AttentionFn's for it with
// n = n0 + i, bit for bit; the AVX-512 kernel shares its work across the rows (each block of 16
// keys transposed, each chunk of values widened, once for all of them). probs: scratch of
// R * G * (n0 + R - 1) floats (unlike AttentionFn's, not the probabilities on return).
using AttentionRowsFn = void (*)(const float* q, std::size_t q_stride, int R, int G, int d,
                                 const void* keys, const void* values, int n0, float scale,
                                 float* out, std::size_t out_stride, float* probs);

// The arithmetic of the attention (`--attention-precision`):
//  * Exact (the default): as documented above, float32 throughout.
//  * LlamaCpp: llama.cpp's CPU flash attention (attention_llamacpp.cpp): q, keys and values
//    rounded to f16, the weighted sum of the values kept in f16 and rounded after every key.
//    Its logits agree with llama.cpp's goldens more closely; portable scalar code, slow.
enum class AttentionPrecision : std::uint8_t { Exact, LlamaCpp };
std::string_view attention_precision_name(AttentionPrecision p);
// Parses "exact" or "llamacpp"; throws rkv::Error naming the valid values.
AttentionPrecision parse_attention_precision(std::string_view name);

// The implementation for the active instruction set (see kernels.h) and a cache dtype: the AMX
// kernel (attention_amx_for) where kernels::amx_enabled() and it has one for the dtype.
AttentionFn attention_fn(KvDtype dtype = KvDtype::f32);
// The same in a given precision (LlamaCpp: the portable kernel of attention_llamacpp.cpp).
AttentionFn attention_fn(KvDtype dtype, AttentionPrecision precision);
AttentionFn attention_llamacpp_for(KvDtype dtype);
// The rows version for the active instruction set: AVX-512's shared kernel for exact attention
// at head sizes 64 and 128 (where attention_fn picks the AMX kernel, the AMX kernel's rows, each
// row bit for bit its one-row result); elsewhere attention_fn(dtype, precision) row by row.
AttentionRowsFn attention_rows_fn(KvDtype dtype, AttentionPrecision precision);
// The same for one instruction set.
AttentionRowsFn attention_rows_for(Isa isa, KvDtype dtype, AttentionPrecision precision);

// The AMX kernel for a cache dtype (bf16: the scores on AMX-BF16 tiles, the rest as AVX-512's;
// head sizes other than 64 and 128 and more than 8 heads per KV head take the AVX-512 kernel), or
// nullptr for the other dtypes and on builds without it. Callers check kernels::amx_enabled();
// attention_fn and attention_rows_fn pick it there.
AttentionFn attention_amx_for(KvDtype dtype);

// The implementation for one instruction set (callers check kernels::isa_supported first).
AttentionFn attention_for(Isa isa, KvDtype dtype = KvDtype::f32);

// Converts n cache rows of d values of `dtype` (row stride kv_row_bytes(dtype, d)) to float32
// out[n][d], on the active instruction set (what compression reads).
void kv_to_f32(KvDtype dtype, const void* rows, std::size_t n, int d, float* out);

// The same for a cache's read-only rows (kv/kv_cache.h): out[rows.n][rows.head_dim]. What the
// engine's compression calls to read a cache of another dtype than f32 (kv/ itself converts
// nothing, so it depends on no kernel).
void kv_to_f32(const KvRows& rows, float* out);

// The same on one instruction set.
using KvDecodeFn = void (*)(KvDtype dtype, const void* rows, std::size_t n, int d, float* out);
KvDecodeFn kv_decode_for(Isa isa);

// exp(x) for a vector (in place), vectorised; max error about 2 ulp. Used by softmaxes.
void vec_exp(float* x, int n);

// gate[i] <- gate[i] / (1 + exp(-gate[i])) * up[i]: SiLU(gate) * up, the gated MLP's product,
// with exp by vec_exp (exp's argument is clamped to about [-87, 88], so a gate below -87 gives
// a product of at most 1e-36 of |up| instead of 0).
void silu_mul(float* gate, const float* up, std::size_t n);

}  // namespace rkv::kernels
