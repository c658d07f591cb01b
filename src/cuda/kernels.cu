// The CUDA backend's kernels (kernels.cuh). Mostly first versions written to be right: one block
// per row (or per row and head; attention per row, KV head and chunk of keys), float32 arithmetic
// in the CPU engine's order where it is cheap to keep (no fused multiply-adds in RoPE and the
// norms), double where the CPU sums in double.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>
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

// Programmatic dependent launch (Hopper): a kernel launched with it (launch_dependent) may start
// while the kernel before it finishes, once every block of that one has called
// let_the_next_kernel_start; it must call wait_for_the_previous_kernel before it reads what that
// kernel wrote or writes what that kernel reads. The wait returns at once in a kernel launched
// without it, and the call to let the next one start does nothing when the next one was launched
// without it.
__device__ __forceinline__ void let_the_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_the_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
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

// The same norm with the row held in registers, V float4 a thread (n a multiple of 4, at most
// 4 V blockDim.x; add_rms_norm uses it up to 16,384 floats a row): every load of x and w is issued
// before the sum, where the loop above waits on memory once per element a thread. With `residual`,
// x += residual first (written back to x) and the sum is normalized: the residual add and the next
// norm in one pass. y may be residual.
template <int V>
__global__ void __launch_bounds__(1024)
    rms_norm_vec_kernel(float* x, const float* residual, const float* w, float* y, int n,
                        float eps) {
  let_the_next_kernel_start();
  __shared__ double shared[32];
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * n;
  const int n4 = n / 4;
  float4 xv[V], wv[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4) {
      xv[j] = reinterpret_cast<const float4*>(x + off)[i];
      wv[j] = reinterpret_cast<const float4*>(w)[i];
      if (residual != nullptr) {
        const float4 r = reinterpret_cast<const float4*>(residual + off)[i];
        xv[j] = make_float4(__fadd_rn(xv[j].x, r.x), __fadd_rn(xv[j].y, r.y),
                            __fadd_rn(xv[j].z, r.z), __fadd_rn(xv[j].w, r.w));
      }
    }
  }
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4) {
      if (residual != nullptr) reinterpret_cast<float4*>(x + off)[i] = xv[j];
      ss += static_cast<double>(xv[j].x) * xv[j].x;
      ss += static_cast<double>(xv[j].y) * xv[j].y;
      ss += static_cast<double>(xv[j].z) * xv[j].z;
      ss += static_cast<double>(xv[j].w) * xv[j].w;
    }
  }
  ss = block_sum(ss, shared);  // its barrier also orders every read of residual before y's writes
  const float variance = static_cast<float>(ss / n);
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4)
      reinterpret_cast<float4*>(y + off)[i] = make_float4(
          __fmul_rn(wv[j].x, __fmul_rn(xv[j].x, inv)), __fmul_rn(wv[j].y, __fmul_rn(xv[j].y, inv)),
          __fmul_rn(wv[j].z, __fmul_rn(xv[j].z, inv)), __fmul_rn(wv[j].w, __fmul_rn(xv[j].w, inv)));
  }
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

