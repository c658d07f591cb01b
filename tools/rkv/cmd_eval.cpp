// rkv eval: pass@1 against KV budget on a reasoning benchmark, through the batch engine.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "engine/batch_engine.h"
#include "eval/runner.h"
#include "kv_options.h"
#include "model/model.h"
#include "rkv/tokenizer.h"
#include "steering_options.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model, tokenizer, dataset, preset, question_field, answer_field;
  std::string matmul_precision;
  std::string device;  // --device
  std::string attention_precision;
  std::size_t limit = 0;
  int samples = 1;
  long long seed = 0;
  std::string methods = "fullkv";
  std::string budgets;
  float temperature = 0.6f;
  float top_p = 0.95f;
  int top_k = 0;
  int max_new = 0;
  std::string chat_template, chat_template_file, prompt_template, kv_memory, out, trace_dir, replay;
  int max_batch = 0;
  int threads = 1;
  std::shared_ptr<KvOptions> kv = std::make_shared<KvOptions>();
  std::shared_ptr<SteeringArgs> steering = std::make_shared<SteeringArgs>();
};

// --replay FILE: JSON lines {"example_id", "sample", "ids"}, the output ids each (problem,
// sample) writes instead of sampling.
std::map<std::pair<std::string, int>, std::vector<int>> read_replay(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the replay file");
  std::map<std::pair<std::string, int>, std::vector<int>> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    try {
      const auto r = nlohmann::json::parse(line);
      auto ids = r.at("ids").get<std::vector<int>>();
      if (ids.empty()) throw Error("no ids");
      if (!out.emplace(
                  std::make_pair(r.at("example_id").get<std::string>(), r.at("sample").get<int>()),
                  std::move(ids))
               .second)
        throw Error("a second entry for the same example and sample");
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + "not a replay line {\"example_id\", \"sample\", \"ids\"}: " + e.what());
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  }
  if (out.empty()) throw Error(path + ": no replay lines");
  return out;
}

