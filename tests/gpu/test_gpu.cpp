// The CUDA backend (ctest label `gpu`; scripts/gpu-check.sh runs it on a GPU machine). Every test
// skips, saying so, where no CUDA device is visible. What each checks, against what:
//  - kernels: attention and the GEMV against float64 references on fresh random inputs, every
//    output written (the buffers are poisoned with NaN first);
//  - the five golden checkpoints: logits within the golden tolerance (1e-3) and the greedy tokens,
//    f32 cache, f32 arithmetic (no TF32);
//  - a bf16 checkpoint with a bf16 cache within 2e-2 relative of the CPU engine;
//  - the shipped tiny model's greedy outputs on the held-out problems equal to the CPU engine's;
//  - batch against alone, token for token; errors for what the backend does not run.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "batch_test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda/kernels.cuh"
#include "cuda/matmul.cuh"
#include "engine/batch_engine.h"
#include "engine/generator.h"
#include "eval/runner.h"
#include "kv/kv_codec.h"
#include "model/model.h"
#include "rkv/device.h"
#include "rkv/eval.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

#define RKV_REQUIRE_GPU()                                                       \
  do {                                                                          \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_summary(); \
  } while (0)

void ok(cudaError_t e) {
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
}

// A device copy of a host vector, freed at scope exit.
template <typename T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) { cudaMalloc(&p, count * sizeof(T)); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(std::exchange(o.p, nullptr)), n(o.n) {}
  Dev& operator=(Dev&&) = delete;
  explicit Dev(const std::vector<T>& v) : Dev(v.size()) {
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double rel_error(const std::vector<double>& ref, const float* got, std::size_t n) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

float scale_of(int D) {
  return 1.0f / std::sqrt(static_cast<float>(D));
}

TEST(GpuDevice, AutoPicksCudaWhereOneIsVisible) {
  RKV_REQUIRE_GPU();
  EXPECT_EQ(resolve_device(std::nullopt), Device::Cuda);
  EXPECT_NE(cuda_summary().find("compute capability"), std::string::npos) << cuda_summary();
}

// Runs cuda::attention over host data: T rows sharing one cache of `cap` entries per (layer, KV
// head), row r seeing index[r] + 1 of them; returns out.
std::vector<float> run_attention(const std::vector<std::byte>& keys,
                                 const std::vector<std::byte>& values, int entries,
                                 const std::vector<float>& q, const std::vector<int>& index,
                                 int cap, int Hq, int Hkv, int D, int layer, KvDtype dtype) {
  const int T = static_cast<int>(index.size());
  Dev<std::byte> dk(keys), dv(values);
  Dev<std::int32_t> dpos(static_cast<std::size_t>(entries));
  Dev<float> dq(q);
  Dev<float> dout(std::vector<float>(q.size(), NAN));
  std::vector<cuda::DeviceCacheRow> rows(static_cast<std::size_t>(T));
  for (int r = 0; r < T; ++r) rows[static_cast<std::size_t>(r)] = {dk.p, dv.p, dpos.p, cap, r};
  Dev<cuda::DeviceCacheRow> drows(rows);
  Dev<int> dindex(index);
  const int max_keys = *std::max_element(index.begin(), index.end()) + 1;
  const std::size_t ws_bytes = cuda::attention_workspace_bytes(T, Hq, D, max_keys);
  Dev<float> ws(std::max<std::size_t>(1, ws_bytes / sizeof(float)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cuda::attention(dq.p, dout.p, drows.p, dindex.p, T, Hq, Hkv, D, layer, dtype, scale, max_keys,
                  ws.p, nullptr);
  ok(cudaDeviceSynchronize());
  return dout.get();
}

// Attention of T rows (one cache each, capacity cap) against float64, per KV dtype, head size and
// group size; the rows see different lengths (one chunk of keys and many in one pass), and a row's
// output is the same, bit for bit, as when it runs alone.
TEST(GpuKernels, AttentionMatchesFloat64) {
  RKV_REQUIRE_GPU();
  const int layers = 2, layer = 1;
  struct Heads {
    int q, kv;
  };
  for (const Heads heads : {Heads{4, 2}, Heads{8, 1}, Heads{3, 3}, Heads{32, 2}}) {
    const int Hq = heads.q, Hkv = heads.kv, G = Hq / Hkv;
    for (KvDtype dtype : {KvDtype::f32, KvDtype::bf16, KvDtype::f16}) {
      for (int D : {16, 48, 64, 96, 128, 256}) {
        for (int n : {1, 7, 128, 129, 300, 4100}) {
          const int cap = n + 3;
          const std::size_t rb = kv_row_bytes(dtype, D);
          const std::size_t entries = static_cast<std::size_t>(layers) * Hkv * cap;
          // Random keys and values, stored in the dtype; the reference reads the stored values.
          std::vector<std::byte> keys(entries * rb), values(entries * rb);
          const auto kf = randn(entries * D, 1 + D + n), vf = randn(entries * D, 2 + D + n);
          for (std::size_t e = 0; e < entries; ++e) {
            kv_encode_row(dtype, kf.data() + e * D, D, keys.data() + e * rb);
            kv_encode_row(dtype, vf.data() + e * D, D, values.data() + e * rb);
          }
          std::vector<float> kd(entries * D), vd(entries * D);
          kv_decode_rows_reference(dtype, keys.data(), entries, D, kd.data());
          kv_decode_rows_reference(dtype, values.data(), entries, D, vd.data());
          // Row 0 sees n entries, row 1 n - 1 (or 1), row 2 one.
          const std::vector<int> index = {n - 1, std::max(0, n - 2), 0};
          const int T = static_cast<int>(index.size());
          const auto q = randn(static_cast<std::size_t>(T) * Hq * D, 3 + D + n);
          const auto out = run_attention(keys, values, static_cast<int>(entries), q, index, cap, Hq,
                                         Hkv, D, layer, dtype);
          for (int r = 0; r < T; ++r) {
            const int visible = index[static_cast<std::size_t>(r)] + 1;
            for (int h = 0; h < Hq; ++h) {
              const std::size_t head0 = (static_cast<std::size_t>(layer) * Hkv + h / G) * cap;
              const float* qh = q.data() + (static_cast<std::size_t>(r) * Hq + h) * D;
              const auto p = test::softmax_f64(qh, kd.data() + head0 * D, visible, D, scale_of(D));
              std::vector<double> ref(D, 0.0);
              for (int j = 0; j < visible; ++j)
                for (int e = 0; e < D; ++e) ref[e] += p[j] * vd[(head0 + j) * D + e];
              const double err =
                  rel_error(ref, out.data() + (static_cast<std::size_t>(r) * Hq + h) * D, D);
              EXPECT_LT(err, 1e-5) << kv_dtype_name(dtype) << " D=" << D << " n=" << visible
                                   << " row " << r << " head " << h << " G=" << G;
            }
          }
          // Each row alone: the same bits as in the pass.
          for (int r = 0; r < T; ++r) {
            const std::size_t width = static_cast<std::size_t>(Hq) * D;
            const std::vector<float> q1(q.begin() + static_cast<std::ptrdiff_t>(r * width),
                                        q.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
            const auto alone =
                run_attention(keys, values, static_cast<int>(entries), q1,
                              {index[static_cast<std::size_t>(r)]}, cap, Hq, Hkv, D, layer, dtype);
            EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + r * width, width * sizeof(float)))
                << kv_dtype_name(dtype) << " D=" << D << " n=" << n << " row " << r
                << " alone differs from the pass";
          }
        }
      }
    }
  }
}

// Weights of `dtype` from f32 values, and the values they hold.
std::vector<std::byte> store_weights(const std::vector<float>& wf, DType dtype,
                                     std::vector<float>& held) {
  std::vector<std::byte> w(wf.size() * dtype_size(dtype));
  held.resize(wf.size());
  for (std::size_t i = 0; i < wf.size(); ++i) {
    if (dtype == DType::F32)
      reinterpret_cast<float*>(w.data())[i] = wf[i];
    else
      reinterpret_cast<std::uint16_t*>(w.data())[i] =
          dtype == DType::BF16 ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
    held[i] = load_as_f32(w.data(), dtype, i);
  }
  return w;
}

// y[t][n] = sum_k x[t][k] w[n][k] in float64: the GEMV's reference.
std::vector<double> gemv_reference(const std::vector<float>& x, const std::vector<float>& w, int T,
                                   int N, int K) {
  std::vector<double> ref(static_cast<std::size_t>(T) * N);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double s = 0.0;
      for (int k = 0; k < K; ++k)
        s += static_cast<double>(x[t * K + k]) * w[static_cast<std::size_t>(n) * K + k];
      ref[static_cast<std::size_t>(t) * N + n] = s;
    }
  return ref;
}

TEST(GpuKernels, GemvMatchesFloat64) {
  RKV_REQUIRE_GPU();
  const int N = 1000, K = 4096;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> wq;
    const auto w = store_weights(randn(static_cast<std::size_t>(N) * K, 11), dtype, wq);
    Dev<std::byte> dw(w);
    for (int T = 1; T <= cuda::kGemvMaxRows; ++T) {
      const auto x = randn(static_cast<std::size_t>(T) * K, 20 + T);
      Dev<float> dx(x);
      Dev<float> dy(std::vector<float>(static_cast<std::size_t>(T) * N, NAN));
      cuda::gemv(dx.p, T, dw.p, dtype, N, K, dy.p, nullptr);
      ok(cudaDeviceSynchronize());
      const auto y = dy.get();
      const auto ref = gemv_reference(x, wq, T, N, K);
      EXPECT_LT(rel_error(ref, y.data(), y.size()), 1e-6) << dtype_name(dtype) << " T=" << T;
    }
  }
}

// The residual add and the norm in one launch (and the norm alone) against float64, for hidden
// sizes of each of its paths (one float4 a thread, four, and the scalar loop for sizes not a
// multiple of 4), the norm's output written over the residual as the forward pass does; then a
// GEMV launched after it on a stream (a programmatic dependent launch, unless RKV_CUDA_PDL=0)
// reads that output. Repeated with fresh poison, so a GEMV that read x before the norm finished
// would show.
TEST(GpuKernels, ResidualAddAndNormMatchFloat64AndFeedTheNextGemv) {
  RKV_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int T = 3, N = 300;
  const float eps = 1e-5f;
  for (int n : {14, 896, 4096, 5120, 8192}) {
    const auto x = randn(static_cast<std::size_t>(T) * n, 60 + static_cast<unsigned>(n));
    const auto r = randn(static_cast<std::size_t>(T) * n, 61 + static_cast<unsigned>(n));
    auto w = randn(static_cast<std::size_t>(n), 62 + static_cast<unsigned>(n));
    std::vector<float> sum(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + r[i];
    std::vector<double> ref(x.size());
    for (int t = 0; t < T; ++t) {
      double ss = 0.0;
      for (int i = 0; i < n; ++i) ss += static_cast<double>(sum[t * n + i]) * sum[t * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + eps);
      for (int i = 0; i < n; ++i) ref[t * n + i] = w[i] * (sum[t * n + i] * inv);
    }
    Dev<float> dw(w);
    std::vector<float> wq;
    const auto gw = store_weights(randn(static_cast<std::size_t>(N) * n, 63), DType::BF16, wq);
    Dev<std::byte> dgw(gw);
    for (int round = 0; round < 20; ++round) {
      Dev<float> dx(x), dr(r), dz(std::vector<float>(x.size(), NAN));
      Dev<float> dg(std::vector<float>(static_cast<std::size_t>(T) * N, NAN));
      cuda::add_rms_norm(dx.p, dr.p, dw.p, dr.p, T, n, eps, stream);
      if (n % 8 == 0) cuda::gemv(dr.p, T, dgw.p, DType::BF16, N, n, dg.p, stream);
      cuda::rms_norm(dx.p, dw.p, dz.p, T, n, eps, stream);
      ok(cudaStreamSynchronize(stream));
      const auto xs = dx.get(), y = dr.get(), z = dz.get();
      ASSERT_EQ(0, std::memcmp(xs.data(), sum.data(), sum.size() * sizeof(float)))
          << "n=" << n << ": x + residual, in float";
      EXPECT_LT(rel_error(ref, y.data(), y.size()), 1e-6) << "n=" << n << " with the add";
      EXPECT_LT(rel_error(ref, z.data(), z.size()), 1e-6) << "n=" << n << " the norm alone";
      if (n % 8 != 0) continue;
      const auto g = dg.get();
      const auto gref = gemv_reference(y, wq, T, N, n);
      ASSERT_LT(rel_error(gref, g.data(), g.size()), 1e-6) << "n=" << n << " round " << round;
    }
  }
  ok(cudaStreamDestroy(stream));
}

// Several weights in one GEMV launch (q, k, v): each output the same bits as its own launch.
TEST(GpuKernels, GemvOfSeveralWeightsEqualsEachAlone) {
  RKV_REQUIRE_GPU();
  const int K = 512;
  const std::vector<int> Ns = {300, 77, 77, 1};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<Dev<std::byte>> ws;
    std::vector<float> held;
    for (std::size_t p = 0; p < Ns.size(); ++p)
      ws.emplace_back(store_weights(
          randn(static_cast<std::size_t>(Ns[p]) * K, 40 + static_cast<unsigned>(p)), dtype, held));
    for (int T : {1, 3, 8}) {
      const auto x = randn(static_cast<std::size_t>(T) * K, 50 + T);
      Dev<float> dx(x);
      std::vector<Dev<float>> fused_out, alone_out;
      std::vector<cuda::GemvTarget> targets;
      for (std::size_t p = 0; p < Ns.size(); ++p) {
        const std::vector<float> poison(static_cast<std::size_t>(T) * Ns[p], NAN);
        fused_out.emplace_back(poison);
        alone_out.emplace_back(poison);
        targets.push_back({ws[p].p, Ns[p], fused_out[p].p});
        cuda::gemv(dx.p, T, ws[p].p, dtype, Ns[p], K, alone_out[p].p, nullptr);
      }
      cuda::gemv(dx.p, T, targets, dtype, K, nullptr);
      ok(cudaDeviceSynchronize());
      for (std::size_t p = 0; p < Ns.size(); ++p) {
        const auto a = fused_out[p].get(), b = alone_out[p].get();
        for (float v : a) ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << dtype_name(dtype) << " T=" << T << " weight " << p;
      }
    }
  }
}

// Both paths of DeviceMatmul (GEMV up to 8 rows, cuBLAS above) in both precisions, against float64:
// exact multiplies x itself, rounded multiplies x rounded to the weights' type. In the exact
// precision f16 activations go up to 2^19 (above f16's range: the scaled split must hold them); the
// rounded precision is x rounded to f16, defined inside f16's range, so it gets 2^15 there.
TEST(GpuKernels, MatmulMatchesFloat64InBothPrecisions) {
  RKV_REQUIRE_GPU();
  const int N = 300, K = 512;
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreate(&stream));
  cuda::DeviceMatmul matmul(stream);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> held;
    const auto w = store_weights(randn(static_cast<std::size_t>(N) * K, 31), dtype, held);
    Dev<std::byte> dw(w);
    const cuda::DeviceWeight weight{dw.p, dtype, N, K};
    for (int T : {1, 5, 8, 9, 16, 70}) {
      for (auto precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Rounded}) {
        auto x = randn(static_cast<std::size_t>(T) * K, 40 + T);
        if (dtype == DType::F16)
          x[3] = precision == kernels::MatmulPrecision::Exact ? 524288.0f : 32768.0f;  // 2^19, 2^15
        Dev<float> dx(x);
        Dev<float> dy(std::vector<float>(static_cast<std::size_t>(T) * N, NAN));
        matmul.run(dx.p, T, weight, precision, dy.p);
        ok(cudaStreamSynchronize(stream));
        const auto y = dy.get();
        std::vector<float> xr(x.size());
        kernels::round_activations(
            x.data(), x.size(), precision == kernels::MatmulPrecision::Rounded ? dtype : DType::F32,
            xr.data());
        const auto ref = gemv_reference(xr, held, T, N, K);
        EXPECT_LT(rel_error(ref, y.data(), y.size()), 1e-5)
            << dtype_name(dtype) << " T=" << T << " " << kernels::matmul_precision_name(precision);
      }
    }
  }
  cudaStreamDestroy(stream);
}

