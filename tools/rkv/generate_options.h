// The generation flags that `rkv generate` takes and `rkv serve` takes as its defaults for
// every request: length, sampling, stops, context, chat template, --kv-* and steering. One
// definition, so the two commands cannot drift apart.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "kv_options.h"
#include "rkv/sampling.h"
#include "steering_options.h"

namespace rkv::cli {

struct GenerateFlags {
  int n_predict = 256;
  float temperature = 0.6f;
  int top_k = 0;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repeat_penalty = 1.0f;
  int thinking_budget = -1;
  std::string thinking_budget_message;
  long long seed = -1;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  int ctx_size = 0;
  std::string chat_template;
  std::string chat_template_file;
  std::shared_ptr<KvOptions> kv = std::make_shared<KvOptions>();
  std::shared_ptr<SteeringArgs> steering = std::make_shared<SteeringArgs>();

  // The sampling flags; the seed is the given one, or a random one when -s is -1.
  SamplingParams sampling() const;
};

// `n_predict_help` says what -n means for the command.
void add_generate_options(CLI::App& app, const std::shared_ptr<GenerateFlags>& flags,
                          const std::string& n_predict_help);

}  // namespace rkv::cli
