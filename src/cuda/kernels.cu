// The CUDA backend's kernels (kernels.cuh). First versions written to be right: one block per row
// (or per row and head), float32 arithmetic in the CPU engine's order where it is cheap to keep
// (no fused multiply-adds in RoPE and the norms), double where the CPU sums in double.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "cuda/cuda_util.cuh"
#include "cuda/kernels.cuh"

namespace rkv::cuda {

namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of a double over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ double block_sum(double v, double* shared /* [32] */) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0.0;
  const int warps = blockDim.x / kWarp;
  for (int w = 0; w < warps; ++w) total += shared[w];
  __syncthreads();
  return total;
}

unsigned blocks_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// ---- embedding, RoPE tables, norms ----

template <typename T>
__global__ void embed_kernel(const T* table, const int* tokens, int H, float* out) {
  const int r = blockIdx.x;
  const T* row = table + static_cast<std::size_t>(tokens[r]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[static_cast<std::size_t>(r) * H + i] = to_f32(row[i]);
}

__global__ void rope_tables_kernel(const int* positions, const float* inv_freq, int T, int half,
                                   float* cos_out, float* sin_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * half) return;
  const int r = i / half, j = i % half;
  // angle = float32(position) * inv_freq in float32, as HF computes it; cos and sin in double.
  const float angle = __fmul_rn(static_cast<float>(positions[r]), inv_freq[j]);
  cos_out[i] = static_cast<float>(cos(static_cast<double>(angle)));
  sin_out[i] = static_cast<float>(sin(static_cast<double>(angle)));
}

// The inverse RMS of n values, as the CPU computes it: the sum of squares in double, the mean
// rounded to float, 1 / sqrt(mean + eps) in float.
__device__ float inverse_rms(const float* x, int n, float eps, double* shared) {
  double ss = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  ss = block_sum(ss, shared);
  const float variance = static_cast<float>(ss / n);
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int n, float eps) {
  __shared__ double shared[32];
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * n;
  const float inv = inverse_rms(x + off, n, eps, shared);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    y[off + i] = __fmul_rn(w[i], __fmul_rn(x[off + i], inv));
}

// One block per (row, head): heads [0, Hq) of q, [Hq, Hq + Hkv) of k, then Hkv of v (bias only).
__global__ void prepare_qkv_kernel(QkvParams p) {
  __shared__ double shared[32];
  __shared__ float head[256];
  const int r = blockIdx.x, slot = blockIdx.y, D = p.head_dim, half = D / 2;
  float* x;
  const float* bias;
  const float* norm;
  bool rope = true;
  int h;
  if (slot < p.q_heads) {
    h = slot;
    x = p.q + (static_cast<std::size_t>(r) * p.q_heads + h) * D;
    bias = p.q_bias;
    norm = p.q_norm;
  } else if (slot < p.q_heads + p.kv_heads) {
    h = slot - p.q_heads;
    x = p.k + (static_cast<std::size_t>(r) * p.kv_heads + h) * D;
    bias = p.k_bias;
    norm = p.k_norm;
  } else {
    h = slot - p.q_heads - p.kv_heads;
    x = p.v + (static_cast<std::size_t>(r) * p.kv_heads + h) * D;
    bias = p.v_bias;
    norm = nullptr;
    rope = false;
  }
  for (int e = threadIdx.x; e < D; e += blockDim.x)
    head[e] = bias != nullptr ? __fadd_rn(x[e], bias[static_cast<std::size_t>(h) * D + e]) : x[e];
  __syncthreads();
  if (norm != nullptr) {
    const float inv = inverse_rms(head, D, p.eps, shared);
    for (int e = threadIdx.x; e < D; e += blockDim.x)
      head[e] = __fmul_rn(norm[e], __fmul_rn(head[e], inv));
    __syncthreads();
  }
  if (!rope) {
    for (int e = threadIdx.x; e < D; e += blockDim.x) x[e] = head[e];
    return;
  }
  const float* cs = p.cos + static_cast<std::size_t>(r) * half;
  const float* sn = p.sin + static_cast<std::size_t>(r) * half;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float a = head[j], b = head[j + half];
    x[j] = __fsub_rn(__fmul_rn(a, cs[j]), __fmul_rn(b, sn[j]));
    x[j + half] = __fadd_rn(__fmul_rn(b, cs[j]), __fmul_rn(a, sn[j]));
  }
}

// ---- the KV cache ----

