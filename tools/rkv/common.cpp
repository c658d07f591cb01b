#include "common.h"

#include <cstdio>

#include "core/error.h"
#include "core/record_log.h"
#include "core/thread_pool.h"
#include "rkv/compression.h"
#include "rkv/device.h"

namespace rkv::cli {

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) {
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || v < -2147483648LL || v > 2147483647LL)
        throw Error(what + ": '" + item + "' is not an integer");
      out.push_back(static_cast<int>(v));
    }
    i = j + 1;
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= text.size()) {
    std::size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string int_list_json(const std::vector<int>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(values[i]);
  }
  s += ']';
  return s;
}

CLI::Validator at_least(long long min) {
  const std::string what = "an integer >= " + std::to_string(min);
  return CLI::Validator(
      [min, what](std::string& text) -> std::string {
        std::size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "must be " + what + ", got '" + text + "'";
        if (v < min) return "must be " + what + ", got " + text;
        return std::string();
      },
      min == 1   ? "POSITIVE"
      : min == 0 ? "NONNEGATIVE"
                 : ">= " + std::to_string(min));
}

void add_threads_option(CLI::App& app, int& threads) {
  threads = default_thread_count();
  add_flag_option(app, "-t,--threads", threads,
                  "Number of CPU threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
}

void add_model_options(CLI::App& app, std::string& model, std::string& tokenizer) {
  add_flag_option(
      app, "-m,--model", model,
      "Model directory (config.json, *.safetensors and tokenizer files) or a .gguf file "
      "(F32/F16/BF16 weights and its vocabulary)")
      ->required();
  add_flag_option(app, "--tokenizer", tokenizer,
                  "Tokenizer directory or .gguf file (default: the model)");
}

void add_precision_options(CLI::App& app, std::string& matmul, std::string& attention) {
  matmul = "exact";
  attention = "exact";
  add_flag_option(app, "--matmul-precision", matmul,
                  "How activations meet bf16/f16 weights in the matrix products: exact (as "
                  "float32, within the golden checkpoints' f32 tolerance) or llamacpp (rounded "
                  "to the weights' 16-bit type first, as llama.cpp's CPU backend does; logits move "
                  "by up to a few 1e-2, docs/USAGE.md). f32 weights are unaffected; quantized "
                  "weights keep their arithmetic, summed in llama.cpp's order (no AMX tiles)")
      ->check(CLI::IsMember({"exact", "llamacpp"}));
  add_flag_option(app, "--attention-precision", attention,
                  "The attention's arithmetic: exact (float32) or llamacpp (llama.cpp's CPU flash "
                  "attention: queries, keys and values rounded to f16 and the weighted sum of the "
                  "values kept in f16; for comparing with llama.cpp, portable and slow, "
                  "docs/USAGE.md)")
      ->check(CLI::IsMember({"exact", "llamacpp"}));
}

void add_device_option(CLI::App& app, std::string& device) {
  device = "auto";
  add_flag_option(app, "--device", device,
                  "Where the forward pass runs: cpu, cuda (the CUDA backend: weights, activations "
                  "and KV caches in GPU memory; fullkv only for now, docs/GPU.md) or auto (cuda "
                  "when rkv was built with it, a GPU is visible and the backend runs what was "
                  "asked: fullkv, no steering, no q8_0 cache; else cpu; with a GPU visible, a "
                  "line on stderr says which it chose and why)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
}

std::unique_ptr<Model> load_model(const std::string& path, const std::string& matmul_precision,
                                  const std::string& attention_precision, const std::string& device,
                                  DeviceNeeds needs) {
  // The device first: asking for one that cannot run fails before the weights are read.
  const std::optional<Device> requested = parse_device(device);
  needs.llamacpp_attention = attention_precision == "llamacpp";
  const DeviceChoice choice = choose_device(requested, needs);
  auto model = Model::load(path);
  model->set_matmul_precision(kernels::parse_matmul_precision(matmul_precision));
  model->set_attention_precision(kernels::parse_attention_precision(attention_precision));
  if (choice.device != Device::Cpu) {
    try {
      model->use_device(choice.device);
    } catch (const Error& e) {
      if (requested) throw;
      std::fprintf(stderr, "rkv: device: cpu (auto: the CUDA backend cannot take this model: %s)\n",
                   e.what());
      return model;
    }
  }
  if (!choice.note.empty()) std::fprintf(stderr, "rkv: %s\n", choice.note.c_str());
  if (choice.device != Device::Cpu)
    std::fprintf(stderr, "rkv: running on %s (%s): %s\n",
                 std::string(device_name(choice.device)).c_str(), cuda_summary().c_str(),
                 model->device_memory_report().c_str());
  return model;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

void add_chat_template_options(CLI::App& app, std::string& name, std::string& file) {
  CLI::Option* named = add_flag_option(
      app, "--chat-template", name,
      "Render chat with a built-in template instead of the model's own: raw (the messages' "
      "contents joined by newlines), chatml, qwen3, qwen3-nothink, deepseek-r1 or llama3 "
      "(default: the model's Jinja chat template)");
  CLI::Option* from_file =
      add_flag_option(app, "--chat-template-file", file,
                      "Render chat with this Jinja chat template instead of the model's own");
  from_file->type_name("FILE");
  named->excludes(from_file);
}

void apply_chat_template_options(EngineOptions& options, const std::string& name,
                                 const std::string& file) {
  options.chat_template = name;
  if (!file.empty()) {
    options.chat_template_text = read_file(file, "the file given with --chat-template-file");
    options.chat_template_origin = "the chat template " + file;
  }
}

std::vector<std::string> compressing_methods(const std::vector<std::string>& methods) {
  std::vector<std::string> out;
  for (const std::string& name : methods)
    if (method_info(name).compresses) out.push_back(name);
  return out;
}

}  // namespace rkv::cli
