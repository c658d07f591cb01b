#include "kv/kv_codec.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace rkv {

std::string_view kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::f32:
      return "f32";
    case KvDtype::bf16:
      return "bf16";
    case KvDtype::f16:
      return "f16";
    case KvDtype::q8_0:
      return "q8_0";
  }
  return "?";
}

KvDtype parse_kv_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return KvDtype::f32;
  if (name == "bf16" || name == "bfloat16") return KvDtype::bf16;
  if (name == "f16" || name == "float16") return KvDtype::f16;
  if (name == "q8_0" || name == "q8") return KvDtype::q8_0;
  throw Error("unknown KV cache dtype '" + std::string(name) +
              "' (expected f32, bf16, f16 or q8_0)");
}

std::size_t kv_row_bytes(KvDtype dtype, int head_dim) {
  if (head_dim <= 0) throw Error("KV cache: the head size must be positive");
  const auto d = static_cast<std::size_t>(head_dim);
  switch (dtype) {
    case KvDtype::f32:
      return d * 4;
    case KvDtype::bf16:
    case KvDtype::f16:
      return d * 2;
    case KvDtype::q8_0:
      if (head_dim % kQ8BlockValues != 0)
        throw Error(
            "a q8_0 KV cache (--kv-dtype, or a request's kv.dtype) stores blocks of 32 values, and "
            "this model's head size is " +
            std::to_string(head_dim) + ", not a multiple of 32: use f32, bf16 or f16 instead");
      return d / kQ8BlockValues * kQ8BlockBytes;
  }
  throw Error("KV cache: unknown dtype");
}

namespace {

void encode_q8_0(const float* x, int d, std::byte* out) {
  for (int b = 0; b < d; b += kQ8BlockValues, out += kQ8BlockBytes) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockValues; ++i) amax = std::fmax(amax, std::fabs(x[b + i]));
    // The stored (f16) scale is the one values are divided by, so that d * q is the nearest
    // value the block can represent; it saturates at f16's largest finite value.
    const std::uint16_t h = f32_to_f16(std::fmin(amax / 127.0f, 65504.0f));
    const float scale = f16_to_f32(h);
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    std::memcpy(out, &h, 2);
    for (int i = 0; i < kQ8BlockValues; ++i) {
      float q = std::nearbyint(x[b + i] * inv);
      q = q > 127.0f ? 127.0f : q;
      q = q < -127.0f ? -127.0f : q;
      const auto qi = static_cast<std::int8_t>(std::isnan(q) ? 0.0f : q);  // NaN: stored as 0
      std::memcpy(out + 2 + i, &qi, 1);
    }
  }
}

}  // namespace

void kv_encode_row(KvDtype dtype, const float* x, int d, std::byte* out) {
  switch (dtype) {
    case KvDtype::f32:
      std::memcpy(out, x, static_cast<std::size_t>(d) * sizeof(float));
      return;
    case KvDtype::bf16:
      for (int i = 0; i < d; ++i) {
        const std::uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDtype::f16:
      for (int i = 0; i < d; ++i) {
        const std::uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDtype::q8_0:
      encode_q8_0(x, d, out);
      return;
  }
}

void kv_decode_rows_reference(KvDtype dtype, const std::byte* rows, std::size_t n, int d,
                              float* out) {
  const std::size_t row_bytes = kv_row_bytes(dtype, d);
  const auto D = static_cast<std::size_t>(d);
  for (std::size_t j = 0; j < n; ++j) {
    const std::byte* row = rows + j * row_bytes;
    float* o = out + j * D;
    switch (dtype) {
      case KvDtype::f32:
        std::memcpy(o, row, D * sizeof(float));
        break;
      case KvDtype::bf16:
      case KvDtype::f16:
        for (std::size_t i = 0; i < D; ++i) {
          std::uint16_t h;
          std::memcpy(&h, row + 2 * i, 2);
          o[i] = dtype == KvDtype::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
        break;
      case KvDtype::q8_0:
        for (std::size_t b = 0; b < D; b += kQ8BlockValues) {
          const std::byte* block = row + b / kQ8BlockValues * kQ8BlockBytes;
          const float scale = q8_block_scale(block);
          for (int i = 0; i < kQ8BlockValues; ++i) {
            std::int8_t q;
            std::memcpy(&q, block + 2 + i, 1);
            o[b + static_cast<std::size_t>(i)] = static_cast<float>(q) * scale;
          }
        }
        break;
    }
  }
}

}  // namespace rkv
