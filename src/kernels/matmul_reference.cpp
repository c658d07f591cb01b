#include <vector>

#include "core/quant.h"
#include "kernels/kernels.h"

namespace rkv::kernels {

namespace {

// Q4_K / Q6_K against super-block activations (quant::SuperBlock): per super-block the exact
// integers I = sum_g sc[g] (u . q)_g and M = sum_g m[g] bsum[g], then y += dx d I - dx dmin M.
void superblock_rows_reference(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                               std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t K = w.cols, nsb = K / 256;
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, K);
  quant::SuperBlock blk;
  for (std::size_t n = n0; n < n1; ++n) {
    const void* row = static_cast<const std::uint8_t*>(w.data) + n * row_bytes;
    for (std::size_t t = 0; t < T; ++t) y[t * ldy + n] = 0.0f;
    for (std::size_t sb = 0; sb < nsb; ++sb) {
      quant::decode_superblock(w.dtype, row, sb, blk);
      for (std::size_t t = 0; t < T; ++t) {
        const std::int8_t* q = x.qk + t * K + sb * 256;
        const std::int16_t* bs = x.bsum + t * (K / 16) + sb * 16;
        std::int32_t dot = 0, mins = 0;
        for (int g = 0; g < 16; ++g) {
          std::int32_t part = 0;
          for (int k = 16 * g; k < 16 * g + 16; ++k) part += blk.u[k] * q[k];
          dot += part * blk.sc[g];
          mins += blk.m[g] * bs[g];
        }
        const float dx = x.dk[t * nsb + sb];
        y[t * ldy + n] +=
            dx * blk.d * static_cast<float>(dot) - dx * blk.dmin * static_cast<float>(mins);
      }
    }
  }
}

}  // namespace

// Quantized weights: per 32-element block, the integer dot product of the weights' small integers
// with the 8-bit activations, scaled in float (quant::Block32: f * mul * q - min).
void quantized_rows_reference(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                              std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  if (quant::uses_superblock_activations(w.dtype)) {
    superblock_rows_reference(x, T, w, n0, n1, y, ldy);
    return;
  }
  const std::size_t K = w.cols, nb = K / 32;
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, K);
  quant::Block32 blk;
  for (std::size_t n = n0; n < n1; ++n) {
    const void* row = static_cast<const std::uint8_t*>(w.data) + n * row_bytes;
    for (std::size_t t = 0; t < T; ++t) y[t * ldy + n] = 0.0f;
    for (std::size_t b = 0; b < nb; ++b) {
      quant::decode_block32(w.dtype, row, b, blk);
      for (std::size_t t = 0; t < T; ++t) {
        const std::int8_t* q = x.q + t * K + b * 32;
        std::int32_t dot = 0;
        for (int h = 0; h < 2; ++h) {
          std::int32_t part = 0;
          for (int k = 16 * h; k < 16 * h + 16; ++k) part += blk.q[k] * q[k];
          dot += part * blk.mul[h];
        }
        const float dx = x.d[t * nb + b];
        y[t * ldy + n] += blk.f * dx * static_cast<float>(dot) -
                          blk.min * dx * static_cast<float>(x.sum[t * nb + b]);
      }
    }
  }
}

void quantized_rows_from_f32(Isa isa, const float* x, std::size_t T, const WeightView& w,
                             std::size_t n0, std::size_t n1, float* y, std::size_t ldy) {
  const std::size_t K = w.cols, nb = K / 32;
  std::vector<std::int8_t> q(T * K);
  std::vector<float> d(T * nb);
  std::vector<std::int32_t> sum(T * nb);
  quantize_activations_for(isa)(x, T, K, q.data(), d.data(), sum.data());
  if (quant::uses_superblock_activations(w.dtype)) {
    // Both layouts: the AMX-INT8 tiles (where they run this product) read the blocks of 32.
    std::vector<std::int8_t> qk(T * K);
    std::vector<float> dk(T * (K / 256));
    std::vector<std::int16_t> bsum(T * (K / 16));
    std::vector<float> fsum(T * (K / 16));
    quantize_activations_k_for(isa)(x, T, K, qk.data(), dk.data(), bsum.data(), fsum.data());
    quantized_rows_for(isa)(
        {q.data(), d.data(), sum.data(), qk.data(), dk.data(), bsum.data(), fsum.data()}, T, w, n0,
        n1, y, ldy);
    return;
  }
  quantized_rows_for(isa)({q.data(), d.data(), sum.data()}, T, w, n0, n1, y, ldy);
}

void matmul_rows_reference(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                           std::size_t n1, float* y, std::size_t ldy) {
  if (dtype_is_quantized(w.dtype)) {
    quantized_rows_from_f32(Isa::Reference, x, T, w, n0, n1, y, ldy);
    return;
  }
  const std::size_t K = w.cols;
  for (std::size_t n = n0; n < n1; ++n) {
    for (std::size_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      float acc = 0.0f;
      for (std::size_t k = 0; k < K; ++k) acc += xt[k] * load_as_f32(w.data, w.dtype, n * K + k);
      y[t * ldy + n] = acc;
    }
  }
}

}  // namespace rkv::kernels
