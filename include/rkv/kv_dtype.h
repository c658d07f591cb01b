// The element type the KV cache stores keys and values in (--kv-dtype). Positions, per-entry
// policy state and the query ring stay int32 / float32 whatever it is.
//
//   f32   4 bytes a value: exactly what attention computed (the golden tests pin it)
//   bf16  2 bytes: the upper half of the f32 (rounded to nearest even)
//   f16   2 bytes: IEEE half precision (rounded to nearest even; overflow saturates to inf)
//   q8_0  34 bytes per 32 values: one f16 scale d = max|x| / 127 and 32 int8 q = round(x / d),
//         value = d * q (llama.cpp's Q8_0); the head size must be a multiple of 32
#pragma once

#include <cstddef>
#include <string_view>

namespace rkv {

enum class KvDtype { f32, bf16, f16, q8_0 };

// "f32", "bf16", "f16", "q8_0".
std::string_view kv_dtype_name(KvDtype dtype);
// Reads those names (also "float32", "bfloat16", "float16", "q8"); throws rkv::Error naming the
// accepted ones.
KvDtype parse_kv_dtype(std::string_view name);

inline constexpr int kQ8BlockValues = 32;
inline constexpr std::size_t kQ8BlockBytes = 34;  // f16 scale, then 32 int8

// Bytes of one cached key (or value) row of head_dim values. Throws rkv::Error when the dtype
// cannot hold that head size (q8_0 and a head size that is not a multiple of 32).
std::size_t kv_row_bytes(KvDtype dtype, int head_dim);

}  // namespace rkv
