// The CUDA backend's kernels, each behind a host function that launches it on a stream and checks
// the launch. Activations are float32 [rows][width]; weights are in their stored dtype (F32, BF16,
// F16); KV caches in theirs (f32, bf16, f16). Arithmetic follows the CPU engine's
// (model_forward.cpp): float32 with float32 products, RMSNorm's sum of squares in double, RoPE's
// cos/sin in double.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "rkv/kv_dtype.h"

namespace rkv::cuda {

// Where one forward row's cache lives on the device: rows of [layers][kv_heads][capacity] entries.
struct DeviceCacheRow {
  std::byte* keys = nullptr;
  std::byte* values = nullptr;
  std::int32_t* positions = nullptr;
  int capacity = 0;
  int position = 0;  // the row's token position
};

// out[r][:] = the embedding of tokens[r] (table: [vocab][H] of dtype).
void embed(const void* table, DType dtype, const int* tokens, int T, int H, float* out,
           cudaStream_t stream);
// cos/sin[r][j] = cos/sin(float(positions[r]) * inv_freq[j]), j < half.
void rope_tables(const int* positions, const float* inv_freq, int T, int half, float* cos,
                 float* sin, cudaStream_t stream);
// y[r] = w * x[r] / sqrt(mean(x[r]^2) + eps), rows of n.
void rms_norm(const float* x, const float* w, float* y, int T, int n, float eps,
              cudaStream_t stream);
// x[r] += residual[r], then y[r] = the norm of the new x[r], in one launch (y may be residual):
// the residual add and the next norm of a layer.
void add_rms_norm(float* x, const float* residual, const float* w, float* y, int T, int n,
                  float eps, cudaStream_t stream);
// Per row: biases into q, k, v (null: none), per-head RMSNorm of q and k (null weights: none),
// then rotate-half RoPE of q and k with the row's tables.
struct QkvParams {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0.0f;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int T = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
};
void prepare_qkv(const QkvParams& p, cudaStream_t stream);
// Row r's keys and values k[r], v[r] ([kv_heads][head_dim] f32) into its cache at `layer`, entry
// index[r], converted to `dtype`, with its position.
void kv_append(const float* k, const float* v, const DeviceCacheRow* rows, const int* index, int T,
               int kv_heads, int head_dim, int layer, KvDtype dtype, cudaStream_t stream);
// out[r][h] = softmax(q[r][h] . K^T * scale) V over the first index[r] + 1 entries of row r's
// cache at `layer`, KV head h / (q_heads / kv_heads): head_dim a multiple of 8 up to 256, at most
// 16 query heads per KV head. The keys are split into chunks of kAttentionChunk entries, each
// attended by its own block and merged after; max_keys bounds index[r] + 1 over the rows, and a
// pass with more than one chunk needs attention_workspace_bytes() of `workspace`. A row's result
// depends on its own cache alone, not on the other rows of the pass.
inline constexpr int kAttentionChunk = 128;
std::size_t attention_workspace_bytes(int T, int q_heads, int head_dim, int max_keys);
void attention(const float* q, float* out, const DeviceCacheRow* rows, const int* index, int T,
               int q_heads, int kv_heads, int head_dim, int layer, KvDtype dtype, float scale,
               int max_keys, float* workspace, cudaStream_t stream);
// y[i] += x[i].
void add(float* y, const float* x, std::size_t n, cudaStream_t stream);
// gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i].
void silu_mul(float* gate, const float* up, std::size_t n, cudaStream_t stream);
// y[i] = two[i] + two[n + i], i < n.
void sum_halves(const float* two, std::size_t n, float* y, cudaStream_t stream);
// out[i][:] = x[rows[i]][:], rows of H.
void gather_rows(const float* x, const int* rows, int n, int H, float* out, cudaStream_t stream);
// scale * x (n values; scale a power of two) to the 16-bit `dtype` (BF16 or F16), rounded to
// nearest even: hi = round(scale x) and, when lo is not null, lo = round(scale x - hi), so that
// hi + lo carries scale x to about 16 bits more.
void split_activations(const float* x, std::size_t n, DType dtype, float scale, void* hi, void* lo,
                       cudaStream_t stream);
// out = x rounded to nearest even to BF16 or F16 and widened back (kernels::round_activations).
void round_activations(const float* x, std::size_t n, DType dtype, float* out, cudaStream_t stream);
// y[t][n] = sum_k x[t][k] w[n][k] for t < T <= kGemvMaxRows, n < N: one warp per weight row,
// streaming the weights once for all T rows. K must be a multiple of 8.
inline constexpr int kGemvMaxRows = 8;
void gemv(const float* x, int T, const void* w, DType dtype, int N, int K, float* y,
          cudaStream_t stream);
// The same for up to kGemvMaxTargets weights of one dtype and K in one launch (q, k and v; gate and
// up): y_p[t][n] = sum_k x[t][k] w_p[n][k], each row's arithmetic as in a launch of its own.
struct GemvTarget {
  const void* w = nullptr;
  int N = 0;
  float* y = nullptr;
};
inline constexpr int kGemvMaxTargets = 4;
void gemv(const float* x, int T, std::span<const GemvTarget> targets, DType dtype, int K,
          cudaStream_t stream);
// Whether the GEMV is launched as a programmatic dependent launch, so that its blocks start and
// prefetch their weights while the kernel before it finishes: on unless the environment's
// RKV_CUDA_PDL is 0 (read once; a knob for measuring, docs/GPU.md).
bool gemv_pdl();
// Whether the norms run as rms_norm's one-block-a-row kernel with the row in registers (and the
// residual add in its launch): on unless RKV_CUDA_VECTOR_NORM is 0, which gives the scalar
// loop and a separate add (read once; a knob for measuring, docs/GPU.md).
bool vector_norm();

}  // namespace rkv::cuda
