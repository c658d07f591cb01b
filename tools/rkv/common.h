// Helpers shared by the subcommands: flags that several commands take, and small parsers.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "rkv/device.h"
#include "rkv/engine.h"

namespace rkv::cli {

// Adds an option whose value can also come from the environment variable RKV_ARG_<NAME>
// (the long name upper-cased, dashes as underscores), e.g. --threads and RKV_ARG_THREADS.
template <typename T>
CLI::Option* add_flag_option(CLI::App& app, const std::string& names, T& value,
                             const std::string& help) {
  CLI::Option* opt = app.add_option(names, value, help)->capture_default_str();
  std::string env = opt->get_name(false, true);  // the long name without dashes
  while (!env.empty() && env.front() == '-') env.erase(env.begin());
  for (char& ch : env)
    ch = ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  opt->envname("RKV_ARG_" + env);
  return opt;
}

// Checks that an option's value is an integer of at least `min`, with a plain message ("must be an
// integer >= 1, got 0"); CLI::PositiveNumber's names a range up to 1.8e308.
CLI::Validator at_least(long long min);

// "1,2,3" -> {1,2,3}; throws rkv::Error naming `what` on anything else.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

// "a,b,,c" -> {"a","b","c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& text);

// Prints a JSON list of ints on one line: [1,2,3]
std::string int_list_json(const std::vector<int>& values);

// -t/--threads with the default of all hardware threads.
void add_threads_option(CLI::App& app, int& threads);

// -m/--model (required) and --tokenizer (default: the model directory).
void add_model_options(CLI::App& app, std::string& model, std::string& tokenizer);

// --matmul-precision exact|llamacpp (RKV_ARG_MATMUL_PRECISION; kernels::MatmulPrecision) and
// --attention-precision exact|llamacpp (RKV_ARG_ATTENTION_PRECISION; kernels::AttentionPrecision)
// into `matmul` and `attention`, which start as "exact".
void add_precision_options(CLI::App& app, std::string& matmul, std::string& attention);

// --device cpu|cuda|auto (RKV_ARG_DEVICE; rkv/device.h) into `device`, which starts as "auto".
void add_device_option(CLI::App& app, std::string& device);

// Model::load(path) with --matmul-precision and --attention-precision values applied, moved to
// --device's device (a line on stderr says which GPU and what its memory holds). `needs` is what
// the run asks of the device (its methods, steering, KV dtype; the attention precision is added
// here): --device auto picks the GPU only when its backend runs all of it, and, where a GPU is
// visible, says on stderr which device it chose and why; when the backend then refuses the model
// itself (quantized GGUF weights, a head size it has no kernels for, too little memory), auto runs
// on the CPU and says so.
std::unique_ptr<Model> load_model(const std::string& path, const std::string& matmul_precision,
                                  const std::string& attention_precision, const std::string& device,
                                  DeviceNeeds needs = {});

// The names among `methods` whose records say they compress (DeviceNeeds::compressing_methods).
std::vector<std::string> compressing_methods(const std::vector<std::string>& methods);

// --chat-template NAME and --chat-template-file FILE (exclusive): how chat messages are rendered.
// Neither: the model's own Jinja template (include/rkv/chat_template.h).
void add_chat_template_options(CLI::App& app, std::string& name, std::string& file);
// Puts them into an engine's options, reading the file (rkv::Error when it cannot be read).
void apply_chat_template_options(EngineOptions& options, const std::string& name,
                                 const std::string& file);

// Human-readable byte count: "12.5 MiB".
std::string format_bytes(double bytes);

}  // namespace rkv::cli
