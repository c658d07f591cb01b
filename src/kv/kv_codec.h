// The KV cache's conversions between float32 rows and the stored element type (kv_dtype.h),
// portable code. The attention kernels read the stored types directly (kernels/attention.h);
// these are the ground truth they are tested against, and what encodes appended rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "rkv/kv_dtype.h"

namespace rkv {

// Encodes one row of d values (d a multiple of 32 for q8_0) into kv_row_bytes(dtype, d) bytes.
void kv_encode_row(KvDtype dtype, const float* x, int d, std::byte* out);

// Decodes n rows of d values (row stride kv_row_bytes(dtype, d)) into out[n][d].
void kv_decode_rows_reference(KvDtype dtype, const std::byte* rows, std::size_t n, int d,
                              float* out);

// The scale of a q8_0 block (its first two bytes, an f16).
inline float q8_block_scale(const std::byte* block) {
  std::uint16_t h;
  std::memcpy(&h, block, 2);
  return f16_to_f32(h);
}

}  // namespace rkv