// ---- the golden checkpoints ----

int argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

std::unique_ptr<Model> load_on_gpu(const std::filesystem::path& dir) {
  auto model = Model::load(dir);
  model->use_device(Device::Cuda);
  return model;
}

class GpuGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGolden, LogitsAndGreedyTokensWithinTheGoldenTolerance) {
  RKV_REQUIRE_GPU();
  RKV_REQUIRE_SHARED(shared);
  const auto dir = shared / "golden/models" / GetParam();
  const auto golden = test::read_json(dir / "golden.json");
  auto model = load_on_gpu(dir);
  const int V = model->config().vocab_size;
  ThreadPool pool(1);
  ForwardScratch scratch;
  {
    const auto ids = golden["input_ids"].get<std::vector<int>>();
    KvCache cache(model->cache_shape(static_cast<int>(ids.size()), 0, KvDtype::f32));
    std::vector<ForwardRow> rows;
    for (std::size_t i = 0; i < ids.size(); ++i)
      rows.push_back({&cache, ids[i], static_cast<int>(i), true});
    std::vector<float> logits(ids.size() * static_cast<std::size_t>(V), NAN);
    model->forward(rows, scratch, pool, logits.data());
    const auto argmax_all = golden["argmax_all"].get<std::vector<int>>();
    for (std::size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(argmax(logits.data() + i * V, V), argmax_all[i]) << "position " << i;
    double max_diff = 0.0;
    for (std::size_t p = 0; p < 5; ++p) {
      const std::size_t pos = ids.size() - 5 + p;
      for (int v = 0; v < V; ++v)
        max_diff = std::max(max_diff, std::abs(double(logits[pos * V + v]) -
                                               golden["last5_logits"][p][v].get<double>()));
    }
    EXPECT_LE(max_diff, 1e-3) << "max |logit - golden| over the last 5 positions";
  }
  // Greedy decoding one token a pass (the GEMV path) after a prefill (cuBLAS).
  const auto prompt = golden["greedy_prompt_ids"].get<std::vector<int>>();
  const auto expected = golden["greedy_new_tokens"].get<std::vector<int>>();
  KvCache cache(model->cache_shape(64, 0, KvDtype::f32));
  std::vector<float> logits(V);
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({&cache, prompt[i], static_cast<int>(i), i + 1 == prompt.size()});
  model->forward(rows, scratch, pool, logits.data());
  std::vector<int> got;
  int pos = static_cast<int>(prompt.size());
  for (std::size_t step = 0; step < expected.size(); ++step) {
    const int next = argmax(logits.data(), V);
    got.push_back(next);
    const ForwardRow row{&cache, next, pos++, true};
    model->forward(std::span(&row, 1), scratch, pool, logits.data());
  }
  EXPECT_EQ(got, expected);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GpuGolden,
                         ::testing::Values("llama_gqa_f32", "llama3_rope_scaled_f32",
                                           "qwen2_bias_f32", "qwen2_tied_bf16",
                                           "qwen3_qknorm_f32"));

// A bf16 checkpoint with a bf16 cache: every position's logits within 2e-2 (relative, L2) of the
// CPU engine's, prefill and decode.
TEST(GpuParity, Bf16CacheOnABf16CheckpointNearTheCpuEngine) {
  RKV_REQUIRE_GPU();
  const test::TempDir dir("gpu-bf16");
  RandomCheckpointOptions o;
  o.shape = "tiny";
  o.dtype = DType::BF16;
  o.seed = 5;
  write_random_checkpoint(dir.path(), o);
  auto cpu = Model::load(dir.path());
  auto gpu = load_on_gpu(dir.path());
  const int V = cpu->config().vocab_size;
  ThreadPool pool(2);
  ForwardScratch s1, s2;
  KvCache c1(cpu->cache_shape(128, 0, KvDtype::bf16)), c2(gpu->cache_shape(128, 0, KvDtype::bf16));
  std::vector<ForwardRow> r1, r2;
  for (int i = 0; i < 40; ++i) {
    const int token = 3 + (i * 37) % 200;
    r1.push_back({&c1, token, i, true});
    r2.push_back({&c2, token, i, true});
  }
  std::vector<float> l1(40 * static_cast<std::size_t>(V)), l2(l1.size(), NAN);
  cpu->forward(r1, s1, pool, l1.data());
  gpu->forward(r2, s2, pool, l2.data());
  auto compare = [&](std::size_t rows, const char* what) {
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<double> ref(l1.begin() + r * V, l1.begin() + (r + 1) * V);
      EXPECT_LT(rel_error(ref, l2.data() + r * V, V), 2e-2) << what << " row " << r;
    }
  };
  compare(40, "prefill");
  for (int step = 0; step < 20; ++step) {
    const int token = argmax(l1.data(), V);
    const ForwardRow a{&c1, token, 40 + step, true}, b{&c2, token, 40 + step, true};
    cpu->forward(std::span(&a, 1), s1, pool, l1.data());
    gpu->forward(std::span(&b, 1), s2, pool, l2.data());
    compare(1, "decode");
  }
}

