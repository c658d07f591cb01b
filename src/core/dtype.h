// Element types of weights and caches, and exact conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rkv {

enum class DType { F32, BF16, F16 };

inline std::size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}
std::string_view dtype_name(DType t);
// Parses "f32"/"F32"/"float32", "bf16"/"BF16"/"bfloat16", "f16"/"F16"/"float16"; throws rkv::Error.
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

// Reads element i of a buffer of type t as f32.
inline float load_as_f32(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(data)[i];
    case DType::BF16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0.0f;
}

}  // namespace rkv
