#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace rkv {

float load_quantized_as_f32(const void* data, DType t, std::size_t i) {
  const std::size_t row_block = i / dtype_block_elements(t);
  const auto* block = static_cast<const std::uint8_t*>(data) + row_block * dtype_size(t);
  const std::size_t within = i % dtype_block_elements(t);
  quant::Block32 b;
  quant::decode_block32(t, block, within / 32, b);
  const std::size_t k = within % 32;
  return b.f * static_cast<float>(b.mul[k / 16]) * static_cast<float>(b.q[k]) - b.min;
}

namespace quant {

namespace {

std::uint16_t rd16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void wr16(std::uint8_t* p, std::uint16_t v) {
  std::memcpy(p, &v, 2);
}

// Q4_K's 6-bit scale and min of sub-block j.
void scale_min_k4(int j, const std::uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void nibbles_32(const std::uint8_t* qs, int offset, std::int8_t* q) {
  for (int k = 0; k < 16; ++k) {
    q[k] = static_cast<std::int8_t>((qs[k] & 0xF) - offset);
    q[k + 16] = static_cast<std::int8_t>((qs[k] >> 4) - offset);
  }
}

[[noreturn]] void not_quantized(DType t) {
  throw Error("quant: " + std::string(dtype_name(t)) + " is not a quantized type");
}

int round_int(float v) {
  return static_cast<int>(std::lround(v));
}

void quantize_q8_0(const float* x, std::uint8_t* out) {
  float amax = 0.0f;
  for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  wr16(out, f32_to_f16(d));
  for (int k = 0; k < 32; ++k)
    out[2 + k] = static_cast<std::uint8_t>(static_cast<std::int8_t>(round_int(x[k] * id)));
}

// Q4_0 (levels 16, offset 8) and Q5_0 (levels 32, offset 16).
void quantize_q4_q5_0(const float* x, std::uint8_t* out, int levels) {
  float amax = 0.0f, max = 0.0f;
  for (int k = 0; k < 32; ++k)
    if (std::fabs(x[k]) > amax) {
      amax = std::fabs(x[k]);
      max = x[k];
    }
  const float half = static_cast<float>(levels / 2);
  const float d = max / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  wr16(out, f32_to_f16(d));
  int q[32];
  for (int k = 0; k < 32; ++k)
    q[k] = std::clamp(static_cast<int>(x[k] * id + half + 0.5f), 0, levels - 1);
  std::uint8_t* qs = out + 2;
  if (levels == 32) {
    std::uint32_t qh = 0;
    for (int k = 0; k < 32; ++k) qh |= static_cast<std::uint32_t>((q[k] >> 4) & 1) << k;
    std::memcpy(out + 2, &qh, 4);
    qs = out + 6;
  }
  for (int k = 0; k < 16; ++k)
    qs[k] = static_cast<std::uint8_t>((q[k] & 0xF) | ((q[k + 16] & 0xF) << 4));
}

void quantize_q4_k(const float* x, std::uint8_t* out) {
  float scale[8], minv[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = x[32 * j], hi = x[32 * j];
    for (int k = 0; k < 32; ++k) {
      lo = std::min(lo, x[32 * j + k]);
      hi = std::max(hi, x[32 * j + k]);
    }
    lo = std::min(lo, 0.0f);  // w = scale * q - min with min >= 0
    scale[j] = (hi - lo) / 15.0f;
    minv[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
  wr16(out, f32_to_f16(d));
  wr16(out + 2, f32_to_f16(dmin));
  const float d16 = f16_to_f32(rd16(out)), dmin16 = f16_to_f32(rd16(out + 2));
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d16 > 0.0f ? std::clamp(round_int(scale[j] / d16), 0, 63) : 0;
    m[j] = dmin16 > 0.0f ? std::clamp(round_int(minv[j] / dmin16), 0, 63) : 0;
  }
  std::uint8_t* s = out + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = static_cast<std::uint8_t>(sc[j]);
      s[j + 4] = static_cast<std::uint8_t>(m[j]);
    } else {
      s[j + 4] = static_cast<std::uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      s[j - 4] = static_cast<std::uint8_t>(s[j - 4] | ((sc[j] >> 4) << 6));
      s[j] = static_cast<std::uint8_t>(s[j] | ((m[j] >> 4) << 6));
    }
  }
  std::uint8_t* qs = out + 16;
  for (int j = 0; j < 8; ++j) {
    const float f = d16 * static_cast<float>(sc[j]);
    const float mn = dmin16 * static_cast<float>(m[j]);
    const float inv = f > 0.0f ? 1.0f / f : 0.0f;
    for (int k = 0; k < 32; ++k) {
      const int q = std::clamp(round_int((x[32 * j + k] + mn) * inv), 0, 15);
      std::uint8_t& byte = qs[32 * (j / 2) + k];
      if (j % 2 == 0)
        byte = static_cast<std::uint8_t>(q);
      else
        byte = static_cast<std::uint8_t>(byte | (q << 4));
    }
  }
}

void quantize_q6_k(const float* x, std::uint8_t* out) {
  float scale[16];
  float max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float amax = 0.0f;
    for (int k = 0; k < 16; ++k) amax = std::max(amax, std::fabs(x[16 * j + k]));
    scale[j] = amax / 31.0f;
    max_scale = std::max(max_scale, scale[j]);
  }
  const float d = max_scale / 127.0f;
  std::uint8_t* ql = out;
  std::uint8_t* qh = out + 128;
  auto* scales = reinterpret_cast<std::int8_t*>(out + 192);
  wr16(out + 208, f32_to_f16(d));
  const float d16 = f16_to_f32(rd16(out + 208));
  int q[256];
  for (int j = 0; j < 16; ++j) {
    const int sc = d16 > 0.0f ? std::clamp(round_int(scale[j] / d16), -127, 127) : 0;
    scales[j] = static_cast<std::int8_t>(sc);
    const float f = d16 * static_cast<float>(sc);
    const float inv = f != 0.0f ? 1.0f / f : 0.0f;
    for (int k = 0; k < 16; ++k)
      q[16 * j + k] = std::clamp(round_int(x[16 * j + k] * inv), -32, 31) + 32;
  }
  std::memset(ql, 0, 128);
  std::memset(qh, 0, 64);
  for (int h = 0; h < 2; ++h) {
    const int* qq = q + 128 * h;
    std::uint8_t* l = ql + 64 * h;
    std::uint8_t* hb = qh + 32 * h;
    for (int i = 0; i < 32; ++i) {
      l[i] = static_cast<std::uint8_t>((qq[i] & 0xF) | ((qq[i + 64] & 0xF) << 4));
      l[i + 32] = static_cast<std::uint8_t>((qq[i + 32] & 0xF) | ((qq[i + 96] & 0xF) << 4));
      hb[i] = static_cast<std::uint8_t>((qq[i] >> 4) | ((qq[i + 32] >> 4) << 2) |
                                        ((qq[i + 64] >> 4) << 4) | ((qq[i + 96] >> 4) << 6));
    }
  }
}

// ggml's quantize_row_mxfp4_ref for one block (see quant.h).
void quantize_mxfp4(const float* x, std::uint8_t* out) {
  float amax = 0.0f;
  for (int k = 0; k < 32; ++k)
    if (amax < std::fabs(x[k])) amax = std::fabs(x[k]);
  // ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127); the float is at most 252 for finite amax.
  const float ef = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
  const auto e = static_cast<std::uint8_t>(ef > 0.0f ? std::min(ef, 255.0f) : 0.0f);
  const float d = e8m0_half(e);
  out[0] = e;
  auto best = [d](float v) {
    int index = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - v);
    for (int c = 1; c < 16; ++c) {
      const float err = std::fabs(static_cast<float>(kMxfp4Values[c]) * d - v);
      if (err < best_err) {
        index = c;
        best_err = err;
      }
    }
    return index;
  };
  for (int k = 0; k < 16; ++k)
    out[1 + k] = static_cast<std::uint8_t>(best(x[k]) | best(x[k + 16]) << 4);
}

}  // namespace