// ---- element-wise ----

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void silu_mul_kernel(float* gate, const float* up, std::size_t n) {
  let_the_next_kernel_start();
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
  let_the_next_kernel_start();
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
constexpr int kGemvInFlight = 4;  // a lane's weight loads in flight
constexpr int kGemvPrefetch = 8;  // chunks of a row prefetched before the previous kernel ends

// The weights of one GEMV launch, their rows numbered one after another: weight p holds rows
// [start[p], start[p + 1]).
struct GemvTargets {
  const void* w[kGemvMaxTargets] = {};
  float* y[kGemvMaxTargets] = {};
  int start[kGemvMaxTargets + 1] = {};
  int count = 0;
};

// A lane's eight weights as they lie in memory (16 bytes for bf16 and f16, 32 for f32), loaded
// past L1 (`ld.global.nc.L1::no_allocate`): each weight is read once, and L1 keeps the
// activations, which every warp of the block reads.
template <typename WT>
struct RawWeights {
  uint4 v[sizeof(WT) / 2];
};
__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}
template <typename WT>
__device__ __forceinline__ RawWeights<WT> load_raw(const WT* p) {
  RawWeights<WT> r;
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(WT) / 2); ++i)
    r.v[i] = load_streaming(p + i * 16 / sizeof(WT));
  return r;
}
__device__ __forceinline__ void widen(const RawWeights<float>& r, float* w) {
  load8(reinterpret_cast<const float*>(r.v), w);
}
__device__ __forceinline__ void widen(const RawWeights<__nv_bfloat16>& r, float* w) {
  load8(reinterpret_cast<const __nv_bfloat16*>(r.v), w);
}
__device__ __forceinline__ void widen(const RawWeights<__half>& r, float* w) {
  load8(reinterpret_cast<const __half*>(r.v), w);
}

// One warp per weight row; each lane takes eight weights at a time, 256 apart across the warp.
// U chunks of a lane's weights are loaded before the first is used, so U loads are in flight
// (4, 8 and 16 timed the same on an H200, docs/GPU.md). A lane sums its products in increasing k
// whatever U is.
template <typename WT, int TT, int U>
__global__ void gemv_kernel(const float* x, GemvTargets tg, int K) {
  const int lane = threadIdx.x % kWarp;
  const int n_all = blockIdx.x * kGemvWarps + threadIdx.x / kWarp;
  if (n_all >= tg.start[tg.count]) return;
  int p = 0;
  while (n_all >= tg.start[p + 1]) ++p;
  const int n = n_all - tg.start[p], N = tg.start[p + 1] - tg.start[p];
  const WT* wr = static_cast<const WT*>(tg.w[p]) + static_cast<std::size_t>(n) * K;
  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;
  auto use = [&](const RawWeights<WT>& raw, int k) {
    float wv[8];
    widen(raw, wv);
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      float xv[8];
      load8(x + static_cast<std::size_t>(t) * K + k, xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[t] += wv[i] * xv[i];
    }
  };
  constexpr int kStep = kWarp * 8;
  int k = lane * 8;
  // The weights do not depend on the kernel before: a row's first kGemvPrefetch chunks (4 KiB of
  // bf16) go to L2 while it may still run (programmatic dependent launch), and x is read only
  // after it has finished.
#pragma unroll
  for (int u = 0; u < kGemvPrefetch; ++u)
    if (k + u * kStep < K) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr + k + u * kStep));
  wait_for_the_previous_kernel();
  for (; k + (U - 1) * kStep < K; k += U * kStep) {
    RawWeights<WT> raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = load_raw(wr + k + u * kStep);
#pragma unroll
    for (int u = 0; u < U; ++u) use(raw[u], k + u * kStep);
  }
  for (; k < K; k += kStep) use(load_raw(wr + k), k);
  float* y = tg.y[p];
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[static_cast<std::size_t>(t) * N + n] = s;
  }
}

// Launches kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent launch when
// `dependent` is set (the kernel must then call wait_for_the_previous_kernel first).
template <typename... Params, typename... Args>
void launch_dependent(bool dependent, void (*kernel)(Params...), unsigned grid, unsigned block,
                      cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = dependent ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), "a kernel launch");
}

template <typename WT, int TT>
void launch_gemv(const float* x, const GemvTargets& tg, int K, cudaStream_t stream) {
  const unsigned blocks = blocks_for(static_cast<std::size_t>(tg.start[tg.count]), kGemvWarps);
  launch_dependent(gemv_pdl(), gemv_kernel<WT, TT, kGemvInFlight>, blocks, kGemvWarps * kWarp,
                   stream, x, tg, K);
}

