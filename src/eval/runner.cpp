#include "eval/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/record_log.h"
#include "core/svg_plot.h"
#include "engine/compression_trace.h"
#include "engine/steering.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"

namespace rkv::eval {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Job {
  const Example* example = nullptr;
  int sample = 0;
  std::string method;
  int budget = 0;
  std::string budget_label;
};

std::string record_key(const std::string& example_id, int sample, const std::string& method,
                       const std::string& budget) {
  return example_id + "\x1f" + std::to_string(sample) + "\x1f" + method + "\x1f" + budget;
}

// The samples of a run: complete, checked records (core/record_log.h), one per (problem,
// sample, method, budget): a record written twice (by two runs into one directory) counts once.
std::vector<json> read_records(const std::filesystem::path& path) {
  std::vector<json> out;
  std::set<std::string> seen;
  for (json& r : RecordLog::read(path)) {
    const std::string key =
        record_key(r.value("example_id", std::string()), r.value("sample", 0),
                   r.value("method", std::string()), r.value("budget_label", std::string()));
    if (seen.insert(key).second) out.push_back(std::move(r));
  }
  return out;
}

// A file name made of `text`: letters, digits, '.', '_' and '-' kept, anything else '_'.
std::string file_safe(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    out += keep ? ch : '_';
  }
  return out.empty() || out[0] == '.' ? "_" + out : out;
}

// One sample's trace, held in memory while it runs and written whole when it finishes.
struct SampleTrace {
  std::vector<std::string> lines;
  std::unique_ptr<CompressionTrace> trace;
  std::filesystem::path relative;  // under RunnerOptions::trace_dir
};

std::uint64_t sample_seed(std::uint64_t seed, std::size_t example, int sample) {
  std::uint64_t z = seed ^ (0x9e3779b97f4a7c15ull * (example + 1)) ^
                    (0xbf58476d1ce4e5b9ull * static_cast<std::uint64_t>(sample + 1));
  z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
  return z ^ (z >> 29);
}

// The settings every sample of a run depends on, kept as run.json beside samples.jsonl: the
// model (its fingerprint), the dataset, the prompt, the sampling, the cache dtype, the matmul and
// attention precision (--matmul-precision, --attention-precision), steering and
// each compressed method's resolved settings (budget aside). A run resumes a directory only with
// the same ones; methods, budgets and samples may be added from one run to the next, but samples
// made under other settings would otherwise be mixed into one summary row without a word.
json run_settings(const Model& model, const Dataset& dataset, const RunnerOptions& o, int max_new,
                  const std::function<CompressionParams(const std::string&)>& params_of) {
  json kv = json::object();
  for (const auto& method : o.methods) {
    if (method == "fullkv") continue;
    json p = json::parse(params_of(method).to_json());
    p.erase("budget");
    kv[method] = std::move(p);
  }
  json steering = nullptr;
  if (o.steering.enabled()) {
    steering = {{"vector", steering_vector_digest(*o.steering.vector)},
                {"a0", o.steering.a0},
                {"gamma", o.steering.gamma}};
  }
  return {
      {"model", model_fingerprint(model.dir(), model.config())},
      {"dataset", dataset.name},
      {"prompt_template", o.prompt_template},
      {"chat_template", o.chat_template},
      {"chat_template_text", o.chat_template_text ? json(*o.chat_template_text) : json(nullptr)},
      {"max_new_tokens", max_new},
      {"temperature", o.temperature},
      {"top_p", o.top_p},
      {"top_k", o.top_k},
      {"seed", o.seed},
      {"kv_dtype", std::string(kv_dtype_name(o.kv_dtype.value_or(model.default_kv_dtype())))},
      {"matmul_precision", std::string(kernels::matmul_precision_name(model.matmul_precision()))},
      {"attention_precision",
       std::string(kernels::attention_precision_name(model.attention_precision()))},
      {"steering", steering},
      {"kv", kv}};
}

