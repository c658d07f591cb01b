// rkv bench-decode: prompt-processing and decode speed of one sequence at several context
// depths (the llama-bench pp/tg measurements), with random token ids; each figure also as a
// fraction of the machine's measured limit (kernels/limits.h): prompt processing against the
// compute peak, decode against the streaming-read bandwidth.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "build_info.h"
#include "command.h"
#include "common.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/kv_memory.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"
#include "kernels/limits.h"
#include "kv/kv_codec.h"
#include "kv_options.h"
#include "model/model.h"
#include "rkv/device.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model;
  std::string matmul_precision;
  std::string device;  // --device
  std::string attention_precision;
  std::string depths = "0,1024,4096";
  int n_prompt = 512;
  int n_gen = 64;
  int repetitions = 1;
  int threads = 1;
  bool no_limits = false;
  bool no_warmup = false;
  bool interleave = false;
  std::string fill = "prefill";
  std::string json_out;
  std::shared_ptr<KvOptions> kv = std::make_shared<KvOptions>();
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  add_flag_option(app, "-m,--model", args->model,
                  "Model directory (e.g. one written by rkv make-model) or .gguf file")
      ->required();
  add_flag_option(app, "-d,--depths", args->depths,
                  "Context depths at which to measure decode, comma-separated");
  add_flag_option(app, "-p,--n-prompt", args->n_prompt,
                  "Prompt tokens for the prompt-processing test (0: skip)")
      ->check(at_least(0));
  add_flag_option(app, "-n,--n-gen", args->n_gen,
                  "Tokens decoded at each depth (0: skip the decode tests)")
      ->check(at_least(0));
  add_flag_option(app, "-r,--repetitions", args->repetitions,
                  "Repetitions of each test (the best is reported)")
      ->check(at_least(1));
  add_flag_option(app, "--fill", args->fill,
                  "How the cache is filled to each depth before its decode test: prefill "
                  "(batches of 512 tokens, then one compression, as a prompt is) or stream "
                  "(batches of --kv-buffer tokens, each followed by a compression, as decoding "
                  "with the default every-buffer trigger does, whatever --kv-trigger says: a "
                  "compressing method's cache never holds more than budget + buffer, so the "
                  "fill's attention never spans the whole depth; at a depth that is a multiple "
                  "of the buffer the decode test then reads as many entries as after prefill)")
      ->check(CLI::IsMember({"prefill", "stream"}));
  app.add_flag("--interleave", args->interleave,
               "Run the decode tests of all depths side by side: fill every depth's cache "
               "first, then time one step of each depth in turn, so that their speeds are "
               "measured under the same conditions (a shared machine's memory speed can move by "
               "tens of percent within minutes) and the ratios between depths mean something; "
               "the limit is measured around the whole group, and every cache is held at once");
  add_flag_option(app, "--json", args->json_out, "Also write the results to this JSON file");
  app.add_flag("--no-warmup", args->no_warmup,
               "Skip the untimed warm-up before the tests (as llama-bench: one prompt of the "
               "prompt test's length before its repetitions, one decode step before the decode "
               "tests)");
  app.add_flag("--no-limits", args->no_limits,
               "Skip measuring the machine's limits (streaming-read bandwidth for decode, compute "
               "peak for prompt processing, with the same threads, just before and after each "
               "timed repetition: a few tenths of a second each) and the columns that compare "
               "with them");
  add_precision_options(app, args->matmul_precision, args->attention_precision);
  add_device_option(app, args->device);
  add_threads_option(app, args->threads);
  add_kv_options(app, args->kv);
  app.callback([args] {
    const CompressionParams kv_params = args->kv->params();
    const std::optional<KvDtype> kv_dtype_flag = args->kv->kv_dtype();
    const std::vector<int> depths = parse_int_list(args->depths, "--depths");
    for (int d : depths)
      if (d < 0) throw Error("--depths: depths must be >= 0");
    if (args->n_prompt == 0 && args->n_gen == 0)
      throw Error("-p 0 and -n 0: nothing to measure (give a prompt length or a decode length)");
    DeviceNeeds needs;
    needs.compressing_methods = compressing_methods({std::string(method_name(kv_params.method))});
    needs.kv_dtype = kv_dtype_flag;
    auto model = load_model(args->model, args->matmul_precision, args->attention_precision,
                            args->device, needs);
    const ModelConfig& c = model->config();
    const KvDtype kv_dtype = kv_dtype_flag.value_or(model->default_kv_dtype());
    const auto query_stats =
        args->kv->load_query_stats(args->model, *model, kv_params.info().needs.query_stats);
    if (kv_params.info().needs.query_stats && !query_stats)
      throw Error("kv method " + std::string(method_name(kv_params.method)) +
                  " needs the model's query statistics: run `rkv calibrate` (docs/USAGE.md) or "
                  "name a file with --query-stats");
    const KvTokenBytes per_token = KvCache::token_bytes_for(model->cache_shape(1, 0, kv_dtype));
    ThreadPool pool(args->threads);
    ForwardScratch scratch;
    ModelRunner runner(*model, pool);
    Rng rng(1234);
    auto random_tokens = [&](int n) {
      std::vector<int> t(static_cast<std::size_t>(n));
      for (int& x : t) x = static_cast<int>(rng.next() % static_cast<std::uint64_t>(c.vocab_size));
      return t;
    };
    std::fprintf(stderr,
                 "bench-decode: %s (%s, %d layers, hidden %d), %d threads, kernels: %s, matmul "
                 "precision: %s\n",
                 args->model.c_str(), c.architecture_name.c_str(), c.num_layers, c.hidden_size,
                 args->threads,
                 model->device() == Device::Cuda ? "cuda" : kernels::kernels_name().c_str(),
                 args->matmul_precision.c_str());
    // The limits each figure is read against. On the CPU they are measured just before and just
    // after each timed repetition (a shared machine's bandwidth moves by tens of percent within
    // seconds: a limit measured once at the start can be far from the one a test ran under),
    // and the repetition's limit is the mean of the two; on the GPU once, at the start.
    std::optional<kernels::LimitProbe> probe;
    std::optional<kernels::MachineLimits> limits;
    if (!args->no_limits && model->device() == Device::Cuda) {
      // On the GPU: decode against the card's copy bandwidth, prompt processing against cuBLAS's
      // bf16 GEMM rate (docs/GPU.md).
      std::fprintf(stderr, "bench-decode: measuring the GPU's limits...\n");
      const CudaLimits gpu = measure_cuda_limits();
      limits = kernels::MachineLimits{gpu.copy_gb_per_s, gpu.bf16_gemm_gflop_per_s,
                                      "cuBLAS bf16 GEMM", 0, kernels::Isa::Reference};
      std::printf("GPU limits (%s): device copy %.1f GB/s (read + write); %s %.1f GFLOP/s\n",
                  cuda_summary().c_str(), limits->read_gb_per_s, limits->compute_name,
                  limits->peak_gflop_per_s);
    } else if (!args->no_limits) {
      probe.emplace(pool, kernels::active_isa());
      std::printf(
          "Machine limits (%d threads, %s), measured just before and just after each timed "
          "repetition (each row's limit is the mean of its two): streaming read for decode, %s "
          "for prompt processing\n",
          probe->threads(), std::string(kernels::isa_name(probe->isa())).c_str(),
          probe->compute_name());
    }
    // One measurement of the limit a test runs against (0 without limits).
    auto limit_now = [&](bool compute_bound) {
      if (probe) return compute_bound ? probe->peak_gflop_per_s() : probe->read_gb_per_s();
      if (limits) return compute_bound ? limits->peak_gflop_per_s : limits->read_gb_per_s;
      return 0.0;
    };
    const Model::MatmulFootprint matmuls = model->matmul_footprint();
    const double kv_entry_bytes =
        2.0 * static_cast<double>(kv_row_bytes(kv_dtype, c.head_dim)) * c.num_kv_heads;
    nlohmann::json results = nlohmann::json::array();
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    std::printf(
        "KV cache %s: %zu bytes per cached token (keys %zu, values %zu, positions %zu, policy "
        "state %zu)\n\n",
        std::string(kv_dtype_name(kv_dtype)).c_str(), per_token.total(), per_token.keys,
        per_token.values, per_token.positions, per_token.state);
    std::printf(
        "| test | depth | tokens | seconds | tokens/s | work rate | limit | of the limit |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    // A timed repetition's limit: measured just before and just after it (see above).
    struct Limit {
      double before = 0.0, after = 0.0;
      double mean() const { return (before + after) / 2.0; }
    };
    // `work` is what the test did: flops for prompt processing, bytes read for decode.
    auto report = [&](const std::string& test, int depth, int tokens, double seconds, double work,
                      bool compute_bound, const Limit& limit) {
      const double rate = work / seconds / 1e9;
      const char* unit = compute_bound ? "GFLOP/s" : "GB/s";
      std::printf("| %s | %d | %d | %.3f | %.2f | %.1f %s | ", test.c_str(), depth, tokens, seconds,
                  tokens / seconds, rate, unit);
      if (limit.mean() > 0.0)
        std::printf("%.1f %s | %.0f%% |\n", limit.mean(), unit, 100.0 * rate / limit.mean());
      else
        std::printf("- | - |\n");
      std::fflush(stdout);
      results.push_back({{"test", test},
                         {"depth", depth},
                         {"tokens", tokens},
                         {"seconds", seconds},
                         {"tokens_per_second", tokens / seconds},
                         {compute_bound ? "gflop_per_s" : "gb_per_s", rate}});
      if (limit.mean() > 0.0) {
        results.back()["limit"] = limit.mean();
        results.back()["limit_before"] = limit.before;
        results.back()["limit_after"] = limit.after;
        results.back()["fraction_of_limit"] = rate / limit.mean();
      }
    };
    if (args->n_prompt > 0) {
      double best = 1e30;
      Limit best_limit;
      // rep < 0: the warm-up, untimed (the first pass also touches every scratch buffer).
      for (int rep = args->no_warmup ? 0 : -1; rep < args->repetitions; ++rep) {
        KvCache cache(model->cache_shape(args->n_prompt, 0, kv_dtype));
        const auto tokens = random_tokens(args->n_prompt);
        Limit limit;
        if (rep >= 0) limit.before = limit_now(true);
        const double t0 = now_seconds();
        prefill(*model, cache, tokens, 0, 512, scratch, pool, logits.data());
        const double elapsed = now_seconds() - t0;
        if (rep < 0) continue;
        limit.after = limit_now(true);
        if (elapsed < best) {
          best = elapsed;
          best_limit = limit;
        }
      }
      // Flops: two per parameter per token for the layers' matrices, two per output-head
      // parameter once (prefill computes the last token's logits only), and causal attention
      // (QK and PV, two flops per multiply-add, token t attending to t keys) over every query
      // head of every layer.
      const double T = args->n_prompt;
      const double layer_params = static_cast<double>(matmuls.params - matmuls.head_params);
      const double flops = 2.0 * layer_params * T + 2.0 * static_cast<double>(matmuls.head_params) +
                           2.0 * c.kv_layers() * c.num_heads * c.head_dim * T * (T + 1);
      report("pp" + std::to_string(args->n_prompt), 0, args->n_prompt, best, flops, true,
             best_limit);
    }
    // A sequence's memory for `depth` tokens and then `n_gen` more.
    auto new_memory = [&](int depth, int n_gen) {
      auto memory = std::make_unique<KvMemory>(
          kv_params, CompressionVocab{}, SteeringParams{},
          ModelCalibration{query_stats, model->rope_frequencies(), model->rope_magnitude()});
      memory->allocate(KvMemory::shape_for(
          *model, kv_params, KvMemory::capacity_for(kv_params, depth, n_gen), kv_dtype));
      return memory;
    };
    if (args->n_gen > 0 && !args->no_warmup) {  // one untimed decode step from an empty cache
      const std::unique_ptr<KvMemory> owned = new_memory(0, 1);
      KvMemory& memory = *owned;
      KvMemory* const memories[] = {&memory};
      memory.begin_decode_step(0, 0);
      const ForwardRow row{memory.cache_for_appends(), 0, 0, true};
      runner.run({&row, 1}, memories, logits.data());
    }
    // --fill stream (for a method that compresses; any other fills as prefill does).
    const bool stream = args->fill == "stream" && kv_params.info().compresses;
    // One decode test in progress: its sequence's memory, filled to `depth`, and what its timed
    // steps have taken so far.
    struct Decode {
      int depth = 0;
      std::unique_ptr<KvMemory> memory;
      int token = 0;
      double seconds = 0.0, bytes = 0.0, compress_before = 0.0;
    };
    auto start_decode = [&](int depth) {
      Decode d;
      d.depth = depth;
      // A streamed fill's tokens arrive as generated ones do: the cache is sized as for them.
      d.memory = stream ? new_memory(0, depth + args->n_gen) : new_memory(depth, args->n_gen);
      KvMemory& memory = *d.memory;
      if (depth > 0) {
        std::fprintf(stderr, "bench-decode: filling the cache to depth %d (%s)...\n", depth,
                     stream ? "streamed" : "prefill");
        const std::vector<int> fill = random_tokens(depth);
        std::vector<ForwardRow> rows;
        std::vector<KvMemory*> row_memory;
        // stream: a batch of `buffer` tokens ends where decoding's trigger fires (every
        // buffer tokens), and the compression follows it; a last, shorter batch has none.
        const int batch = stream ? kv_params.buffer : 512;
        for (int begin = 0; begin < depth; begin += batch) {
          rows.clear();
          const int end = std::min(depth, begin + batch);
          for (int p = begin; p < end; ++p)
            rows.push_back({memory.cache_for_appends(), fill[static_cast<std::size_t>(p)], p});
          row_memory.assign(rows.size(), &memory);
          runner.run(rows, row_memory, nullptr);
          if (stream && end % batch == 0) memory.compress_all_layers(end, &pool);
        }
        if (!stream) memory.compress_all_layers(depth, &pool);
      }
      d.token = static_cast<int>(rng.next() % static_cast<std::uint64_t>(c.vocab_size));
      d.compress_before = memory.compression_seconds();
      return d;
    };
    // Decode step `i` of a test, timed. Bytes a step reads: every matrix once, and the keys and
    // values its attention reads (the entries held before the step plus the new one, in every
    // layer).
    auto decode_step = [&](Decode& d, int i) {
      KvMemory& memory = *d.memory;
      KvMemory* const memories[] = {&memory};
      std::size_t held = 0;
      // (The cache layers: a sliding window's or DeltaNet's constant state aside.)
      for (int l = 0; l < c.kv_layers(); ++l)
        held += static_cast<std::size_t>(memory.cache().length(l));
      d.bytes += static_cast<double>(matmuls.bytes) +
                 (static_cast<double>(held) + c.kv_layers()) * kv_entry_bytes;
      const double t0 = now_seconds();
      memory.begin_decode_step(d.token, d.depth + i);
      const ForwardRow row{memory.cache_for_appends(), d.token, d.depth + i, true};
      runner.run({&row, 1}, memories, logits.data());
      d.token = argmax(logits.data(), c.vocab_size);
      d.seconds += now_seconds() - t0;
    };
    // The depths' tests one after another, or with --interleave all in one group whose caches are
    // filled first and whose steps then take turns, one step of each depth at a time: on a
    // machine whose memory speed moves by tens of percent within minutes, the depths' speeds
    // are then measured under the same conditions and their ratios mean something.
    std::vector<std::vector<int>> groups;
    if (args->n_gen > 0 && args->interleave)
      groups.push_back(depths);
    else if (args->n_gen > 0)
      for (int depth : depths) groups.push_back({depth});
    for (const std::vector<int>& group : groups) {
      struct Best {
        double seconds = 1e30, compress = 0.0, bytes = 0.0;
        Limit limit;
        std::int64_t compressions = 0;
        int entries = 0;
      };
      std::vector<Best> best(group.size());
      for (int rep = 0; rep < args->repetitions; ++rep) {
        std::vector<Decode> tests;
        for (int depth : group) tests.push_back(start_decode(depth));
        Limit limit;
        limit.before = limit_now(false);
        for (int i = 0; i < args->n_gen; ++i)
          for (Decode& d : tests) decode_step(d, i);
        limit.after = limit_now(false);
        for (std::size_t k = 0; k < tests.size(); ++k) {
          const Decode& d = tests[k];
          if (d.seconds >= best[k].seconds) continue;
          best[k] = {d.seconds,
                     d.memory->compression_seconds() - d.compress_before,
                     d.bytes,
                     limit,
                     d.memory->compressions(),
                     d.memory->cache().length(0)};
        }
      }
      for (std::size_t k = 0; k < group.size(); ++k) {
        const Best& b = best[k];
        report("tg" + std::to_string(args->n_gen), group[k], args->n_gen, b.seconds, b.bytes, false,
               b.limit);
        if (kv_params.info().compresses) {
          std::printf(
              "|   %s: %lld layer compressions, %.3f s (%.1f%% of decode), %d entries per head "
              "at the end |\n",
              std::string(method_name(kv_params.method)).c_str(),
              static_cast<long long>(b.compressions), b.compress, 100.0 * b.compress / b.seconds,
              b.entries);
          results.back()["compression_seconds"] = b.compress;
          results.back()["compressions"] = b.compressions;
          results.back()["compression_share"] = b.compress / b.seconds;
          results.back()["entries_per_head"] = b.entries;
        }
      }
    }
    if (!args->json_out.empty()) {
      nlohmann::json out = {{"model", args->model},
                            {"kv", nlohmann::json::parse(kv_params.to_json())},
                            {"kv_dtype", std::string(kv_dtype_name(kv_dtype))},
                            {"kv_bytes_per_token", per_token.total()},
                            {"matmul_params", matmuls.params},
                            {"matmul_bytes", matmuls.bytes},
                            {"head_params", matmuls.head_params},
                            {"threads", args->threads},
                            {"kernels", kernels::kernels_name()},
                            {"build_commit", build_commit()},
                            {"device", std::string(device_name(model->device()))},
                            {"matmul_precision", args->matmul_precision},
                            {"attention_precision", args->attention_precision},
                            {"fill", args->fill},
                            {"interleaved", args->interleave},
                            {"results", results}};
      if (limits)  // the GPU's, measured once
        out["machine_limits"] = {{"read_gb_per_s", limits->read_gb_per_s},
                                 {"peak_gflop_per_s", limits->peak_gflop_per_s},
                                 {"compute", limits->compute_name},
                                 {"threads", limits->threads},
                                 {"measured", "once, at the start"}};
      if (probe)  // each result's own "limit"
        out["machine_limits"] = {{"compute", probe->compute_name()},
                                 {"threads", probe->threads()},
                                 {"measured", "just before and after each timed repetition"}};
      std::ofstream(args->json_out) << out.dump(2) << "\n";
    }
  });
}

const RegisterCommand reg(
    "bench-decode",
    "Measure prompt processing (pp) and decode (tg) tokens/s at several context depths", setup);

}  // namespace
}  // namespace rkv::cli