template <typename WT>
void gemv_rows(const float* x, int T, const GemvTargets& tg, int K, cudaStream_t stream) {
  switch (T) {
    case 1:
      return launch_gemv<WT, 1>(x, tg, K, stream);
    case 2:
      return launch_gemv<WT, 2>(x, tg, K, stream);
    case 3:
      return launch_gemv<WT, 3>(x, tg, K, stream);
    case 4:
      return launch_gemv<WT, 4>(x, tg, K, stream);
    case 5:
      return launch_gemv<WT, 5>(x, tg, K, stream);
    case 6:
      return launch_gemv<WT, 6>(x, tg, K, stream);
    case 7:
      return launch_gemv<WT, 7>(x, tg, K, stream);
    default:
      return launch_gemv<WT, 8>(x, tg, K, stream);
  }
}

// ---- attention ----

// Split over the keys (flash-decoding), with the query heads of a KV group sharing each key. A
// block takes one row, one KV head and one chunk of kAttentionChunk entries of the row's cache:
//  1. each thread scores one key against the group's G query heads (held in shared memory);
//  2. one warp per query head takes the chunk's max m and p_j = exp(s_j - m), summed to l;
//  3. each thread sums p_j v_j for its elements of the head, for every query head of the group.
// With one chunk the block writes acc / l; with more it writes its (m, l, acc) and
// attention_combine_kernel merges the chunks in order. A row's chunks depend only on its own
// length, so its result does not depend on the other rows of the pass.
constexpr int kAttentionThreads = 128;
static_assert(kAttentionChunk <= kAttentionThreads, "one thread scores each key of a chunk");
// The combine's weights live in shared memory: 48 KiB of floats.
constexpr int kAttentionMaxChunks = 12288;

__host__ __device__ constexpr int chunks_for(int keys) {
  return (keys + kAttentionChunk - 1) / kAttentionChunk;
}

template <int NE, int GMAX, typename KT>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_chunk_kernel(const float* q, float* out, float* part, const DeviceCacheRow* rows,
                           const int* index, int q_heads, int kv_heads, int D, int layer,
                           float scale, int chunks) {
  let_the_next_kernel_start();
  __shared__ float s_q[GMAX][NE * kAttentionThreads];
  __shared__ float s_p[GMAX][kAttentionChunk];
  __shared__ float s_l[GMAX];
  const int r = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads, c = blockIdx.y;
  const int G = q_heads / kv_heads;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const DeviceCacheRow row = rows[r];
  const int n = index[r] + 1;
  const int begin = c * kAttentionChunk;
  if (begin >= n) return;  // past the row's cache: the combine reads only its own chunks
  const int count = min(kAttentionChunk, n - begin);
  const std::size_t head0 =
      (static_cast<std::size_t>(layer) * kv_heads + kvh) * row.capacity + begin;
  const KT* K = reinterpret_cast<const KT*>(row.keys) + head0 * D;
  const KT* V = reinterpret_cast<const KT*>(row.values) + head0 * D;
  const std::size_t q0 = static_cast<std::size_t>(r) * q_heads + static_cast<std::size_t>(kvh) * G;
#pragma unroll 4
  for (int i = tid; i < G * D; i += kAttentionThreads)
    s_q[i / D][i % D] = q[q0 * D + static_cast<std::size_t>(i)];
  __syncthreads();

  // 1. Scores: thread j takes key j of the chunk, 8 elements (16 bytes or more) a load.
  if (tid < count) {
    const KT* kr = K + static_cast<std::size_t>(tid) * D;
    float dot[GMAX];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) dot[g] = 0.0f;
      // Unrolled over the whole head (at most NE * 128 elements), so that every load of the key is
      // in flight at once.
#pragma unroll
    for (int u = 0; u < NE * kAttentionThreads / 8; ++u) {
      const int e0 = u * 8;
      if (e0 >= D) break;
      float kv[8];
      load8(kr + e0, kv);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < G) {
#pragma unroll
          for (int i = 0; i < 8; ++i) dot[g] += s_q[g][e0 + i] * kv[i];
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GMAX; ++g)
      if (g < G) s_p[g][tid] = dot[g] * scale;
  }
  __syncthreads();

  // 2. The chunk's softmax numerators, per query head.
  for (int g = warp; g < G; g += kAttentionThreads / kWarp) {
    float m = -INFINITY;
    for (int j = lane; j < count; j += kWarp) m = fmaxf(m, s_p[g][j]);
    for (int o = kWarp / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int j = lane; j < count; j += kWarp) {
      const float p = expf(s_p[g][j] - m);
      s_p[g][j] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      s_l[g] = l;
      if (chunks > 1) {
        part[((q0 + g) * chunks + c) * 2] = m;
        part[((q0 + g) * chunks + c) * 2 + 1] = l;
      }
    }
  }
  __syncthreads();

  // 3. acc[g][e] = sum_j p[g][j] v[j][e] for this thread's elements e = tid + 128 i.
  float acc[GMAX][NE];
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
#pragma unroll
    for (int i = 0; i < NE; ++i) acc[g][i] = 0.0f;
      // Unrolled by 16: the loads of 16 keys' values are in flight together.