template <typename KT>
__global__ void kv_append_kernel(const float* k, const float* v, const DeviceCacheRow* rows,
                                 const int* index, int kv_heads, int D, int layer) {
  const int r = blockIdx.x, h = blockIdx.y;
  const DeviceCacheRow row = rows[r];
  const std::size_t entry =
      (static_cast<std::size_t>(layer) * kv_heads + h) * row.capacity + index[r];
  KT* kd = reinterpret_cast<KT*>(row.keys) + entry * D;
  KT* vd = reinterpret_cast<KT*>(row.values) + entry * D;
  const std::size_t src = (static_cast<std::size_t>(r) * kv_heads + h) * D;
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    kd[e] = from_f32<KT>(k[src + e]);
    vd[e] = from_f32<KT>(v[src + e]);
  }
  if (threadIdx.x == 0) row.positions[entry] = row.position;
}

// One block of kAttentionWarps warps per (row, query head). Each warp walks every
// kAttentionWarps-th key with an online softmax (running max m, sum l, weighted values acc), lane
// i holding elements i, i + 32, ... of the head; the warps' partial results are merged at the end.
constexpr int kAttentionWarps = 4;

template <int NE, typename KT>
__global__ void attention_kernel(const float* q, float* out, const DeviceCacheRow* rows,
                                 const int* index, int q_heads, int kv_heads, int D, int layer,
                                 float scale) {
  __shared__ float s_m[kAttentionWarps], s_l[kAttentionWarps];
  __shared__ float s_acc[kAttentionWarps][NE * kWarp];
  const int r = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int kvh = h / (q_heads / kv_heads);
  const DeviceCacheRow row = rows[r];
  const int n = index[r] + 1;
  const std::size_t head0 = (static_cast<std::size_t>(layer) * kv_heads + kvh) * row.capacity;
  const KT* K = reinterpret_cast<const KT*>(row.keys) + head0 * D;
  const KT* V = reinterpret_cast<const KT*>(row.values) + head0 * D;
  const float* qh = q + (static_cast<std::size_t>(r) * q_heads + h) * D;
  float qv[NE], acc[NE];
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int e = lane + i * kWarp;
    qv[i] = e < D ? qh[e] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = warp; j < n; j += kAttentionWarps) {
    const KT* kr = K + static_cast<std::size_t>(j) * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int e = lane + i * kWarp;
      if (e < D) s += qv[i] * to_f32(kr[e]);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * correction + p;
    const KT* vr = V + static_cast<std::size_t>(j) * D;
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int e = lane + i * kWarp;
      if (e < D) acc[i] = acc[i] * correction + p * to_f32(vr[e]);
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < NE; ++i) s_acc[warp][lane + i * kWarp] = acc[i];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) M = fmaxf(M, s_m[w]);
  float L = 0.0f;
  for (int w = 0; w < kAttentionWarps; ++w)
    if (s_l[w] > 0.0f) L += s_l[w] * expf(s_m[w] - M);
  float* o = out + (static_cast<std::size_t>(r) * q_heads + h) * D;
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w)
      if (s_l[w] > 0.0f) sum += s_acc[w][e] * expf(s_m[w] - M);
    o[e] = sum / L;
  }
}

// ---- element-wise ----

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void silu_mul_kernel(float* gate, const float* up, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  gate[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void sum_halves_kernel(const float* two, std::size_t n, float* y) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = two[i] + two[n + i];
}

__global__ void gather_rows_kernel(const float* x, const int* rows, int H, float* out) {
  const int i = blockIdx.x;
  const float* src = x + static_cast<std::size_t>(rows[i]) * H;
  for (int e = threadIdx.x; e < H; e += blockDim.x)
    out[static_cast<std::size_t>(i) * H + e] = src[e];
}

template <typename T>
__global__ void round_kernel(const float* x, std::size_t n, float* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f32(from_f32<T>(x[i]));
}

template <typename T>
__global__ void split_kernel(const float* x, std::size_t n, float scale, T* hi, T* lo) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = __fmul_rn(x[i], scale);  // a power of two: exact
  const T h = from_f32<T>(v);
  hi[i] = h;
  if (lo != nullptr) lo[i] = from_f32<T>(__fsub_rn(v, to_f32(h)));
}

// ---- the GEMV ----

