// Matmul and attention micro-benchmarks on the Qwen2.5-0.5B shapes (hidden 896, intermediate
// 4864, 14 q heads and 2 kv heads of dim 64, vocab 151936), bf16 weights, per instruction set
// and thread count.
//
// T=1 (decode) reports GB/s of weights streamed. The weights of one token do not fit in cache,
// so every benchmark cycles through enough copies of its matrix (>= 256 MiB in all) that each
// call reads its weights from memory, as decode does. T=512 (prefill) reports GFLOP/s.
//
// Attention: one query token's 7 heads against one KV head's cache of n entries (each cache dtype),
// the caches cycled like the weights so that each call reads its keys and values from memory, as
// decode does; reports GB/s of cache read. Attention/d128/...: the same with 6 heads of size 128
// (the R1-Distill-Qwen-1.5B shape: 12 q heads, 2 kv heads); Attention/g8d128/n2048/...: 8 heads of
// size 128 against 2048 entries (Qwen3-30B-A3B under R-KV at budget 2048);
// Attention/g4d256/n2048/...: 4 heads of size 256 (the full-attention layers of Qwen3.5-4B, 16 q
// heads, 4 kv heads); Attention/g5d128/n2048/... and g4d128: 5 and 4 heads of size 128 (QwQ-32B
// and the R1-Distill-Qwen-14B/32B: 40 q heads, 8 kv heads; Qwen3-8B and Llama-3-8B: 32 and 8). The
// caches are on huge pages where Linux offers them (core/huge_pages.h, as the engine's KV cache);
// figures recorded before 2026-11-28 06:30 UTC had 4 KiB pages. .../amx/bf16: the AMX kernel
// (attention_amx_for) on a bf16 cache, where AMX is on (else skipped, saying why).
//
// Limits: the machine's streaming-read bandwidth and compute peak per instruction set and thread
// count (kernels/limits.h), the ceilings the matmul figures are read against.
//
// QuantMatmul: kernels::matmul (activations quantized once, rows split over the threads) with
// weights quantized to each GGUF type (quant::quantize_row), on the gate and down shapes, with
// the machine's best instruction set; T=1 reports GB/s of quantized weights streamed.
//
//   rkv_bench --benchmark_filter=Matmul --benchmark_repetitions=3
//   rkv_bench --benchmark_filter=Attention
//   rkv_bench --benchmark_filter=Limits
//
// RKV_BENCH_CYCLE_MIB=N cycles the cold benchmarks through N MiB instead of 256: with N below the
// last-level cache the same kernels run hot, which tells a kernel bound by its instructions from
// one bound by memory.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/limits.h"
#include "kv/kv_codec.h"