#pragma unroll 16
  for (int j = 0; j < count; ++j) {
    const KT* vr = V + static_cast<std::size_t>(j) * D;
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int e = tid + i * kAttentionThreads;
      const float v = e < D ? to_f32(vr[e]) : 0.0f;
#pragma unroll
      for (int g = 0; g < GMAX; ++g)
        if (g < G) acc[g][i] += s_p[g][j] * v;
    }
  }
  // The partial results go after the (m, l) pairs of every (row, query head, chunk).
  float* part_acc = part + static_cast<std::size_t>(gridDim.x / kv_heads) * q_heads * chunks * 2;
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int e = tid + i * kAttentionThreads;
      if (e >= D) continue;
      if (chunks == 1)
        out[(q0 + g) * D + e] = acc[g][i] / s_l[g];
      else
        part_acc[((q0 + g) * chunks + c) * D + e] = acc[g][i];
    }
  }
}

// One block per (row, query head): the row's chunks merged in order,
// out = sum_c acc_c exp(m_c - M) / sum_c l_c exp(m_c - M), M the largest m_c.
__global__ void attention_combine_kernel(const float* part, float* out, const int* index,
                                         int q_heads, int D, int chunks) {
  let_the_next_kernel_start();
  extern __shared__ float s_w[];  // [chunks]: exp(m_c - M)
  __shared__ float s_L;
  const int r = blockIdx.x / q_heads;
  const std::size_t rh = blockIdx.x;
  const int used = chunks_for(index[r] + 1);
  const float* ml = part + rh * chunks * 2;
  const float* acc = part + static_cast<std::size_t>(gridDim.x) * chunks * 2 + rh * chunks * D;
  if (threadIdx.x == 0) {
    float M = -INFINITY;
    for (int c = 0; c < used; ++c) M = fmaxf(M, ml[2 * c]);
    float L = 0.0f;
    for (int c = 0; c < used; ++c) {
      s_w[c] = expf(ml[2 * c] - M);
      L += ml[2 * c + 1] * s_w[c];
    }
    s_L = L;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float sum = 0.0f;
    for (int c = 0; c < used; ++c) sum += acc[static_cast<std::size_t>(c) * D + e] * s_w[c];
    out[rh * D + e] = sum / s_L;
  }
}

