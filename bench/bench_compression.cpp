// Cost of one compression of one layer of one sequence (issue "Decode-time KV compression",
// item 5): the Qwen2.5-0.5B attention shape (14 query heads, 2 KV heads, head_dim 64) with a
// cache of budget + buffer = 1024 + 128 entries, for every method.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "compress/stages.h"
#include "core/thread_pool.h"
#include "rkv/compression.h"

namespace {

struct Layer {
  int q_heads = 14, kv_heads = 2, head_dim = 64, n_all = 1152, window = 8;
  std::vector<float> queries;
  std::vector<std::vector<float>> keys, state;
  std::vector<std::vector<std::int32_t>> positions;

  explicit Layer(int window_size) : window(window_size) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    queries.resize(static_cast<std::size_t>(q_heads) * window * head_dim);
    for (float& x : queries) x = normal(rng);
    keys.assign(kv_heads, std::vector<float>(static_cast<std::size_t>(n_all) * head_dim));
    for (auto& k : keys)
      for (float& x : k) x = normal(rng);
    state.assign(kv_heads, std::vector<float>(static_cast<std::size_t>(n_all), 0.0f));
    positions.assign(kv_heads, std::vector<std::int32_t>(static_cast<std::size_t>(n_all)));
    for (auto& p : positions)
      for (int i = 0; i < n_all; ++i) p[static_cast<std::size_t>(i)] = i;
  }

  rkv::LayerView view() const {
    rkv::LayerView v;
    v.q_heads = q_heads;
    v.kv_heads = kv_heads;
    v.head_dim = head_dim;
    v.n_all = n_all;
    v.window = window;
    v.queries = queries.data();
    for (int h = 0; h < kv_heads; ++h) {
      v.keys.push_back(keys[static_cast<std::size_t>(h)].data());
      v.positions.push_back(positions[static_cast<std::size_t>(h)].data());
      v.state.push_back(state[static_cast<std::size_t>(h)].data());
    }
    return v;
  }
};

void BM_CompressLayer(benchmark::State& st, const char* method, int threads) {
  rkv::CompressionParams params = rkv::CompressionParams::defaults(method);
  params.budget = 1024;
  params.buffer = 128;
  const Layer layer(params.window);
  const rkv::LayerView view = layer.view();
  rkv::ThreadPool pool(threads);
  for (auto _ : st) {
    rkv::Selection s = rkv::compress_layer(view, params, nullptr, threads > 1 ? &pool : nullptr);
    benchmark::DoNotOptimize(s);
  }
  st.counters["n_all"] = layer.n_all;
}

BENCHMARK_CAPTURE(BM_CompressLayer, streamingllm, "streamingllm", 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompressLayer, h2o, "h2o", 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompressLayer, snapkv, "snapkv", 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompressLayer, rkv, "rkv", 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompressLayer, rkv_2threads, "rkv", 2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CompressLayer, gkv, "gkv", 1)->Unit(benchmark::kMicrosecond);

// The redundancy stage alone, one KV head of 1152 keys of head size 64: unrelated keys (few
// cosines above T = 0.5, as in a random-weight model) and keys sharing a direction (many, as in
// trained models). Reported with its rate of pair products: n^2 / 2 pairs x 64 multiply-adds.
void BM_Redundancy(benchmark::State& st, float shared) {
  const int n = 1152, d = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(d), keys(static_cast<std::size_t>(n) * d), out(n);
  for (float& b : bias) b = normal(rng);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = normal(rng) + shared * bias[i % d];
  for (auto _ : st) {
    rkv::compress::redundancy_scores(keys.data(), n, d, 0.5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GFMA/s"] = benchmark::Counter(0.5 * n * n * d * 1e-9 * double(st.iterations()),
                                             benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Redundancy, unrelated, 0.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Redundancy, shared_direction, 0.8f)->Unit(benchmark::kMicrosecond);

}  // namespace
