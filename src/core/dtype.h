// Element types of weights and caches, and exact conversions between them. Besides the float
// types, weights may be block-quantized in ggml's formats (GGUF files; src/core/quant.h has the
// layouts): a row of `cols` weights is cols / block_elements blocks of block_bytes bytes each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rkv {

enum class DType { F32, BF16, F16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4 };

inline bool dtype_is_quantized(DType t) {
  return t != DType::F32 && t != DType::BF16 && t != DType::F16;
}
// Elements per block: 1 for the float types, 32 for Q8_0/Q4_0/Q5_0/MXFP4, 256 for Q4_K/Q6_K.
inline std::size_t dtype_block_elements(DType t) {
  switch (t) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      return 1;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::MXFP4:
      return 32;
    case DType::Q4_K:
    case DType::Q6_K:
      return 256;
  }
  return 1;
}
// Bytes per block (for the float types, bytes per element).
inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::Q8_0:
      return 34;  // f16 d, 32 x int8
    case DType::Q4_0:
      return 18;  // f16 d, 16 bytes of nibbles
    case DType::Q5_0:
      return 22;  // f16 d, 4 bytes of high bits, 16 bytes of nibbles
    case DType::Q4_K:
      return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
    case DType::Q6_K:
      return 210;  // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
    case DType::MXFP4:
      return 17;  // E8M0 exponent, 16 bytes of 4-bit codes
  }
  return 4;
}
// Bytes of a row of `cols` elements (cols must be a multiple of the block).
inline std::size_t dtype_row_bytes(DType t, std::size_t cols) {
  return cols / dtype_block_elements(t) * dtype_size(t);
}
std::string_view dtype_name(DType t);
// Parses "f32"/"F32"/"float32", "bf16"/"BF16"/"bfloat16", "f16"/"F16"/"float16", and the
// quantized weight types "q8_0", "q4_0", "q5_0", "q4_k", "q6_k", "mxfp4" (either case); throws
// rkv::Error.
DType parse_dtype(std::string_view name);

// bf16 is the upper half of an f32: the upcast is exact, the downcast rounds to nearest even.
inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// Element i of a buffer of quantized blocks of type t, dequantized (src/core/quant.cpp).
float load_quantized_as_f32(const void* data, DType t, std::size_t i);

// Reads element i of a buffer of type t as f32.
inline float load_as_f32(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(data)[i];
    case DType::BF16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return load_quantized_as_f32(data, t, i);
  }
}

}  // namespace rkv
