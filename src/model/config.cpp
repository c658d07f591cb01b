#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rkv {

namespace {

using nlohmann::json;

int get_int(const json& j, const char* key, const std::string& source, int fallback,
            bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw Error(source + ": missing required field '" + key + "'");
    return fallback;
  }
  if (!it->is_number_integer()) {
    // A whole float (4096.0) counts. Its range is checked before converting it: converting a
    // double outside long long's range is undefined (found by fuzz/config.cpp with 5.2e25).
    if (!it->is_number() || it->get<double>() != std::floor(it->get<double>()))
      throw Error(source + ": field '" + key + "' must be an integer");
    const double d = it->get<double>();
    if (!(d >= 0.0 && d <= double((1LL << 31) - 1)))
      throw Error(source + ": field '" + key + "' is out of range");
    return static_cast<int>(d);
  }
  const long long v = it->get<long long>();
  if (v < 0 || v > (1LL << 31) - 1) throw Error(source + ": field '" + key + "' is out of range");
  return static_cast<int>(v);
}

float get_float(const json& j, const char* key, const std::string& source, float fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw Error(source + ": field '" + key + "' must be a number");
  return static_cast<float>(it->get<double>());
}

void add_ids(const json& v, std::vector<int>& out, const std::string& source, const char* key) {
  if (v.is_null()) return;
  if (v.is_number_integer()) {
    out.push_back(v.get<int>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) throw Error(source + ": '" + key + "' must hold integers");
      out.push_back(e.get<int>());
    }
  } else {
    throw Error(source + ": '" + key + "' must be an integer or a list of integers");
  }
}

json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace

std::string ModelConfig::arch_label() const {
  switch (arch) {
    case Architecture::Llama:
      return "llama";
    case Architecture::Qwen2:
      return "qwen2";
    case Architecture::Qwen3:
      return "qwen3";
    case Architecture::Qwen3Moe:
      return "qwen3moe";
    case Architecture::GptOss:
      return "gpt-oss";
    case Architecture::Qwen35:
      return "qwen35";
    case Architecture::Qwen35Moe:
      return "qwen35moe";
  }
  return "?";
}

namespace {
// Index of `layer` among the layers of `kind` (-1 when it is another kind), and their count.
int index_among(const ModelConfig& c, int layer, LayerKind kind) {
  if (c.layer_kind(layer) != kind) return -1;
  int i = 0;
  for (int l = 0; l < layer; ++l) i += c.layer_kind(l) == kind ? 1 : 0;
  return i;
}
int count_of(const ModelConfig& c, LayerKind kind) {
  int n = 0;
  for (int l = 0; l < c.num_layers; ++l) n += c.layer_kind(l) == kind ? 1 : 0;
  return n;
}
}  // namespace

