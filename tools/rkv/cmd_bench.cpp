// rkv bench: the R-KV paper's efficiency table (its Table 1) on this machine. For every generated
// length, method, budget and batch size, a batch of identical-length requests (random prompt
// tokens, eos ignored) runs through the batch engine under one KV memory cap; the table reports
// KV memory per sequence, the saving against fullkv, the batch, throughput and decode time. A
// second measurement times every decode step of a single sequence against its position
// (fullkv grows with the context; a compressed cache stays flat) and plots it as SVG.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "core/rng.h"
#include "core/svg_plot.h"
#include "engine/batch_engine.h"
#include "eval/runner.h"
#include "kernels/kernels.h"
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
  int prompt_len = 128;
  std::string gen_lens = "2048";
  std::string methods = "fullkv,rkv";
  std::string budgets = "1024";
  std::string batches = "1,max";
  std::string kv_memory;
  int threads = 1;
  std::string json_out, markdown_out, latency_plot;
  bool resume = false;
  int steady_steps = 0;  // --steady-state
  std::shared_ptr<KvOptions> kv = std::make_shared<KvOptions>();
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --steady-state: a long continuous run's throughput in a fixed number of steps. `batch` copies
// of `request` start at staggered depths (sequence i as if it had generated i * gen_len / batch
// tokens: Request::seed_tokens), so the batch holds every depth at once, as a run of many
// requests does after its start; each sequence that finishes is replaced by a new one at depth 0.
// A compressed cache holds budget..budget + buffer entries at any depth past the budget, so its
// seed stops there (plus the depth modulo the buffer, which staggers the compressions). After the
// warm-up (every sequence decoding, then a buffer's worth of steps for the compression cycles to
// settle), `steps` steps are timed, their compressions included.
struct SteadyState {
  std::int64_t tokens = 0;
  double seconds = 0.0;
  double compression_seconds = 0.0;  // spent compressing in the timed steps
};

SteadyState run_steady_state(const Model& model, ThreadPool& pool, const Engine& preparer,
                             const BatchEngineOptions& options, const Request& request, int batch,
                             int gen_len, int budget, int steps, int vocab) {
  // Large prefill passes, so that the staggered sequences are all under way before the shortest
  // of them finishes.
  BatchEngineOptions o = options;
  o.prefill_chunk = std::max(o.prefill_chunk, 4096);
  BatchEngine engine(model, pool, o);
  const bool compressed = request.compression.info().compresses;
  const int buffer = compressed ? request.compression.buffer : 1;
  Rng rng(99);
  std::int64_t produced = 0;
  bool timing = false;
  int not_started = 0;  // sequences that have not produced a token yet
  auto submit_at = [&](int depth) {
    Request r = request;
    int seed = depth;
    if (compressed && depth > budget + buffer) seed = budget + buffer + depth % buffer;
    for (int i = 0; i < seed; ++i)
      r.prompt_ids.push_back(static_cast<int>(rng.next() % static_cast<std::uint64_t>(vocab)));
    r.seed_tokens = seed;
    r.max_new_tokens = gen_len - depth;
    auto started = std::make_shared<bool>(false);
    ++not_started;
    SequenceHooks hooks;
    hooks.on_token = [&produced, &timing, &not_started, started](int) {
      if (!*started) {
        *started = true;
        --not_started;
      }
      if (timing) ++produced;
      return true;
    };
    engine.submit(preparer.prepare(std::move(r)), std::move(hooks));
  };
  auto step = [&] {
    engine.step();
    for (const BatchResult& done : engine.take_results()) {
      if (done.stop_reason == "error") throw Error("bench: a sequence failed: " + done.error);
      submit_at(0);
    }
  };
  for (int i = 0; i < batch; ++i)
    submit_at(static_cast<int>(static_cast<std::int64_t>(i) * gen_len / batch));
  std::fprintf(stderr, "bench: steady state: starting %d sequences at staggered depths...\n",
               batch);
  while (not_started > 0) step();
  for (int i = 0; i < (compressed ? buffer : 0); ++i) step();
  timing = true;
  const double c0 = engine.compression_seconds();
  const double t0 = now_seconds();
  for (int i = 0; i < steps; ++i) step();
  const double wall = now_seconds() - t0;
  return {produced, wall, engine.compression_seconds() - c0};
}

