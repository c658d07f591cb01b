// rkv steer-calibrate: computes SkipKV's steering vector (ALGORITHMS.md 5) for one model. It
// generates a reasoning trace for every calibration prompt, splits each trace into thoughts at
// "\n\n", labels them execution / reflection / transition, reads the layer-k hidden state at
// each thought's delimiter token and writes v = mean(execution) - mean(non-execution) to a
// safetensors file that records the layer and the model it belongs to.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/compression_vocab.h"
#include "engine/steering.h"
#include "kv_options.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model;
  std::string tokenizer;
  std::string dataset;
  std::string out;
  std::string thoughts_out;
  int layer = -1;
  int limit = 0;
  int n_predict = 2048;
  float temperature = 0.6f;
  float top_p = 0.95f;
  long long seed = 0;
  std::string kv_dtype;
  std::string chat_template, chat_template_file;
  std::string suffix = "\nPlease reason step by step, and put your final answer within \\boxed{}.";
  int threads = 1;
};

// JSON lines with a "problem" or "question" field, or plain text with one prompt per line.
std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the calibration dataset");
  std::vector<std::string> prompts;
  std::string line;
  int line_no = 0;
  bool json_lines = false;
  bool decided = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (!decided) {
      json_lines = line[line.find_first_not_of(" \t")] == '{';
      decided = true;
    }
    if (!json_lines) {
      prompts.push_back(line);
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": not a JSON object (" + e.what() + ")");
    }
    const char* field = j.is_object() && j.contains("problem")    ? "problem"
                        : j.is_object() && j.contains("question") ? "question"
                                                                  : nullptr;
    if (field == nullptr || !j[field].is_string())
      throw Error(path + ":" + std::to_string(line_no) +
                  ": needs a string field \"problem\" or \"question\"");
    prompts.push_back(j[field].get<std::string>());
  }
  if (prompts.empty()) throw Error(path + ": the calibration dataset has no prompts");
  return prompts;
}

void run(const Args& a) {
  auto model = Model::load(a.model);
  const ModelConfig& c = model->config();
  const Tokenizer tokenizer = Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer);
  const int layer = a.layer >= 0 ? a.layer : default_steering_layer(c.num_layers);
  std::vector<std::string> prompts = read_prompts(a.dataset);
  if (a.limit > 0 && static_cast<std::size_t>(a.limit) < prompts.size())
    prompts.resize(static_cast<std::size_t>(a.limit));
  const CompressionVocab vocab = compression_vocab(tokenizer);

  std::unique_ptr<std::ofstream> thoughts_file;
  if (!a.thoughts_out.empty()) {
    thoughts_file = std::make_unique<std::ofstream>(a.thoughts_out, std::ios::binary);
    if (!*thoughts_file) throw Error(a.thoughts_out + ": cannot write");
  }

  ThreadPool pool(a.threads);
  EngineOptions engine_options;
  apply_chat_template_options(engine_options, a.chat_template, a.chat_template_file);
  if (!a.kv_dtype.empty()) engine_options.kv_dtype = parse_kv_dtype(a.kv_dtype);
  Engine engine(*model, &tokenizer, pool, engine_options);
  SteeringCalibration calibration(*model, layer, model_fingerprint(model->dir(), c),
                                  engine_options.kv_dtype);
  std::fprintf(stderr, "[rkv] steer-calibrate: %zu prompts, layer %d of %d\n", prompts.size(),
               layer, c.num_layers);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Request request;
    request.messages = {{"user", prompts[i] + a.suffix}};
    request.max_new_tokens = a.n_predict;
    request.sampling.temperature = a.temperature;
    request.sampling.top_p = a.top_p;
    request.sampling.seed = static_cast<std::uint64_t>(a.seed) + i;
    request.decode_text = false;
    PreparedRequest prepared = engine.prepare(std::move(request));
    const std::vector<int> prompt = prepared.prompt;
    engine.submit(std::move(prepared));
    engine.run_until_idle();
    const Completion done = engine.take_completions().at(0);
    const std::vector<int>& output = done.tokens;
    const std::vector<Thought> thoughts =
        calibration.add_sample(prompt, output, vocab.token_text, vocab.think_end_id, pool);
    int counts[3] = {0, 0, 0};
    for (const Thought& t : thoughts) {
      ++counts[static_cast<int>(t.label)];
      if (thoughts_file) {
        *thoughts_file << nlohmann::json{{"prompt", i},
                                         {"label", thought_label_name(t.label)},
                                         {"text", t.text}}
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                       << "\n";
      }
    }
    std::fprintf(stderr,
                 "[rkv] prompt %zu/%zu: %d tokens (%s), %zu thoughts: %d execution, %d reflection, "
                 "%d transition\n",
                 i + 1, prompts.size(), static_cast<int>(output.size()), done.stop_reason.c_str(),
                 thoughts.size(), counts[0], counts[1], counts[2]);
  }
  SteeringVector v = calibration.finish();
  v.extra["dataset"] = std::filesystem::path(a.dataset).filename().string();
  v.extra["prompts"] = std::to_string(prompts.size());
  v.extra["max_new_tokens"] = std::to_string(a.n_predict);
  save_steering_vector(a.out, v);
  double norm = 0.0;
  for (float x : v.values) norm += static_cast<double>(x) * x;
  std::fprintf(stderr,
               "[rkv] wrote %s: layer %d, hidden %d, |v| = %.4g, from %d execution and %d "
               "non-execution thoughts\n",
               a.out.c_str(), v.layer, v.hidden_size(), std::sqrt(norm),
               calibration.execution_count(), calibration.non_execution_count());
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_model_options(app, a->model, a->tokenizer);
  add_flag_option(app, "--dataset", a->dataset,
                  "Calibration prompts: JSON lines with a \"problem\" or \"question\" field, or "
                  "plain text with one prompt per line")
      ->required();
  add_flag_option(app, "--layer", a->layer,
                  "Decoder layer k (0-based) whose output the vector steers (-1: 20 for 28-32 "
                  "layers, 35 for 48, scaled by depth otherwise)");
  add_flag_option(app, "-o,--out", a->out, "Where to write the steering vector (.safetensors)")
      ->required();
  add_flag_option(app, "--thoughts", a->thoughts_out,
                  "Also write every labelled thought as a JSON line to this file");
  add_flag_option(app, "--limit", a->limit, "Use only the first N prompts (0: all)")
      ->check(at_least(0));
  add_flag_option(app, "-n,--predict,--max-new-tokens", a->n_predict,
                  "Maximum tokens generated per prompt")
      ->check(at_least(1));
  add_flag_option(app, "--temp,--temperature", a->temperature, "Sampling temperature");
  add_flag_option(app, "--top-p", a->top_p, "Nucleus sampling mass");
  add_flag_option(app, "-s,--seed", a->seed, "Random seed of the first prompt (then +1 per prompt)")
      ->check(at_least(0));
  add_chat_template_options(app, a->chat_template, a->chat_template_file);
  add_flag_option(app, "--prompt-suffix", a->suffix, "Text appended to every prompt");
  add_kv_dtype_option(app, a->kv_dtype);
  add_threads_option(app, a->threads);
  app.callback([a] { run(*a); });
}

const RegisterCommand reg("steer-calibrate",
                          "Compute a SkipKV steering vector for a model from calibration prompts",
                          setup);

}  // namespace
}  // namespace rkv::cli