int ModelConfig::kv_layer(int layer) const {
  return layer_kinds.empty() ? layer : index_among(*this, layer, LayerKind::Attention);
}
int ModelConfig::kv_layers() const {
  return layer_kinds.empty() ? num_layers : count_of(*this, LayerKind::Attention);
}
int ModelConfig::window_layer(int layer) const {
  return index_among(*this, layer, LayerKind::SlidingWindow);
}
int ModelConfig::window_layers() const {
  return count_of(*this, LayerKind::SlidingWindow);
}
int ModelConfig::delta_net_layer(int layer) const {
  return index_among(*this, layer, LayerKind::DeltaNet);
}
int ModelConfig::delta_net_layers() const {
  return count_of(*this, LayerKind::DeltaNet);
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  ModelConfig c;
  std::string arch_name;
  if (auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    arch_name = (*it)[0].get<std::string>();
  } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
    arch_name = mt->get<std::string>();
  } else {
    throw Error(source + ": missing 'architectures' (and 'model_type')");
  }
  c.architecture_name = arch_name;
  if (arch_name == "LlamaForCausalLM" || arch_name == "llama") {
    c.arch = Architecture::Llama;
  } else if (arch_name == "Qwen2ForCausalLM" || arch_name == "qwen2") {
    c.arch = Architecture::Qwen2;
  } else if (arch_name == "Qwen3ForCausalLM" || arch_name == "qwen3") {
    c.arch = Architecture::Qwen3;
  } else {
    throw Error(source + ": unsupported architecture '" + arch_name +
                "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  }
  if (auto act = j.find("hidden_act"); act != j.end() && act->is_string() && *act != "silu")
    throw Error(source + ": unsupported hidden_act '" + act->get<std::string>() + "' (only silu)");

  c.hidden_size = get_int(j, "hidden_size", source, 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", source, 0, true);
  c.num_layers = get_int(j, "num_hidden_layers", source, 0, true);
  c.num_heads = get_int(j, "num_attention_heads", source, 0, true);
  c.num_kv_heads = get_int(j, "num_key_value_heads", source, c.num_heads, false);
  c.vocab_size = get_int(j, "vocab_size", source, 0, true);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 32768, false);
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.vocab_size <= 0)
    throw Error(source +
                ": sizes (hidden, intermediate, layers, heads, kv heads, vocab) must be positive");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error(source + ": num_attention_heads (" + std::to_string(c.num_heads) +
                ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ")");
  const int default_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = get_int(j, "head_dim", source, default_head_dim, false);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    throw Error(source + ": head_dim must be a positive even number, got " +
                std::to_string(c.head_dim));
  c.rms_norm_eps = get_float(j, "rms_norm_eps", source, 1e-6f);
  c.rope_theta = get_float(j, "rope_theta", source, 10000.0f);
  if (c.rope_theta <= 0.0f) throw Error(source + ": rope_theta must be positive");
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && it->is_boolean())
    c.tie_word_embeddings = it->get<bool>();
  // Qwen2 always has q/k/v biases; Llama and Qwen3 only when attention_bias is true.
  c.attention_bias = c.arch == Architecture::Qwen2;
  if (auto it = j.find("attention_bias");
      it != j.end() && it->is_boolean() && c.arch != Architecture::Qwen2)
    c.attention_bias = it->get<bool>();
  c.qk_norm = c.arch == Architecture::Qwen3;

  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw Error(source + ": rope_scaling must be an object or null");
    std::string type;
    if (auto t = it->find("rope_type"); t != it->end() && t->is_string())
      type = *t;
    else if (auto t2 = it->find("type"); t2 != it->end() && t2->is_string())
      type = *t2;
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = get_float(*it, "factor", source, 8.0f);
      c.rope_scaling.low_freq_factor = get_float(*it, "low_freq_factor", source, 1.0f);
      c.rope_scaling.high_freq_factor = get_float(*it, "high_freq_factor", source, 4.0f);
      c.rope_scaling.original_max_position_embeddings =
          get_int(*it, "original_max_position_embeddings", source, 8192, false);
      if (c.rope_scaling.factor <= 0 ||
          c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor ||
          c.rope_scaling.original_max_position_embeddings <= 0)
        throw Error(source + ": invalid llama3 rope_scaling parameters");
    } else if (type != "default" && !type.empty()) {
      throw Error(source + ": unsupported rope_scaling type '" + type + "' (supported: llama3)");
    }
  }
  c.bos_token_id = get_int(j, "bos_token_id", source, -1, false);
  if (auto it = j.find("eos_token_id"); it != j.end())
    add_ids(*it, c.eos_token_ids, source, "eos_token_id");
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() + ": not a model directory (expected config.json and *.safetensors)");
  const auto config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) throw Error(config_path.string() + ": file not found");
  ModelConfig c = from_json(read_json_file(config_path), config_path.string());
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const json g = read_json_file(gen_path);
    if (g.is_object()) {
      if (auto it = g.find("eos_token_id"); it != g.end())
        add_ids(*it, c.eos_token_ids, gen_path.string(), "eos_token_id");
      if (c.bos_token_id < 0)
        c.bos_token_id = get_int(g, "bos_token_id", gen_path.string(), -1, false);
    }
  }
  std::sort(c.eos_token_ids.begin(), c.eos_token_ids.end());
  c.eos_token_ids.erase(std::unique(c.eos_token_ids.begin(), c.eos_token_ids.end()),
                        c.eos_token_ids.end());
  return c;
}

json ModelConfig::to_json() const {
  json j;
  j["architectures"] = json::array({architecture_name});
  j["model_type"] = arch_label();
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.llama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling.factor},
        {"low_freq_factor", rope_scaling.low_freq_factor},
        {"high_freq_factor", rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["hidden_act"] = "silu";
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
  j["torch_dtype"] = "bfloat16";
  return j;
}

}  // namespace rkv