// Checks `now` against the settings recorded in `path` (absent: a new run, or one from before
// run.json existed, whose samples cannot be checked) and records the union: common settings
// must be equal, and so must each compressed method's settings where both runs have it.
void check_and_record_settings(const std::filesystem::path& path, json now, bool has_samples) {
  if (std::filesystem::exists(path)) {
    json before;
    try {
      std::ifstream in(path);
      before = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(path.string() + ": unreadable run settings (" + e.what() + ")");
    }
    std::vector<std::string> diffs;
    auto differ = [&](const std::string& what, const json& a, const json& b) {
      if (a != b) diffs.push_back(what + ": " + a.dump() + " there, " + b.dump() + " now");
    };
    // Settings recorded since a later rkv, with the value every run before them used.
    const json added_later = {{"matmul_precision", "exact"}, {"attention_precision", "exact"}};
    for (const auto& [key, value] : now.items()) {
      if (key == "kv") continue;
      differ(key, before.contains(key) ? before[key] : added_later.value(key, json(nullptr)),
             value);
    }
    json kv = before.value("kv", json::object());
    for (const auto& [method, params] : now["kv"].items()) {
      if (kv.contains(method))
        differ(method + " settings", kv[method], params);
      else
        kv[method] = params;
    }
    if (!diffs.empty()) {
      std::string list;
      for (const auto& d : diffs) list += "\n  " + d;
      throw Error(path.parent_path().string() +
                  " holds samples made with other settings; resuming would mix them into one "
                  "summary. Use another --out directory, or remove this one. Differences:" +
                  list);
    }
    now["kv"] = kv;
  } else if (has_samples) {
    std::fprintf(stderr,
                 "[eval] %s has samples but no run.json (written by an older rkv): resuming "
                 "without checking that they were made with these settings\n",
                 path.parent_path().string().c_str());
  }
  write_file_atomic(path, now.dump(2) + "\n");
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  return buf;
}

}  // namespace

std::vector<BudgetSpec> parse_budget_specs(const std::string& text) {
  std::vector<BudgetSpec> out;
  std::size_t i = 0;
  while (i <= text.size()) {
    std::size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    i = j + 1;
    if (item.empty()) continue;
    BudgetSpec b;
    b.label = item;
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.back() == '%' && end == item.c_str() + item.size() - 1 && v > 0 && v <= 100) {
      b.ratio = v / 100.0;
    } else if (end == item.c_str() + item.size() && v >= 1 && v == std::floor(v) && v < 1e8) {
      b.tokens = static_cast<int>(v);
    } else {
      throw Error("budget '" + item +
                  "': expected a token count (512) or a percentage in (0, 100] (10%)");
    }
    out.push_back(b);
  }
  return out;
}

