#include "core/dtype.h"

#include "core/error.h"

namespace rkv {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q5_0:
      return "q5_0";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q6_K:
      return "q6_k";
    case DType::MXFP4:
      return "mxfp4";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "F32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "BF16" || name == "bfloat16") return DType::BF16;
  if (name == "f16" || name == "F16" || name == "float16") return DType::F16;
  if (name == "q8_0" || name == "Q8_0") return DType::Q8_0;
  if (name == "q4_0" || name == "Q4_0") return DType::Q4_0;
  if (name == "q5_0" || name == "Q5_0") return DType::Q5_0;
  if (name == "q4_k" || name == "Q4_K") return DType::Q4_K;
  if (name == "q6_k" || name == "Q6_K") return DType::Q6_K;
  if (name == "mxfp4" || name == "MXFP4") return DType::MXFP4;
  throw Error("unsupported dtype '" + std::string(name) +
              "' (expected f32, bf16, f16, q8_0, q4_0, q5_0, q4_k, q6_k or mxfp4)");
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = abs >> 23;
    std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e-150) and the f16 subnormal unit is 2^-24, so the result is m >> (126 - e),
    // rounded to nearest even.
    const std::uint32_t shift = 126 - e;
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = abs + 0xc8000000u;  // rebias exponent (-112 << 23)
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

}  // namespace rkv