// Eight weights from 16-byte-aligned memory, widened to float.
__device__ __forceinline__ void load8(const float* p, float* w) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* w) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[2 * i] = __uint_as_float(words[i] << 16);
    w[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load8(const __half* p, float* w) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

constexpr int kGemvWarps = 8;

template <typename WT, int TT>
__global__ void gemv_kernel(const float* x, const WT* w, float* y, int N, int K) {
  const int lane = threadIdx.x % kWarp;
  const int n = blockIdx.x * kGemvWarps + threadIdx.x / kWarp;
  if (n >= N) return;
  const WT* wr = w + static_cast<std::size_t>(n) * K;
  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;
    // Unrolled so that several 16-byte weight loads of a lane are in flight at once.
#pragma unroll 4
  for (int k = lane * 8; k < K; k += kWarp * 8) {
    float wv[8];
    load8(wr + k, wv);
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      float xv[8];
      load8(x + static_cast<std::size_t>(t) * K + k, xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[t] += wv[i] * xv[i];
    }
  }
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[static_cast<std::size_t>(t) * N + n] = s;
  }
}

template <typename WT, int TT>
void launch_gemv(const float* x, const void* w, int N, int K, float* y, cudaStream_t stream) {
  gemv_kernel<WT, TT>
      <<<blocks_for(static_cast<std::size_t>(N), kGemvWarps), kGemvWarps * kWarp, 0, stream>>>(
          x, static_cast<const WT*>(w), y, N, K);
}

template <typename WT>
void gemv_rows(const float* x, int T, const void* w, int N, int K, float* y, cudaStream_t stream) {
  switch (T) {
    case 1:
      return launch_gemv<WT, 1>(x, w, N, K, y, stream);
    case 2:
      return launch_gemv<WT, 2>(x, w, N, K, y, stream);
    case 3:
      return launch_gemv<WT, 3>(x, w, N, K, y, stream);
    case 4:
      return launch_gemv<WT, 4>(x, w, N, K, y, stream);
    case 5:
      return launch_gemv<WT, 5>(x, w, N, K, y, stream);
    case 6:
      return launch_gemv<WT, 6>(x, w, N, K, y, stream);
    case 7:
      return launch_gemv<WT, 7>(x, w, N, K, y, stream);
    default:
      return launch_gemv<WT, 8>(x, w, N, K, y, stream);
  }
}

template <int NE>
void launch_attention(const float* q, float* out, const DeviceCacheRow* rows, const int* index,
                      int T, int q_heads, int kv_heads, int D, int layer, KvDtype dtype,
                      float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(q_heads));
  const unsigned threads = kAttentionWarps * kWarp;
  switch (dtype) {
    case KvDtype::f32:
      attention_kernel<NE, float>
          <<<grid, threads, 0, stream>>>(q, out, rows, index, q_heads, kv_heads, D, layer, scale);
      break;
    case KvDtype::bf16:
      attention_kernel<NE, __nv_bfloat16>
          <<<grid, threads, 0, stream>>>(q, out, rows, index, q_heads, kv_heads, D, layer, scale);
      break;
    case KvDtype::f16:
      attention_kernel<NE, __half>
          <<<grid, threads, 0, stream>>>(q, out, rows, index, q_heads, kv_heads, D, layer, scale);
      break;
    default:
      throw Error("attention: the CUDA backend has no kernel for a " +
                  std::string(kv_dtype_name(dtype)) + " KV cache");
  }
}

}  // namespace

void embed(const void* table, DType dtype, const int* tokens, int T, int H, float* out,
           cudaStream_t stream) {
  switch (dtype) {
    case DType::F32:
      embed_kernel<<<T, 256, 0, stream>>>(static_cast<const float*>(table), tokens, H, out);
      break;
    case DType::BF16:
      embed_kernel<<<T, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), tokens, H, out);
      break;
    case DType::F16:
      embed_kernel<<<T, 256, 0, stream>>>(static_cast<const __half*>(table), tokens, H, out);
      break;
    default:
      throw Error("embedding: the CUDA backend has no kernel for " +
                  std::string(dtype_name(dtype)) + " weights");
  }
  check_launch("embed");
}

void rope_tables(const int* positions, const float* inv_freq, int T, int half, float* cos,
                 float* sin, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(T) * half;
  rope_tables_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(positions, inv_freq, T, half, cos,
                                                             sin);
  check_launch("rope_tables");
}

void rms_norm(const float* x, const float* w, float* y, int T, int n, float eps,
              cudaStream_t stream) {
  rms_norm_kernel<<<T, 256, 0, stream>>>(x, w, y, n, eps);
  check_launch("rms_norm");
}

void prepare_qkv(const QkvParams& p, cudaStream_t stream) {
  if (p.head_dim > 256) throw Error("prepare_qkv: head size above 256");
  const dim3 grid(static_cast<unsigned>(p.T), static_cast<unsigned>(p.q_heads + 2 * p.kv_heads));
  prepare_qkv_kernel<<<grid, 64, 0, stream>>>(p);
  check_launch("prepare_qkv");
}