std::vector<ResultRow> summarize(const std::filesystem::path& samples_jsonl) {
  struct Acc {
    std::string method, label;
    int budget = 0;
    double correct = 0, tokens = 0, kv = 0;
    std::size_t n = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> groups;
  std::vector<std::pair<std::string, std::string>> order;
  for (const json& r : read_records(samples_jsonl)) {
    const auto key =
        std::make_pair(r.value("method", std::string()), r.value("budget_label", std::string()));
    auto [it, inserted] = groups.try_emplace(key);
    if (inserted) order.push_back(key);
    Acc& a = it->second;
    a.method = key.first;
    a.label = key.second;
    a.budget = r.value("budget", 0);
    a.correct += r.value("correct", false) ? 1.0 : 0.0;
    a.tokens += r.value("generated_tokens", 0);
    a.kv += r.value("kv_bytes", 0.0);
    ++a.n;
  }
  double full_pass = -1.0;
  for (const auto& [key, a] : groups)
    if (a.method == "fullkv") full_pass = a.correct / static_cast<double>(a.n);
  std::vector<ResultRow> rows;
  for (const auto& key : order) {
    const Acc& a = groups[key];
    ResultRow row;
    row.method = a.method;
    row.budget_label = a.label;
    row.budget = a.budget;
    row.samples = a.n;
    row.pass_at_1 = a.correct / static_cast<double>(a.n);
    row.relative_to_fullkv = full_pass > 0 ? row.pass_at_1 / full_pass : 0.0;
    row.mean_generated_tokens = a.tokens / static_cast<double>(a.n);
    row.kv_bytes = static_cast<std::size_t>(a.kv / static_cast<double>(a.n));
    rows.push_back(row);
  }
  // fullkv first, then the methods in the order they first appear, each by ascending budget (a
  // strict weak order: the plot draws each method's points in this order, issue 19).
  std::map<std::string, std::size_t> rank;
  for (const auto& key : order)
    rank.try_emplace(key.first, key.first == "fullkv" ? 0 : rank.size() + 1);
  std::stable_sort(rows.begin(), rows.end(), [&rank](const ResultRow& x, const ResultRow& y) {
    const std::size_t rx = rank.at(x.method), ry = rank.at(y.method);
    if (rx != ry) return rx < ry;
    return x.budget < y.budget;
  });
  return rows;
}

RunSummary run_eval(const Model& model, const Tokenizer& tokenizer, const Dataset& dataset,
                    const RunnerOptions& o, ThreadPool& pool) {
  if (o.samples <= 0) throw Error("--samples must be at least 1");
  if (o.methods.empty()) throw Error("--methods: give at least one method");
  for (const auto& m : o.methods) parse_method(m);
  const bool has_full = std::find(o.methods.begin(), o.methods.end(), "fullkv") != o.methods.end();
  const bool has_compressed =
      std::any_of(o.methods.begin(), o.methods.end(), [](const auto& m) { return m != "fullkv"; });
  if (has_compressed && o.budgets.empty())
    throw Error("--budgets: compressed methods need at least one budget");
  for (const auto& b : o.budgets)
    if (b.ratio > 0 && !has_full)
      throw Error("budget '" + b.label +
                  "' is a share of the mean fullkv length: add fullkv to --methods");
  if (o.out_dir.empty()) throw Error("--out: give an output directory");
  std::filesystem::create_directories(o.out_dir);
  const auto samples_path = o.out_dir / "samples.jsonl";

  // Prompts, once per problem: the user turn; the engine renders the chat template.
  std::vector<std::string> questions;
  for (const auto& ex : dataset.examples)
    questions.push_back(render_prompt(o.prompt_template, ex.question));
  const int max_new = o.max_new_tokens > 0 ? o.max_new_tokens : dataset.max_length;
  EngineOptions engine_options;
  engine_options.kv_memory_bytes = o.kv_memory_bytes;
  engine_options.query_stats = o.query_stats;
  engine_options.kv_dtype = o.kv_dtype;
  engine_options.max_batch = o.max_batch;
  engine_options.chat_template = o.chat_template;
  engine_options.chat_template_text = o.chat_template_text;
  engine_options.chat_template_origin = o.chat_template_origin;

  auto make_params = [&](const std::string& method, int budget) {
    CompressionParams p = CompressionParams::defaults(parse_method(method));
    if (method != "fullkv") {
      for (const auto& [name, value] : o.kv_settings) p.set(name, value);
      p.budget = budget;
    }
    p.validate();
    return p;
  };

  std::set<std::string> done;
  RunSummary summary;
  for (const json& r : read_records(samples_path)) {
    done.insert(record_key(r.value("example_id", std::string()), r.value("sample", 0),
                           r.value("method", std::string()),
                           r.value("budget_label", std::string())));
  }
  check_and_record_settings(o.out_dir / "run.json",
                            run_settings(model, dataset, o, max_new,
                                         [&](const std::string& method) {
                                           CompressionParams p =
                                               CompressionParams::defaults(parse_method(method));
                                           for (const auto& [name, value] : o.kv_settings)
                                             p.set(name, value);
                                           return p;
                                         }),
                            !done.empty());
  // Each sample is one checked line, synced before the next: a run killed at any moment loses
  // at most the samples in flight, which the next run generates again.
  RecordLog out(samples_path);

  auto run_phase = [&](const std::vector<Job>& all_jobs, const char* phase) {
    std::vector<Job> jobs;
    for (const auto& j : all_jobs) {
      if (done.count(record_key(j.example->id, j.sample, j.method, j.budget_label)))
        ++summary.resumed;
      else
        jobs.push_back(j);
    }
    if (jobs.empty()) return;
    Engine engine(model, &tokenizer, pool, engine_options);
    std::map<std::uint64_t, std::size_t> job_of;
    std::map<std::uint64_t, std::unique_ptr<SampleTrace>> traces;  // by engine id
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const Job& j = jobs[i];
      Request r;
      r.messages = {{"user", questions[j.example->index]}};
      r.max_new_tokens = max_new;
      r.sampling.temperature = o.temperature;
      r.sampling.top_p = o.top_p;
      r.sampling.top_k = o.top_k;
      r.sampling.seed = sample_seed(o.seed, j.example->index, j.sample);
      r.decode_text = false;  // graded from the ids, special tokens skipped
      r.compression = make_params(j.method, j.budget);
      r.steering = o.steering;
      if (!o.replay.empty()) {
        const auto it = o.replay.find({j.example->id, j.sample});
        if (it == o.replay.end())
          throw Error("replay: no ids for example \"" + j.example->id + "\", sample " +
                      std::to_string(j.sample));
        r.replay_ids = it->second;  // prepare() lets it run to its end
      }
      std::unique_ptr<SampleTrace> st;
      if (!o.trace_dir.empty()) {
        st = std::make_unique<SampleTrace>();
        st->relative = std::filesystem::path(file_safe(j.method + "-" + j.budget_label)) /
                       (file_safe(j.example->id) + "-s" + std::to_string(j.sample) + ".jsonl");
        SampleTrace* raw = st.get();
        st->trace = std::make_unique<CompressionTrace>(
            [raw](const std::string& line) { raw->lines.push_back(line); }, &tokenizer);
        r.on_compression = [raw](const CompressionEvent& e) { raw->trace->record(e); };
      }
      PreparedRequest prepared = engine.prepare(std::move(r));
      if (st) st->trace->begin(prepared, model);
      SampleTrace* raw = st.get();
      const std::uint64_t id =
          engine.submit(std::move(prepared), {.on_token =
                                                  [&tokens, raw](const TokenEvent& e) {
                                                    ++tokens;
                                                    if (raw && e.token >= 0)
                                                      raw->trace->token(e.token);
                                                  },
                                              .on_done = {}});
      job_of[id] = i;
      if (st) traces[id] = std::move(st);
    }
    const auto t0 = Clock::now();
    auto last = t0;
    std::size_t finished = 0;
    for (bool more = true; more;) {
      more = engine.step();
      for (auto& result : engine.take_completions()) {
        if (result.stop_reason == "error") throw Error(result.error);
        const Job& j = jobs[job_of.at(result.id)];
        const std::string text = tokenizer.decode(
            std::vector<std::int32_t>(result.tokens.begin(), result.tokens.end()), true);
        const Grade g = grade_output(text, j.example->answer, dataset.style);
        json rec = {{"example_id", j.example->id},
                    {"example_index", j.example->index},
                    {"sample", j.sample},
                    {"method", j.method},
                    {"budget", j.budget},
                    {"budget_label", j.budget_label},
                    {"gold", j.example->answer},
                    {"extracted", g.extracted},
                    {"correct", g.correct},
                    {"prompt_tokens", result.prompt_tokens},
                    {"generated_tokens", result.tokens.size()},
                    {"stop_reason", result.stop_reason},
                    {"kv_bytes", result.kv_bytes},
                    {"kv_dtype", std::string(kv_dtype_name(result.kv_dtype))},
                    {"time_s", result.prefill_seconds + result.decode_seconds},
                    {"output", text}};
        if (auto it = traces.find(result.id); it != traces.end()) {
          // The trace is on disk (whole, renamed into place) before the record that names it.
          SampleTrace& st = *it->second;
          st.trace->end(result);
          const std::filesystem::path path = o.trace_dir / st.relative;
          std::filesystem::create_directories(path.parent_path());
          const std::filesystem::path tmp = path.string() + ".tmp";
          {
            std::ofstream f(tmp, std::ios::binary);
            for (const std::string& line : st.lines) f << line << '\n';
            if (!f.flush()) throw Error(tmp.string() + ": cannot write the trace");
          }
          std::filesystem::rename(tmp, path);
          rec["trace"] = st.relative.generic_string();
          traces.erase(it);
        }
        out.append(std::move(rec));
        ++finished;
        ++summary.generated_now;
      }
      const auto now = Clock::now();
      const double elapsed = std::chrono::duration<double>(now - t0).count();
      if (o.progress && (std::chrono::duration<double>(now - last).count() >= 5.0 || !more)) {
        last = now;
        const double rate = finished > 0 ? elapsed / static_cast<double>(finished) : 0.0;
        std::fprintf(
            o.progress, "[eval] %s: %zu/%zu samples (%.0f%%), %lld tokens, %.1f tok/s, ETA %s\n",
            phase, finished, jobs.size(),
            100.0 * static_cast<double>(finished) / static_cast<double>(jobs.size()),
            static_cast<long long>(tokens),
            elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0,
            finished > 0
                ? format_duration(rate * static_cast<double>(jobs.size() - finished)).c_str()
                : "?");
      }
    }
  };

  auto jobs_for = [&](const std::string& method, int budget, const std::string& label) {
    std::vector<Job> jobs;
    for (const auto& ex : dataset.examples)
      for (int s = 0; s < o.samples; ++s) jobs.push_back({&ex, s, method, budget, label});
    return jobs;
  };

  if (has_full) run_phase(jobs_for("fullkv", 0, "-"), "fullkv");
  double mean_full = 0.0;
  if (has_full) {
    for (const auto& row : summarize(samples_path))
      if (row.method == "fullkv") mean_full = row.mean_generated_tokens;
  }
  std::vector<Job> compressed;
  for (const auto& method : o.methods) {
    if (method == "fullkv") continue;
    for (const auto& b : o.budgets) {
      const int budget =
          b.ratio > 0 ? static_cast<int>(std::lround(b.ratio * mean_full)) : b.tokens;
      make_params(method, budget);  // fails early on a budget the method cannot take
      const auto jobs = jobs_for(method, budget, b.label);
      compressed.insert(compressed.end(), jobs.begin(), jobs.end());
    }
  }
  run_phase(compressed, "compressed");

  summary.results = summarize(samples_path);
  json results = json::array();
  std::string md =
      "| method | budget | pass@1 | relative to fullkv | mean generated tokens | samples "
      "|\n|---|---:|---:|---:|---:|---:|\n";
  std::map<std::string, PlotSeries> series;
  double full_pass = -1.0;
  int min_budget = 1 << 30, max_budget = 0;
  for (const auto& r : summary.results) {
    results.push_back({{"method", r.method},
                       {"budget", r.method == "fullkv" ? json(nullptr) : json(r.budget)},
                       {"budget_label", r.budget_label},
                       {"pass_at_1", r.pass_at_1},
                       {"relative_to_fullkv", r.relative_to_fullkv},
                       {"mean_generated_tokens", r.mean_generated_tokens},
                       {"samples", r.samples},
                       {"kv_bytes", r.kv_bytes}});
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %s | %.3f | %.3f | %.1f | %zu |\n", r.method.c_str(),
                  r.method == "fullkv"
                      ? "-"
                      : (std::to_string(r.budget) +
                         (r.budget_label.back() == '%' ? " (" + r.budget_label + ")" : ""))
                            .c_str(),
                  r.pass_at_1, r.relative_to_fullkv, r.mean_generated_tokens, r.samples);
    md += line;
    if (r.method == "fullkv") {
      full_pass = r.pass_at_1;
    } else {
      series[r.method].name = r.method;
      series[r.method].x.push_back(r.budget);
      series[r.method].y.push_back(r.pass_at_1);
      min_budget = std::min(min_budget, r.budget);
      max_budget = std::max(max_budget, r.budget);
    }
  }
  std::vector<PlotSeries> plot;
  if (full_pass >= 0 && max_budget > 0)
    plot.push_back({"fullkv", {double(min_budget), double(max_budget)}, {full_pass, full_pass}});
  for (auto& [name, s] : series) plot.push_back(s);
  // The summaries are derived from samples.jsonl and replaced whole: a kill leaves the old
  // version or the new one, and the next run rewrites them.
  const auto svg_tmp = o.out_dir / "accuracy.svg.tmp";
  write_line_plot(svg_tmp.string(), plot,
                  {"pass@1 against KV budget (" + dataset.name + ")", "KV budget (tokens per head)",
                   "pass@1", true, true});
  std::filesystem::rename(svg_tmp, o.out_dir / "accuracy.svg");
  write_file_atomic(o.out_dir / "summary.json", json{{"dataset", dataset.name},
                                                     {"samples_per_problem", o.samples},
                                                     {"problems", dataset.examples.size()},
                                                     {"results", results}}
                                                        .dump(2) +
                                                    "\n");
  write_file_atomic(o.out_dir / "summary.md", md);
  return summary;
}

}  // namespace rkv::eval