void decode_block32(DType t, const void* row, std::size_t b, Block32& out) {
  const auto* p = static_cast<const std::uint8_t*>(row);
  out.mul[0] = out.mul[1] = 1;
  out.min = 0.0f;
  switch (t) {
    case DType::Q8_0: {
      const std::uint8_t* blk = p + b * 34;
      out.f = f16_to_f32(rd16(blk));
      std::memcpy(out.q, blk + 2, 32);
      return;
    }
    case DType::Q4_0: {
      const std::uint8_t* blk = p + b * 18;
      out.f = f16_to_f32(rd16(blk));
      nibbles_32(blk + 2, 8, out.q);
      return;
    }
    case DType::Q5_0: {
      const std::uint8_t* blk = p + b * 22;
      out.f = f16_to_f32(rd16(blk));
      std::uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      const std::uint8_t* qs = blk + 6;
      for (int k = 0; k < 16; ++k) {
        const int lo = (qs[k] & 0xF) | static_cast<int>(((qh >> k) & 1u) << 4);
        const int hi = (qs[k] >> 4) | static_cast<int>(((qh >> (k + 16)) & 1u) << 4);
        out.q[k] = static_cast<std::int8_t>(lo - 16);
        out.q[k + 16] = static_cast<std::int8_t>(hi - 16);
      }
      return;
    }
    case DType::Q4_K: {
      const std::uint8_t* blk = p + (b / 8) * 144;
      const int j = static_cast<int>(b % 8);
      int sc = 0, m = 0;
      scale_min_k4(j, blk + 4, sc, m);
      out.f = f16_to_f32(rd16(blk)) * static_cast<float>(sc);
      out.min = f16_to_f32(rd16(blk + 2)) * static_cast<float>(m);
      const std::uint8_t* qs = blk + 16 + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      for (int k = 0; k < 32; ++k) out.q[k] = static_cast<std::int8_t>((qs[k] >> shift) & 0xF);
      return;
    }
    case DType::Q6_K: {
      const std::uint8_t* blk = p + (b / 8) * 210;
      const int j = static_cast<int>(b % 8);  // 32-element block of the super-block
      const int h = j / 4, quarter = j % 4;   // half (128 elements), and which 32 of it
      const std::uint8_t* ql = blk + 64 * h + (quarter % 2) * 32;
      const std::uint8_t* qh = blk + 128 + 32 * h;
      const auto* scales = reinterpret_cast<const std::int8_t*>(blk + 192);
      const int nshift = (quarter / 2) * 4, hshift = quarter * 2;
      for (int k = 0; k < 32; ++k) {
        const int v = ((ql[k] >> nshift) & 0xF) | (((qh[k] >> hshift) & 3) << 4);
        out.q[k] = static_cast<std::int8_t>(v - 32);
      }
      out.f = f16_to_f32(rd16(blk + 208));
      out.mul[0] = scales[2 * j];
      out.mul[1] = scales[2 * j + 1];
      return;
    }
    case DType::MXFP4: {
      const std::uint8_t* blk = p + b * 17;
      out.f = e8m0_half(blk[0]);
      for (int k = 0; k < 16; ++k) {
        out.q[k] = kMxfp4Values[blk[1 + k] & 0xF];
        out.q[k + 16] = kMxfp4Values[blk[1 + k] >> 4];
      }
      return;
    }
    default:
      not_quantized(t);
  }
}