namespace {

using rkv::DType;
using rkv::kernels::Isa;
using rkv::kernels::WeightView;

struct Shape {
  const char* name;
  std::size_t n, k;
};

constexpr Shape kShapes[] = {
    {"q_proj", 896, 896}, {"kv_proj", 128, 896},    {"gate", 4864, 896},
    {"down", 896, 4864},  {"lm_head", 151936, 896},
};

// The bytes a cold benchmark cycles through: 256 MiB, or RKV_BENCH_CYCLE_MIB (a few MiB keeps
// the data in the caches: the same kernel hot, to tell compute from memory apart).
std::size_t cold_bytes() {
  static const std::size_t bytes = [] {
    const char* env = std::getenv("RKV_BENCH_CYCLE_MIB");
    const long mib = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
    return static_cast<std::size_t>(mib > 0 ? mib : 256) << 20;
  }();
  return bytes;
}

// Runs one ISA's row kernel over a pool, split as kernels::matmul splits it.
void run(rkv::kernels::MatmulRowsFn fn, const float* x, std::size_t T, const WeightView& w,
         float* y, rkv::ThreadPool& pool) {
  pool.parallel_ranges(
      w.rows, 16, [&](std::size_t n0, std::size_t n1) { fn(x, T, w, n0, n1, y, w.rows); }, 4);
}

void BM_Matmul(benchmark::State& state, Isa isa, Shape shape, std::size_t T, int threads) {
  if (!rkv::kernels::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const rkv::kernels::MatmulRowsFn fn = rkv::kernels::matmul_rows_for(isa);
  const std::size_t elems = shape.n * shape.k;
  const std::size_t bytes = elems * 2;
  const std::size_t copies = T == 1 ? std::max<std::size_t>(1, cold_bytes() / bytes) : 1;
  std::vector<std::uint16_t> weights(elems * copies);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  for (std::size_t i = 0; i < elems; ++i) weights[i] = rkv::f32_to_bf16(dist(rng));
  for (std::size_t c = 1; c < copies; ++c)
    std::memcpy(weights.data() + c * elems, weights.data(), bytes);
  std::vector<float> x(T * shape.k), y(T * shape.n);
  std::normal_distribution<float> xd(0.0f, 1.0f);
  for (float& v : x) v = xd(rng);
  rkv::ThreadPool pool(threads);
  std::size_t c = 0;
  for (auto _ : state) {
    const WeightView w{weights.data() + c * elems, DType::BF16, shape.n, shape.k};
    run(fn, x.data(), T, w, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  const double iters = static_cast<double>(state.iterations());
  if (T == 1) {
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(bytes) * iters * 1e-9, benchmark::Counter::kIsRate);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(elems) * static_cast<double>(T) * iters * 1e-9,
                         benchmark::Counter::kIsRate);
}

void BM_QuantMatmul(benchmark::State& state, DType dtype, Shape shape, std::size_t T, int threads) {
  const std::size_t row_bytes = rkv::dtype_row_bytes(dtype, shape.k);
  const std::size_t bytes = row_bytes * shape.n;
  const std::size_t copies = T == 1 ? std::max<std::size_t>(1, cold_bytes() / bytes) : 1;
  std::vector<std::uint8_t> weights(bytes * copies);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(shape.k);
  for (std::size_t n = 0; n < shape.n; ++n) {
    for (float& v : row) v = dist(rng);
    rkv::quant::quantize_row(dtype, row.data(), shape.k, weights.data() + n * row_bytes);
  }
  for (std::size_t c = 1; c < copies; ++c)
    std::memcpy(weights.data() + c * bytes, weights.data(), bytes);
  std::vector<float> x(T * shape.k), y(T * shape.n);
  std::normal_distribution<float> xd(0.0f, 1.0f);
  for (float& v : x) v = xd(rng);
  rkv::ThreadPool pool(threads);
  std::size_t c = 0;
  for (auto _ : state) {
    const WeightView w{weights.data() + c * bytes, dtype, shape.n, shape.k};
    rkv::kernels::matmul(x.data(), T, w, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  const double iters = static_cast<double>(state.iterations());
  if (T == 1) {
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(bytes) * iters * 1e-9, benchmark::Counter::kIsRate);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(shape.n * shape.k) * static_cast<double>(T) * iters * 1e-9,
      benchmark::Counter::kIsRate);
}

// amx: the AMX kernel (attention_amx_for) instead of isa's.
void BM_Attention(benchmark::State& state, Isa isa, bool amx, int n, rkv::KvDtype dtype, int G,
                  int d) {
  if (!rkv::kernels::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  if (amx && !rkv::kernels::amx_enabled()) {
    state.SkipWithError("AMX is not enabled (no AMX-BF16, refused, or RKV_AMX=off)");
    return;
  }
  const rkv::kernels::AttentionFn fn =
      amx ? rkv::kernels::attention_amx_for(dtype) : rkv::kernels::attention_for(isa, dtype);
  const std::size_t row_bytes = rkv::kv_row_bytes(dtype, d);
  const std::size_t per_cache = static_cast<std::size_t>(n) * row_bytes;  // bytes of keys
  const std::size_t copies = std::max<std::size_t>(1, cold_bytes() / (2 * per_cache));
  std::vector<std::byte, rkv::HugePageAllocator<std::byte>> kv(2 * per_cache * copies);
  std::vector<float> q(static_cast<std::size_t>(G) * static_cast<std::size_t>(d)),
      out(static_cast<std::size_t>(G) * static_cast<std::size_t>(d)),
      probs(static_cast<std::size_t>(G) * static_cast<std::size_t>(n)),
      row(static_cast<std::size_t>(d));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t r = 0; r < kv.size() / row_bytes; ++r) {
    for (float& v : row) v = dist(rng);
    rkv::kv_encode_row(dtype, row.data(), d, kv.data() + r * row_bytes);
  }
  for (float& v : q) v = dist(rng);
  std::size_t c = 0;
  for (auto _ : state) {
    const std::byte* keys = kv.data() + 2 * c * per_cache;
    fn(q.data(), G, d, keys, keys + per_cache, n, 0.125f, out.data(), probs.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(2 * per_cache) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

void BM_Limits(benchmark::State& state, Isa isa, int threads) {
  if (!rkv::kernels::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  rkv::ThreadPool pool(threads);
  rkv::kernels::MachineLimits m;
  for (auto _ : state) m = rkv::kernels::measure_machine_limits(pool, isa);
  state.counters["read_GB/s"] = m.read_gb_per_s;
  state.counters["peak_GFLOP/s"] = m.peak_gflop_per_s;
  state.SetLabel(m.compute_name);
}

int register_benchmarks() {
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    for (int threads : {1, 2}) {
      const std::string name = std::string("Limits/") + std::string(rkv::kernels::isa_name(isa)) +
                               "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_Limits, isa, threads)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1)
          ->UseRealTime();
    }
  }
  struct AttentionShape {
    const char* prefix;  // the 0.5B shape keeps the names earlier measurements used
    int G, d;
    std::vector<int> lengths;
  };
  const AttentionShape attention_shapes[] = {
      {"Attention/", 7, 64, {1152, 8320}},   {"Attention/d128/", 6, 128, {4096}},
      {"Attention/g8d128/", 8, 128, {2048}}, {"Attention/g4d256/", 4, 256, {2048}},
      {"Attention/g5d128/", 5, 128, {2048}}, {"Attention/g4d128/", 4, 128, {2048}}};
  for (const AttentionShape& shape : attention_shapes) {
    for (int n : shape.lengths) {
      for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512}) {
        for (rkv::KvDtype dtype :
             {rkv::KvDtype::f32, rkv::KvDtype::bf16, rkv::KvDtype::f16, rkv::KvDtype::q8_0}) {
          // f32 keeps the names earlier measurements were recorded under.
          const std::string name =
              std::string(shape.prefix) + "n" + std::to_string(n) + "/" +
              std::string(rkv::kernels::isa_name(isa)) +
              (dtype == rkv::KvDtype::f32 ? "" : "/" + std::string(rkv::kv_dtype_name(dtype)));
          benchmark::RegisterBenchmark(name.c_str(), BM_Attention, isa, false, n, dtype, shape.G,
                                       shape.d)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
      // The AMX kernel (bf16 caches only).
      const std::string name = std::string(shape.prefix) + "n" + std::to_string(n) + "/amx/bf16";
      benchmark::RegisterBenchmark(name.c_str(), BM_Attention, Isa::Avx512Bf16, true, n,
                                   rkv::KvDtype::bf16, shape.G, shape.d)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  for (std::size_t T : {std::size_t{1}, std::size_t{512}}) {
    for (const Shape& s : kShapes) {
      for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
        if (isa == Isa::Reference && T != 1) continue;  // minutes per call
        for (int threads : {1, 2}) {
          const std::string name = std::string("Matmul/") + s.name + "/T" + std::to_string(T) +
                                   "/" + std::string(rkv::kernels::isa_name(isa)) +
                                   "/threads:" + std::to_string(threads);
          auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, isa, s, T, threads);
          b->Unit(benchmark::kMicrosecond)->UseRealTime();
          if (T == 512 && s.n > 100000) b->Iterations(2);
        }
      }
    }
  }
  for (std::size_t T : {std::size_t{1}, std::size_t{8}, std::size_t{16}, std::size_t{512}}) {
    for (const Shape& s : {kShapes[2], kShapes[3]}) {
      for (DType dtype :
           {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::MXFP4}) {
        if (s.k % rkv::dtype_block_elements(dtype) != 0) continue;
        for (int threads : {1, 2}) {
          const std::string name = std::string("QuantMatmul/") + s.name + "/T" + std::to_string(T) +
                                   "/" + std::string(rkv::dtype_name(dtype)) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_QuantMatmul, dtype, s, T, threads)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
  return 0;
}

const int registered = register_benchmarks();

}  // namespace

BENCHMARK_MAIN();