void run(const Args& a) {
  eval::DatasetOptions dataset_options;
  dataset_options.preset = a.preset;
  dataset_options.question_field = a.question_field;
  dataset_options.answer_field = a.answer_field;
  dataset_options.limit = a.limit;
  const eval::Dataset dataset = eval::load_dataset(a.dataset, dataset_options);
  if (dataset.examples.empty()) throw Error(a.dataset + ": no examples");

  eval::RunnerOptions o;
  o.methods = split_list(a.methods);
  o.budgets = eval::parse_budget_specs(a.budgets);
  for (const auto& [name, value] : a.kv->values) {
    if (name == "method") throw Error("use --methods (a list) with rkv eval, not --kv-method");
    if (name == "budget") throw Error("use --budgets (a list) with rkv eval, not --kv-budget");
    o.kv_settings.emplace_back(name, value);
  }
  o.samples = a.samples;
  o.seed = static_cast<std::uint64_t>(a.seed);
  o.temperature = a.temperature;
  o.top_p = a.top_p;
  o.top_k = a.top_k;
  o.max_new_tokens = a.max_new;
  o.chat_template = a.chat_template;
  if (!a.chat_template_file.empty()) {
    o.chat_template_text =
        read_file(a.chat_template_file, "the file given with --chat-template-file");
    o.chat_template_origin = "the chat template " + a.chat_template_file;
  }
  if (!a.prompt_template.empty())
    o.prompt_template = eval::load_prompt_template(a.prompt_template);
  else if (!dataset.prompt_template.empty())
    o.prompt_template = dataset.prompt_template;
  o.kv_memory_bytes = a.kv_memory.empty() ? 0 : parse_byte_size(a.kv_memory);
  o.kv_dtype = a.kv->kv_dtype();
  o.max_batch = a.max_batch;
  o.out_dir = a.out;
  o.trace_dir = a.trace_dir;
  if (!a.replay.empty()) o.replay = read_replay(a.replay);

  DeviceNeeds needs;
  needs.compressing_methods = compressing_methods(o.methods);
  needs.steering = !a.steering->path.empty();
  needs.kv_dtype = o.kv_dtype;
  auto model = load_model(a.model, a.matmul_precision, a.attention_precision, a.device, needs);
  const Tokenizer tokenizer = Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer);
  o.steering = a.steering->load(*model);
  o.query_stats = a.kv->load_query_stats(a.model, *model, needs_query_stats(o.methods));
  ThreadPool pool(a.threads);
  std::fprintf(
      stderr, "[eval] %s: %zu problems x %d samples, methods %s, budgets %s, up to %d new tokens\n",
      dataset.name.c_str(), dataset.examples.size(), a.samples, a.methods.c_str(),
      a.budgets.empty() ? "-" : a.budgets.c_str(), a.max_new > 0 ? a.max_new : dataset.max_length);
  const auto summary = eval::run_eval(*model, tokenizer, dataset, o, pool);
  std::printf(
      "| method | budget | pass@1 | relative to fullkv | mean generated tokens | samples "
      "|\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& r : summary.results)
    std::printf("| %s | %s | %.3f | %.3f | %.1f | %zu |\n", r.method.c_str(),
                r.method == "fullkv" ? "-" : std::to_string(r.budget).c_str(), r.pass_at_1,
                r.relative_to_fullkv, r.mean_generated_tokens, r.samples);
  std::fprintf(stderr,
               "[eval] %zu samples generated now, %zu resumed; wrote "
               "%s/{samples.jsonl,summary.json,summary.md,accuracy.svg}\n",
               summary.generated_now, summary.resumed, a.out.c_str());
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_model_options(app, a->model, a->tokenizer);
  add_flag_option(app, "--dataset", a->dataset,
                  "Dataset jsonl file (e.g. ../shared/data/math500.jsonl)")
      ->required();
  add_flag_option(app, "--preset", a->preset,
                  "Dataset preset: math500, aime24, gsm8k, chains (the tiny model's task) or "
                  "redundant (the second tiny model's, with redundant thoughts): "
                  "fields, answer style, default length and prompt; default: none, the fields "
                  "below and the R-KV prompt");
  add_flag_option(app, "--question-field", a->question_field,
                  "Field holding the question (overrides the preset)");
  add_flag_option(app, "--answer-field", a->answer_field,
                  "Field holding the gold answer (overrides the preset)");
  add_flag_option(app, "--limit", a->limit, "Use only the first N problems (0: all)");
  add_flag_option(app, "--samples", a->samples,
                  "Samples per problem (pass@1 is averaged over them)")
      ->check(at_least(1));
  add_flag_option(app, "-s,--seed", a->seed,
                  "Base seed; every (problem, sample) gets its own, shared by all methods");
  add_flag_option(app, "--methods", a->methods,
                  "Compression methods, comma-separated (fullkv,rkv,snapkv,...)");
  add_flag_option(app, "--budgets", a->budgets,
                  "Budgets for the compressed methods: tokens (256,512) or shares of the mean "
                  "fullkv length (10%)");
  add_flag_option(app, "--temp,--temperature", a->temperature, "Sampling temperature (0: greedy)");
  add_flag_option(app, "--top-p", a->top_p, "Nucleus sampling mass");
  add_flag_option(app, "--top-k", a->top_k, "Top-k sampling (0: off)");
  add_flag_option(
      app, "-n,--max-new-tokens", a->max_new,
      "Maximum generated tokens (0: the dataset's default: MATH-500 8192, AIME 16384, GSM8K "
      "8192, chains and redundant 1024)");
  add_chat_template_options(app, a->chat_template, a->chat_template_file);
  add_flag_option(app, "--prompt-template", a->prompt_template,
                  "File with the prompt text, {question} marks the problem (default: the preset's, "
                  "else the R-KV evaluation prompt)");
  add_flag_option(app, "--kv-memory", a->kv_memory,
                  "KV memory cap for all running sequences, e.g. 4GiB (default: none)");
  add_flag_option(app, "--max-batch", a->max_batch,
                  "Most sequences running at once (0: as many as the cap allows)");
  add_flag_option(app, "-o,--out", a->out,
                  "Output directory (resumes when it already holds samples.jsonl)")
      ->required();
  add_flag_option(app, "--trace-dir", a->trace_dir,
                  "Write every sample's compression trace (its token ids and, per compression and "
                  "KV head, the kept positions: the attention masks of G-KV's post-training) to "
                  "DIR/METHOD-BUDGET/EXAMPLE-sSAMPLE.jsonl; each record names its file "
                  "(\"trace\"; docs/USAGE.md)");
  add_flag_option(app, "--replay", a->replay,
                  "Write given outputs instead of sampling: a JSON-lines file of {\"example_id\", "
                  "\"sample\", \"ids\"}, one per (problem, sample) run, compressing and tracing "
                  "as a generation would (G-KV's Distill: a full-cache model's samples under "
                  "eviction; docs/USAGE.md)");
  add_precision_options(app, a->matmul_precision, a->attention_precision);
  add_device_option(app, a->device);
  add_threads_option(app, a->threads);
  add_kv_options(app, a->kv);
  add_steering_options(app, a->steering);
  app.callback([a] { run(*a); });
}

const RegisterCommand reg(
    "eval", "Accuracy (pass@1) against KV budget on a math reasoning dataset, resumable", setup);

}  // namespace
}  // namespace rkv::cli