// ---- the engine ----

Request request(int seed, int prompt_len, int max_new) {
  Request r = test::greedy_ids_request(prompt_len, max_new, seed);
  r.kv_dtype = KvDtype::f32;
  return r;
}

TEST(GpuEngine, EverySequenceOfABatchMatchesItsRunAlone) {
  RKV_REQUIRE_GPU();
  auto model = load_on_gpu(test::self_made_model());
  ThreadPool pool(2);
  const std::vector<std::pair<int, int>> specs = {{12, 40}, {30, 50}, {9, 35}, {25, 45}, {5, 60}};
  std::vector<std::vector<int>> expected;
  for (std::size_t i = 0; i < specs.size(); ++i)
    expected.push_back(
        generate_alone(*model, pool, request(static_cast<int>(i), specs[i].first, specs[i].second))
            .tokens);
  EngineOptions options;
  options.prefill_chunk = 16;
  Engine engine(*model, nullptr, pool, options);
  std::map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < specs.size(); ++i)
    index[engine.submit(
        engine.prepare(request(static_cast<int>(i), specs[i].first, specs[i].second)))] = i;
  engine.run_until_idle();
  for (const auto& r : engine.take_completions()) EXPECT_EQ(r.tokens, expected[index.at(r.id)]);
}

TEST(GpuEngine, CompressionMethodsAreRefusedSayingSo) {
  RKV_REQUIRE_GPU();
  auto model = load_on_gpu(test::self_made_model());
  ThreadPool pool(2);
  Request r = request(1, 20, 10);
  r.compression = CompressionParams::defaults(Method::rkv);
  r.compression.budget = 16;
  r.compression.buffer = 8;
  r.compression.window = 4;
  try {
    generate_alone(*model, pool, r);
    FAIL() << "rkv ran on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

TEST(GpuEngine, QuantizedWeightsAndQ8CachesAreRefusedSayingSo) {
  RKV_REQUIRE_GPU();
  RKV_REQUIRE_SHARED(shared);
  auto q8 = Model::load(shared / "golden/gguf/stories260K-q8_0.gguf");
  try {
    q8->use_device(Device::Cuda);
    FAIL() << "q8_0 weights went to the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
  auto model = load_on_gpu(test::self_made_model());
  ThreadPool pool(2);
  Request r = request(1, 20, 10);
  r.kv_dtype = KvDtype::q8_0;
  EXPECT_THROW(generate_alone(*model, pool, r), Error);
}

// The shipped model's greedy outputs on the held-out problems (RKV_GPU_PROBLEMS, default 200),
// fullkv with an f32 cache, equal to the CPU engine's.
TEST(GpuEngine, ShippedModelGreedyOutputsEqualTheCpuEngines) {
  RKV_REQUIRE_GPU();
  const char* env = std::getenv("RKV_GPU_PROBLEMS");
  const std::size_t count = env != nullptr ? std::strtoul(env, nullptr, 10) : 200;
  const auto model_dir = test::shipped_model_dir();
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  eval::DatasetOptions options;
  options.preset = "chains";
  eval::Dataset data = eval::load_dataset(test::source_dir() / "data/chains_test.jsonl", options);
  data.examples.resize(std::min(count, data.examples.size()));
  auto run = [&](Device device) {
    auto model = Model::load(model_dir);
    model->use_device(device);
    eval::RunnerOptions o;
    o.methods = {"fullkv"};
    o.temperature = 0.0f;
    o.prompt_template = data.prompt_template;
    o.kv_dtype = KvDtype::f32;
    o.progress = nullptr;
    const test::TempDir out("gpu-eval");
    o.out_dir = out.path();
    ThreadPool pool(8);
    eval::run_eval(*model, tokenizer, data, o, pool);
    std::vector<std::string> outputs;
    std::ifstream in(o.out_dir / "samples.jsonl");
    for (std::string line; std::getline(in, line);)
      outputs.push_back(nlohmann::json::parse(line)["output"].get<std::string>());
    return outputs;
  };
  const auto cpu = run(Device::Cpu), gpu = run(Device::Cuda);
  ASSERT_EQ(cpu.size(), data.examples.size());
  ASSERT_EQ(gpu.size(), cpu.size());
  std::size_t same = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    same += cpu[i] == gpu[i] ? 1 : 0;
    EXPECT_EQ(gpu[i], cpu[i]) << "problem " << i;
  }
  std::printf("greedy outputs equal on %zu of %zu problems\n", same, cpu.size());
}

}  // namespace
}  // namespace rkv