void dequantize_row(DType t, const void* row, std::size_t cols, float* out) {
  Block32 b;
  for (std::size_t blk = 0; blk < cols / 32; ++blk) {
    decode_block32(t, row, blk, b);
    for (int k = 0; k < 32; ++k)
      out[blk * 32 + static_cast<std::size_t>(k)] =
          b.f * static_cast<float>(b.mul[k / 16]) * static_cast<float>(b.q[k]) - b.min;
  }
}

void quantize_row(DType t, const float* x, std::size_t cols, void* out) {
  auto* o = static_cast<std::uint8_t*>(out);
  const std::size_t be = dtype_block_elements(t), bb = dtype_size(t);
  if (!dtype_is_quantized(t)) not_quantized(t);
  if (cols % be != 0)
    throw Error("quant: a row of " + std::to_string(cols) + " elements is not a multiple of " +
                std::string(dtype_name(t)) + "'s block of " + std::to_string(be));
  for (std::size_t i = 0; i < cols / be; ++i) {
    const float* xb = x + i * be;
    std::uint8_t* ob = o + i * bb;
    switch (t) {
      case DType::Q8_0:
        quantize_q8_0(xb, ob);
        break;
      case DType::Q4_0:
        quantize_q4_q5_0(xb, ob, 16);
        break;
      case DType::Q5_0:
        quantize_q4_q5_0(xb, ob, 32);
        break;
      case DType::Q4_K:
        quantize_q4_k(xb, ob);
        break;
      case DType::Q6_K:
        quantize_q6_k(xb, ob);
        break;
      case DType::MXFP4:
        quantize_mxfp4(xb, ob);
        break;
      default:
        not_quantized(t);
    }
  }
}