template <int NE, int GMAX>
void launch_attention(const float* q, float* out, float* part, const DeviceCacheRow* rows,
                      const int* index, int T, int q_heads, int kv_heads, int D, int layer,
                      KvDtype dtype, float scale, int chunks, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T) * static_cast<unsigned>(kv_heads),
                  static_cast<unsigned>(chunks));
  switch (dtype) {
    case KvDtype::f32:
      attention_chunk_kernel<NE, GMAX, float><<<grid, kAttentionThreads, 0, stream>>>(
          q, out, part, rows, index, q_heads, kv_heads, D, layer, scale, chunks);
      break;
    case KvDtype::bf16:
      attention_chunk_kernel<NE, GMAX, __nv_bfloat16><<<grid, kAttentionThreads, 0, stream>>>(
          q, out, part, rows, index, q_heads, kv_heads, D, layer, scale, chunks);
      break;
    case KvDtype::f16:
      attention_chunk_kernel<NE, GMAX, __half><<<grid, kAttentionThreads, 0, stream>>>(
          q, out, part, rows, index, q_heads, kv_heads, D, layer, scale, chunks);
      break;
    default:
      throw Error("attention: the CUDA backend has no kernel for a " +
                  std::string(kv_dtype_name(dtype)) + " KV cache");
  }
}

template <int NE>
void launch_attention_group(const float* q, float* out, float* part, const DeviceCacheRow* rows,
                            const int* index, int T, int q_heads, int kv_heads, int D, int layer,
                            KvDtype dtype, float scale, int chunks, cudaStream_t stream) {
  const int G = q_heads / kv_heads;
  if (G <= 1)
    launch_attention<NE, 1>(q, out, part, rows, index, T, q_heads, kv_heads, D, layer, dtype, scale,
                            chunks, stream);
  else if (G <= 2)
    launch_attention<NE, 2>(q, out, part, rows, index, T, q_heads, kv_heads, D, layer, dtype, scale,
                            chunks, stream);
  else if (G <= 4)
    launch_attention<NE, 4>(q, out, part, rows, index, T, q_heads, kv_heads, D, layer, dtype, scale,
                            chunks, stream);
  else if (G <= 8)
    launch_attention<NE, 8>(q, out, part, rows, index, T, q_heads, kv_heads, D, layer, dtype, scale,
                            chunks, stream);
  else
    launch_attention<NE, 16>(q, out, part, rows, index, T, q_heads, kv_heads, D, layer, dtype,
                             scale, chunks, stream);
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
  add_rms_norm(const_cast<float*>(x), nullptr, w, y, T, n, eps, stream);
}

