// The model hyper-parameters, read from a Hugging Face config.json (+ generation_config.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace rkv {

enum class Architecture { Llama, Qwen2, Qwen3 };

struct RopeScaling {
  // Only Llama-3.1's "llama3" scheme is supported (DeepSeek-R1-Distill-Llama uses it).
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;  // config.json's plus generation_config.json's

  int group_size() const { return num_heads / num_kv_heads; }
  std::string arch_label() const;  // "llama", "qwen2", "qwen3"

  // Parses and validates; every problem is an rkv::Error naming `source` and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // Reads dir/config.json and, when present, dir/generation_config.json (eos list).
  static ModelConfig load(const std::filesystem::path& dir);
  nlohmann::json to_json() const;
};

}  // namespace rkv