namespace {

// The activation quantization of n values, as llama.cpp's x86 CPU backend does it
// (quantize_row_q8_0's AVX path, quantize_row_q8_K): s = 127 / max|x| (0 for an all-zero span),
// q = x * s rounded to nearest, ties to even, in [-127, 127]. Returns max|x|.
float quantize_span(const float* x, int n, std::int8_t* q) {
  float amax = 0.0f;
  for (int k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float s = amax != 0.0f ? 127.0f / amax : 0.0f;
  // Clamped as floats (fmax/fmin also turn a NaN from a non-finite input into a bound) before
  // the conversion, which a NaN or an out-of-range value would make undefined.
  for (int k = 0; k < n; ++k)
    q[k] =
        static_cast<std::int8_t>(std::fmin(std::fmax(std::nearbyint(x[k] * s), -127.0f), 127.0f));
  return amax;
}

int sum_of(const std::int8_t* q, int n) {
  int s = 0;
  for (int k = 0; k < n; ++k) s += q[k];
  return s;
}

}  // namespace

void quantize_activations(const float* x, std::size_t T, std::size_t K, std::int8_t* q, float* d,
                          std::int32_t* sum) {
  const std::size_t nb = K / 32;
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t b = 0; b < nb; ++b) {
      std::int8_t* qb = q + t * K + b * 32;
      const float amax = quantize_span(x + t * K + b * 32, 32, qb);
      d[t * nb + b] = f16_to_f32(f32_to_f16(amax / 127.0f));
      sum[t * nb + b] = sum_of(qb, 32);
    }
  }
}

void quantize_activations_k(const float* x, std::size_t T, std::size_t K, std::int8_t* q, float* d,
                            std::int16_t* bsum, float* fsum) {
  const std::size_t nsb = K / 256;
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t sb = 0; sb < nsb; ++sb) {
      std::int8_t* qb = q + t * K + sb * 256;
      const float amax = quantize_span(x + t * K + sb * 256, 256, qb);
      const float dd = amax != 0.0f ? 1.0f / (127.0f / amax) : 0.0f;
      for (std::size_t g = 0; g < 16; ++g) {
        const int s = sum_of(qb + 16 * g, 16);
        const std::size_t at = t * (K / 16) + sb * 16 + g;
        bsum[at] = static_cast<std::int16_t>(s);
        fsum[at] = dd * static_cast<float>(s);
      }
      d[t * nsb + sb] = dd;
    }
  }
}

void decode_superblock(DType t, const void* row, std::size_t sb, SuperBlock& out) {
  const auto* p = static_cast<const std::uint8_t*>(row);
  switch (t) {
    case DType::Q4_K: {
      const std::uint8_t* blk = p + sb * 144;
      out.d = f16_to_f32(rd16(blk));
      out.dmin = f16_to_f32(rd16(blk + 2));
      for (int j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        scale_min_k4(j, blk + 4, sc, m);
        out.sc[2 * j] = out.sc[2 * j + 1] = static_cast<std::int16_t>(sc);
        out.m[2 * j] = out.m[2 * j + 1] = static_cast<std::int16_t>(m);
        const std::uint8_t* qs = blk + 16 + 32 * (j / 2);
        for (int k = 0; k < 32; ++k)
          out.u[32 * j + k] = static_cast<std::uint8_t>((qs[k] >> ((j % 2) * 4)) & 0xF);
      }
      return;
    }
    case DType::Q6_K: {
      Block32 b;
      for (int j = 0; j < 8; ++j) {
        decode_block32(t, row, sb * 8 + static_cast<std::size_t>(j), b);
        for (int k = 0; k < 32; ++k) out.u[32 * j + k] = static_cast<std::uint8_t>(b.q[k] + 32);
        for (int h = 0; h < 2; ++h) {
          out.sc[2 * j + h] = b.mul[h];
          out.m[2 * j + h] = static_cast<std::int16_t>(32 * b.mul[h]);
        }
        out.d = out.dmin = b.f;
      }
      return;
    }
    default:
      throw Error(std::string("decode_superblock: ") + std::string(dtype_name(t)) +
                  " has no super-blocks");
  }
}

}  // namespace quant
}  // namespace rkv