void add_rms_norm(float* x, const float* residual, const float* w, float* y, int T, int n,
                  float eps, cudaStream_t stream) {
  const int n4 = n / 4;
  const auto threads = [&](int v) {
    return static_cast<unsigned>(std::min(1024, (n4 + v - 1) / v + kWarp - 1) / kWarp * kWarp);
  };
  const bool aligned =
      n % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(y) % 16 == 0 &&
      (residual == nullptr || reinterpret_cast<std::uintptr_t>(residual) % 16 == 0);
  const bool vector = vector_norm() && aligned;
  if (vector && n4 <= 1024) {
    rms_norm_vec_kernel<1><<<T, threads(1), 0, stream>>>(x, residual, w, y, n, eps);
  } else if (vector && n4 <= 4 * 1024) {
    rms_norm_vec_kernel<4><<<T, threads(4), 0, stream>>>(x, residual, w, y, n, eps);
  } else {  // the scalar loop: rows not a multiple of 4 floats or over 16,384, or the switch off
    if (residual != nullptr) add(x, residual, static_cast<std::size_t>(T) * n, stream);
    rms_norm_kernel<<<T, 256, 0, stream>>>(x, w, y, n, eps);
  }
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

std::size_t attention_workspace_bytes(int T, int q_heads, int head_dim, int max_keys) {
  const int chunks = chunks_for(max_keys);
  if (chunks <= 1) return 0;
  return static_cast<std::size_t>(T) * q_heads * chunks * (head_dim + 2) * sizeof(float);
}

void attention(const float* q, float* out, const DeviceCacheRow* rows, const int* index, int T,
               int q_heads, int kv_heads, int head_dim, int layer, KvDtype dtype, float scale,
               int max_keys, float* workspace, cudaStream_t stream) {
  if (head_dim > 2 * kAttentionThreads || head_dim % 8 != 0)
    throw Error("attention: the CUDA backend supports head sizes that are multiples of 8 up to " +
                std::to_string(2 * kAttentionThreads) + ", not " + std::to_string(head_dim));
  if (kv_heads <= 0 || q_heads % kv_heads != 0 || q_heads / kv_heads > 16)
    throw Error("attention: the CUDA backend supports up to 16 query heads per KV head, not " +
                std::to_string(q_heads) + " over " + std::to_string(kv_heads));
  if (T == 0 || max_keys <= 0) return;
  const int chunks = chunks_for(max_keys);
  if (chunks > kAttentionMaxChunks)
    throw Error("attention: the CUDA backend attends over at most " +
                std::to_string(kAttentionMaxChunks * kAttentionChunk) + " cache entries, not " +
                std::to_string(max_keys));
  if (chunks > 1 && workspace == nullptr)
    throw Error("attention: " + std::to_string(max_keys) + " keys need a workspace");
  if (head_dim <= kAttentionThreads)
    launch_attention_group<1>(q, out, workspace, rows, index, T, q_heads, kv_heads, head_dim, layer,
                              dtype, scale, chunks, stream);
  else
    launch_attention_group<2>(q, out, workspace, rows, index, T, q_heads, kv_heads, head_dim, layer,
                              dtype, scale, chunks, stream);
  check_launch("attention");
  if (chunks == 1) return;
  attention_combine_kernel<<<static_cast<unsigned>(T) * static_cast<unsigned>(q_heads),
                             kAttentionThreads, static_cast<std::size_t>(chunks) * sizeof(float),
                             stream>>>(workspace, out, index, q_heads, head_dim, chunks);
  check_launch("attention_combine");
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

// A switch for measuring, read from the environment: on when unset or empty, else "0" or "1".
static bool switch_from_env(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == 0) return true;
  const std::string v = env;
  if (v == "0" || v == "1") return v == "1";
  throw Error(std::string(name) + " must be 0 or 1, not '" + v + "'");
}

bool vector_norm() {
  static const bool on = switch_from_env("RKV_CUDA_VECTOR_NORM");
  return on;
}

bool gemv_pdl() {
  static const bool on = switch_from_env("RKV_CUDA_PDL");
  return on;
}

void gemv(const float* x, int T, std::span<const GemvTarget> targets, DType dtype, int K,
          cudaStream_t stream) {
  if (T < 1 || T > kGemvMaxRows || K % 8 != 0)
    throw Error("gemv: needs 1 to 8 rows and K a multiple of 8");
  if (targets.empty() || targets.size() > static_cast<std::size_t>(kGemvMaxTargets))
    throw Error("gemv: 1 to " + std::to_string(kGemvMaxTargets) + " weights a launch");
  GemvTargets tg;
  tg.count = static_cast<int>(targets.size());
  for (int p = 0; p < tg.count; ++p) {
    const GemvTarget& t = targets[static_cast<std::size_t>(p)];
    tg.w[p] = t.w;
    tg.y[p] = t.y;
    tg.start[p + 1] = tg.start[p] + t.N;
  }
  if (tg.start[tg.count] == 0) return;
  switch (dtype) {
    case DType::F32:
      gemv_rows<float>(x, T, tg, K, stream);
      break;
    case DType::BF16:
      gemv_rows<__nv_bfloat16>(x, T, tg, K, stream);
      break;
    case DType::F16:
      gemv_rows<__half>(x, T, tg, K, stream);
      break;
    default:
      throw Error("gemv: the CUDA backend has no kernel for " + std::string(dtype_name(dtype)) +
                  " weights");
  }
  check_launch("gemv");
}

void gemv(const float* x, int T, const void* w, DType dtype, int N, int K, float* y,
          cudaStream_t stream) {
  const GemvTarget target{w, N, y};
  gemv(x, T, std::span<const GemvTarget>(&target, 1), dtype, K, stream);
}

}  // namespace rkv::cuda