void run(const Args& a) {
  const std::vector<int> gen_lens = parse_int_list(a.gen_lens, "--gen-lens");
  for (int g : gen_lens)
    if (g <= 0) throw Error("--gen-lens: lengths must be positive");
  if (a.prompt_len <= 0) throw Error("--prompt-len must be positive");
  const auto budgets = eval::parse_budget_specs(a.budgets);
  if (budgets.empty()) throw Error("--budgets: give at least one budget");
  const auto methods = split_list(a.methods);
  for (const auto& m : methods) parse_method(m);
  const auto batch_specs = split_list(a.batches);
  for (const auto& b : batch_specs)
    if (b != "max") parse_int_list(b, "--batch");
  const std::size_t cap = a.kv_memory.empty() ? 0 : parse_byte_size(a.kv_memory);
  DeviceNeeds needs;
  needs.compressing_methods = compressing_methods(methods);
  needs.kv_dtype = a.kv->kv_dtype();
  auto model = load_model(a.model, a.matmul_precision, a.attention_precision, a.device, needs);
  // On a device the engine caps the KV memory at what the device has free (BatchEngineOptions).
  for (const auto& b : batch_specs)
    if (b == "max" && cap == 0 && model->device() == Device::Cpu)
      throw Error("--batch max needs a memory cap: give --kv-memory (e.g. 2GiB)");
  const ModelConfig& c = model->config();
  ThreadPool pool(a.threads);
  const KvDtype kv_dtype = a.kv->kv_dtype().value_or(model->default_kv_dtype());
  const KvCacheShape token_shape = model->cache_shape(1, 0, kv_dtype);
  const KvTokenBytes per_token = KvCache::token_bytes_for(token_shape);
  std::fprintf(
      stderr, "bench: %s (%s, %d layers), %d threads, kernels %s, matmul precision %s, KV cap %s\n",
      a.model.c_str(), c.architecture_name.c_str(), c.num_layers, a.threads,
      kernels::kernels_name().c_str(), a.matmul_precision.c_str(),
      cap ? format_bytes(static_cast<double>(cap)).c_str() : "none");
  std::fprintf(stderr,
               "bench: KV cache %s: %zu bytes per cached token (keys %zu, values %zu, positions "
               "%zu, policy state %zu); the cap reserves keys and values\n",
               std::string(kv_dtype_name(kv_dtype)).c_str(), per_token.total(), per_token.keys,
               per_token.values, per_token.positions, per_token.state);

  Rng rng(2024);
  std::vector<int> prompt(static_cast<std::size_t>(a.prompt_len));
  for (int& t : prompt) t = static_cast<int>(rng.next() % static_cast<std::uint64_t>(c.vocab_size));

  auto make_request = [&](const std::string& method, int budget, int gen_len) {
    Request r;
    r.prompt_ids = prompt;
    r.decode_text = false;
    r.max_new_tokens = gen_len;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    KvOptions kv = *a.kv;
    kv.values["method"] = method;
    if (method != "fullkv") kv.values["budget"] = std::to_string(budget);
    r.compression = kv.params();
    r.kv_dtype = kv_dtype;
    return r;
  };

  // Every measured row (and latency series) goes to a journal beside --json as it is measured,
  // one checked, synced line each (core/record_log.h): a run killed at any moment resumes with
  // --resume, measuring only what the journal lacks.
  using nlohmann::json;
  std::unique_ptr<RecordLog> journal;
  std::vector<json> previous;
  if (!a.json_out.empty()) {
    const std::filesystem::path journal_path = a.json_out + ".rows.jsonl";
    if (a.resume)
      previous = RecordLog::read(journal_path);
    else
      std::filesystem::remove(journal_path);
    journal = std::make_unique<RecordLog>(journal_path);
  } else if (a.resume) {
    throw Error("--resume needs --json FILE (the run's journal is FILE.rows.jsonl)");
  }
  // What must match for a journaled measurement to stand for this run's.
  json kv_settings = json::object();
  for (const auto& [name, value] : a.kv->values) kv_settings[name] = value;
  const json config = {{"model", a.model},
                       {"prompt_len", a.prompt_len},
                       {"threads", a.threads},
                       {"kv_memory_bytes", cap},
                       {"kv", kv_settings},
                       {"kernels", kernels::kernels_name()},
                       {"matmul_precision", a.matmul_precision},
                       {"attention_precision", a.attention_precision},
                       {"kv_dtype", std::string(kv_dtype_name(kv_dtype))}};
  auto journaled = [&](const json& key) -> const json* {
    for (const json& r : previous)
      if (r.value("config", json()) == config && r.value("key", json()) == key) return &r;
    return nullptr;
  };
  if (!previous.empty())
    std::fprintf(stderr, "bench: resuming: %zu measurements in %s.rows.jsonl\n", previous.size(),
                 a.json_out.c_str());

  nlohmann::json rows = nlohmann::json::array();
  std::string table =
      "| gen len | method | budget | KV bytes / seq | KV saving | batch | throughput (tok/s) | "
      "tokens | decode (s) |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
  std::fprintf(stderr, "%s", table.c_str());
  BatchEngineOptions engine_options;
  engine_options.kv_memory_bytes = cap;
  engine_options.query_stats = a.kv->load_query_stats(a.model, *model, needs_query_stats(methods));
  // Requests are prepared (validated, their slots sized) by an Engine without a cap, so that a
  // request whose slot exceeds the cap is reported and skipped here rather than refused; the
  // runs step a BatchEngine of their own, which holds the cap, to time its steps and read its
  // compression time.
  EngineOptions preparer_options;
  preparer_options.query_stats = engine_options.query_stats;
  const Engine preparer(*model, nullptr, pool, preparer_options);
  for (int gen_len : gen_lens) {
    BatchEngine sizing(*model, pool, engine_options);
    const std::size_t full_bytes = preparer.prepare(make_request("fullkv", 0, gen_len)).slot_bytes;
    for (const auto& method : methods) {
      std::vector<eval::BudgetSpec> method_budgets =
          method == "fullkv" ? std::vector<eval::BudgetSpec>{eval::BudgetSpec{0, 0.0, "-"}}
                             : budgets;
      for (const auto& b : method_budgets) {
        const int budget =
            b.ratio > 0 ? std::max(1, static_cast<int>(b.ratio * gen_len + 0.5)) : b.tokens;
        const Request request = make_request(method, budget, gen_len);
        const PreparedRequest sized = preparer.prepare(request);
        const std::size_t slot = sized.slot_bytes;
        if (cap > 0 && slot > cap) {
          std::fprintf(
              stderr, "bench: %s budget %s: one sequence needs %s, more than the cap; skipped\n",
              method.c_str(), b.label.c_str(), format_bytes(static_cast<double>(slot)).c_str());
          continue;
        }
        for (const auto& spec : batch_specs) {
          const int batch =
              spec == "max" ? sizing.max_concurrent(sized) : parse_int_list(spec, "--batch")[0];
          if (batch <= 0) continue;
          const json key = {{"gen_len", gen_len},
                            {"method", method},
                            {"budget", b.label},
                            {"batch", spec},
                            {"steady_state_steps", a.steady_steps}};
          if (const json* done = journaled(key)) {
            const std::string line = done->at("line").get<std::string>();
            table += line;
            std::printf("%s", line.c_str());
            std::fflush(stdout);
            rows.push_back(done->at("row"));
            continue;
          }
          std::int64_t produced = 0;
          double t0 = 0.0, wall = 0.0, decode = 0.0, compressing = 0.0;
          if (a.steady_steps > 0) {
            const SteadyState m =
                run_steady_state(*model, pool, preparer, engine_options, request, batch, gen_len,
                                 budget, a.steady_steps, c.vocab_size);
            produced = m.tokens;
            wall = decode = m.seconds;
            compressing = m.compression_seconds;
          } else {
            BatchEngine engine(*model, pool, engine_options);
            const std::int64_t total = static_cast<std::int64_t>(batch) * gen_len;
            t0 = now_seconds();
            double last_report = t0;
            const PreparedRequest prepared = preparer.prepare(request);
            for (int i = 0; i < batch; ++i) {
              SequenceHooks hooks;
              hooks.on_token = [&produced](int) {
                ++produced;
                return true;
              };
              engine.submit(prepared, std::move(hooks));
            }
            while (engine.step()) {
              const double now = now_seconds();
              if (now - last_report > 10.0) {
                last_report = now;
                const double rate = produced / (now - t0);
                std::fprintf(stderr,
                             "bench: %s %s batch %d: %lld/%lld tokens, %.1f tok/s, ETA %.0f s\n",
                             method.c_str(), b.label.c_str(), batch,
                             static_cast<long long>(produced), static_cast<long long>(total), rate,
                             rate > 0 ? (total - produced) / rate : 0.0);
              }
            }
            wall = now_seconds() - t0;
            compressing = engine.compression_seconds();
            for (const auto& r : engine.take_results()) decode = std::max(decode, r.decode_seconds);
          }

          const double saving =
              100.0 * (1.0 - static_cast<double>(slot) / static_cast<double>(full_bytes));
          const double throughput = produced / wall;
          char line[512];
          std::snprintf(
              line, sizeof(line), "| %d | %s | %s | %s | %.1f%% | %d | %.2f | %lld | %.1f |\n",
              gen_len, method.c_str(),
              method == "fullkv"
                  ? "-"
                  : (std::to_string(budget) + (b.ratio > 0 ? " (" + b.label + ")" : "")).c_str(),
              format_bytes(static_cast<double>(slot)).c_str(), saving, batch, throughput,
              static_cast<long long>(produced), decode);
          if (a.steady_steps > 0) {  // the batch column says how the row was measured
            std::string marked = line;
            const std::string cell = "| " + std::to_string(batch) + " |";
            const std::size_t at = marked.find(cell, marked.find('%'));
            if (at != std::string::npos)
              marked.replace(at, cell.size(), "| " + std::to_string(batch) + " (steady) |");
            std::snprintf(line, sizeof(line), "%s", marked.c_str());
          }
          table += line;
          std::printf("%s", line);
          std::fflush(stdout);
          if (method != "fullkv")
            std::fprintf(stderr, "bench: %s %s batch %d: compression %.2f%% of the time\n",
                         method.c_str(), b.label.c_str(), batch, 100.0 * compressing / wall);
          const json row = {
              {"gen_len", gen_len},
              {"prompt_len", a.prompt_len},
              {"method", method},
              {"budget", method == "fullkv" ? nlohmann::json(nullptr) : nlohmann::json(budget)},
              {"budget_label", b.label},
              {"batch", batch},
              {"kv_bytes_per_sequence", slot},
              {"kv_dtype", std::string(kv_dtype_name(kv_dtype))},
              {"kv_bytes_per_token", per_token.total()},
              {"memory_saving_pct", saving},
              {"throughput_tok_s", throughput},
              {"steady_state_steps", a.steady_steps},
              {"compression_seconds", compressing},
              {"compression_share", compressing / wall},
              {"tokens", produced},
              {"decode_s", decode},
              {"wall_s", wall}};
          rows.push_back(row);
          if (journal)
            journal->append({{"config", config}, {"key", key}, {"row", row}, {"line", line}});
        }
      }
    }
  }

  // Per-token decode latency against position, one sequence per method.
  std::vector<PlotSeries> series;
  if (!a.latency_plot.empty()) {
    const int gen_len = gen_lens.back();
    for (const auto& method : methods) {
      const int budget = budgets[0].ratio > 0 ? static_cast<int>(budgets[0].ratio * gen_len + 0.5)
                                              : budgets[0].tokens;
      const PreparedRequest r = preparer.prepare(make_request(method, budget, gen_len));
      const int bucket = std::max(1, gen_len / 128);
      PlotSeries s;
      s.name = method == "fullkv" ? "fullkv" : method + " (budget " + std::to_string(budget) + ")";
      const json key = {{"latency", method}, {"gen_len", gen_len}, {"budget", budget}};
      if (const json* done = journaled(key)) {
        s.x = done->at("x").get<std::vector<double>>();
        s.y = done->at("y").get<std::vector<double>>();
        series.push_back(std::move(s));
        continue;
      }
      double acc = 0.0;
      int count = 0;
      SequenceHooks hooks;
      hooks.on_step_time = [&](int position, double seconds) {
        acc += seconds;
        if (++count == bucket) {
          s.x.push_back(position);
          s.y.push_back(1000.0 * acc / count);
          acc = 0.0;
          count = 0;
        }
      };
      std::fprintf(stderr, "bench: latency of one %s sequence over %d tokens...\n", method.c_str(),
                   gen_len);
      BatchEngine engine(*model, pool, {});
      engine.submit(r, std::move(hooks));
      engine.run();
      if (journal) journal->append({{"config", config}, {"key", key}, {"x", s.x}, {"y", s.y}});
      series.push_back(std::move(s));
    }
    const std::string plot_tmp = a.latency_plot + ".tmp";
    write_line_plot(
        plot_tmp, series,
        {"Decode latency per token (one sequence, " + std::to_string(a.threads) + " threads)",
         "position (tokens)", "ms per token", true, false});
    std::filesystem::rename(plot_tmp, a.latency_plot);
    std::fprintf(stderr, "bench: wrote %s\n", a.latency_plot.c_str());
  }
  if (!a.markdown_out.empty()) write_file_atomic(a.markdown_out, table);
  if (!a.json_out.empty()) {
    nlohmann::json latency = nlohmann::json::array();
    for (const auto& s : series)
      latency.push_back({{"name", s.name}, {"position", s.x}, {"ms_per_token", s.y}});
    nlohmann::json out = {{"model", a.model},
                          {"threads", a.threads},
                          {"kernels", kernels::kernels_name()},
                          {"build_commit", build_commit()},
                          {"matmul_precision", a.matmul_precision},
                          {"attention_precision", a.attention_precision},
                          {"kv_memory_bytes", cap},
                          {"kv_dtype", std::string(kv_dtype_name(kv_dtype))},
                          {"kv_bytes_per_token",
                           {{"keys", per_token.keys},
                            {"values", per_token.values},
                            {"positions", per_token.positions},
                            {"state", per_token.state},
                            {"total", per_token.total()}}},
                          {"rows", rows},
                          {"latency", latency}};
    write_file_atomic(a.json_out, out.dump(2) + "\n");
  }
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_flag_option(app, "-m,--model", a->model,
                  "Model directory (e.g. written by rkv make-model) or .gguf file")
      ->required();
  add_flag_option(app, "--prompt-len", a->prompt_len, "Prompt tokens per request (random ids)");
  add_flag_option(app, "--gen-lens", a->gen_lens,
                  "Generated tokens per request (eos ignored), comma-separated");
  add_flag_option(app, "--methods", a->methods, "Compression methods to compare, comma-separated");
  add_flag_option(app, "--budgets", a->budgets,
                  "Budgets for the compressed methods: token counts or percentages of the "
                  "generated length (10%)");
  add_flag_option(app, "--batch", a->batches,
                  "Batch sizes, comma-separated; `max` = as many as the KV cap allows");
  add_flag_option(
      app, "--kv-memory", a->kv_memory,
      "KV memory cap for the whole batch, e.g. 2GiB (needed by --batch max on the CPU; on "
      "a GPU it is at most, and by default, the memory the device has free less a "
      "tenth and 512 MiB)");
  add_flag_option(app, "--json", a->json_out,
                  "Write the rows (and the latency series) to this JSON file; each measurement is "
                  "also journaled to FILE.rows.jsonl as soon as it is made");
  app.add_flag("--resume", a->resume,
               "Continue an interrupted run: reuse the measurements in the --json file's journal "
               "made with the same model and settings, and measure only the rest")
      ->envname("RKV_ARG_RESUME");
  add_flag_option(app, "--steady-state", a->steady_steps,
                  "Measure each batch in N timed steps of a steady state instead of a whole run: "
                  "the sequences start at staggered depths (as if a long continuous run were "
                  "under way), finished ones are replaced by new ones, compressions included "
                  "(docs/PERFORMANCE-LOG.md shows it agreeing with whole runs). 0: whole runs")
      ->check(at_least(0));
  add_flag_option(app, "--markdown", a->markdown_out, "Write the table to this Markdown file");
  add_flag_option(
      app, "--latency-plot", a->latency_plot,
      "Write the per-token decode latency of one sequence per method, against position, as SVG");
  add_precision_options(app, a->matmul_precision, a->attention_precision);
  add_device_option(app, a->device);
  add_threads_option(app, a->threads);
  add_kv_options(app, a->kv);
  app.callback([a] { run(*a); });
}

const RegisterCommand reg(
    "bench",
    "Throughput and memory of compressed against full KV caches under a memory cap (R-KV Table 1)",
    setup);

}  // namespace
}  // namespace rkv::cli