void kv_append(const float* k, const float* v, const DeviceCacheRow* rows, const int* index, int T,
               int kv_heads, int head_dim, int layer, KvDtype dtype, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(kv_heads));
  switch (dtype) {
    case KvDtype::f32:
      kv_append_kernel<float>
          <<<grid, 64, 0, stream>>>(k, v, rows, index, kv_heads, head_dim, layer);
      break;
    case KvDtype::bf16:
      kv_append_kernel<__nv_bfloat16>
          <<<grid, 64, 0, stream>>>(k, v, rows, index, kv_heads, head_dim, layer);
      break;
    case KvDtype::f16:
      kv_append_kernel<__half>
          <<<grid, 64, 0, stream>>>(k, v, rows, index, kv_heads, head_dim, layer);
      break;
    default:
      throw Error("kv_append: the CUDA backend has no kernel for a " +
                  std::string(kv_dtype_name(dtype)) + " KV cache");
  }
  check_launch("kv_append");
}

void attention(const float* q, float* out, const DeviceCacheRow* rows, const int* index, int T,
               int q_heads, int kv_heads, int head_dim, int layer, KvDtype dtype, float scale,
               cudaStream_t stream) {
  if (head_dim <= 32)
    launch_attention<1>(q, out, rows, index, T, q_heads, kv_heads, head_dim, layer, dtype, scale,
                        stream);
  else if (head_dim <= 64)
    launch_attention<2>(q, out, rows, index, T, q_heads, kv_heads, head_dim, layer, dtype, scale,
                        stream);
  else if (head_dim <= 128)
    launch_attention<4>(q, out, rows, index, T, q_heads, kv_heads, head_dim, layer, dtype, scale,
                        stream);
  else if (head_dim <= 256)
    launch_attention<8>(q, out, rows, index, T, q_heads, kv_heads, head_dim, layer, dtype, scale,
                        stream);
  else
    throw Error("attention: the CUDA backend supports head sizes up to 256, not " +
                std::to_string(head_dim));
  check_launch("attention");
}

void add(float* y, const float* x, std::size_t n, cudaStream_t stream) {
  add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(y, x, n);
  check_launch("add");
}

void silu_mul(float* gate, const float* up, std::size_t n, cudaStream_t stream) {
  silu_mul_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, n);
  check_launch("silu_mul");
}

void sum_halves(const float* two, std::size_t n, float* y, cudaStream_t stream) {
  sum_halves_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(two, n, y);
  check_launch("sum_halves");
}

void gather_rows(const float* x, const int* rows, int n, int H, float* out, cudaStream_t stream) {
  gather_rows_kernel<<<n, 256, 0, stream>>>(x, rows, H, out);
  check_launch("gather_rows");
}

void split_activations(const float* x, std::size_t n, DType dtype, float scale, void* hi, void* lo,
                       cudaStream_t stream) {
  if (dtype == DType::BF16)
    split_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
        x, n, scale, static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo));
  else if (dtype == DType::F16)
    split_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n, scale, static_cast<__half*>(hi),
                                                         static_cast<__half*>(lo));
  else
    throw Error("split_activations: only BF16 and F16");
  check_launch("split_activations");
}

void round_activations(const float* x, std::size_t n, DType dtype, float* out,
                       cudaStream_t stream) {
  if (dtype == DType::BF16)
    round_kernel<__nv_bfloat16><<<blocks_for(n, 256), 256, 0, stream>>>(x, n, out);
  else if (dtype == DType::F16)
    round_kernel<__half><<<blocks_for(n, 256), 256, 0, stream>>>(x, n, out);
  else
    throw Error("round_activations: only BF16 and F16");
  check_launch("round_activations");
}

void gemv(const float* x, int T, const void* w, DType dtype, int N, int K, float* y,
          cudaStream_t stream) {
  if (T < 1 || T > kGemvMaxRows || K % 8 != 0)
    throw Error("gemv: needs 1 to 8 rows and K a multiple of 8");
  switch (dtype) {
    case DType::F32:
      gemv_rows<float>(x, T, w, N, K, y, stream);
      break;
    case DType::BF16:
      gemv_rows<__nv_bfloat16>(x, T, w, N, K, y, stream);
      break;
    case DType::F16:
      gemv_rows<__half>(x, T, w, N, K, y, stream);
      break;
    default:
      throw Error("gemv: the CUDA backend has no kernel for " + std::string(dtype_name(dtype)) +
                  " weights");
  }
  check_launch("gemv");
}

}  // namespace rkv::cuda
