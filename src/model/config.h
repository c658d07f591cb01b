// The model hyper-parameters, read from a Hugging Face config.json (+ generation_config.json) or a
// GGUF file's metadata (model_load_gguf.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace rkv {

enum class Architecture { Llama, Qwen2, Qwen3, Qwen3Moe, GptOss, Qwen35, Qwen35Moe };

// What a layer mixes its tokens with (docs/ARCHITECTURES.md):
//  * Attention: causal attention over the sequence's KV cache, the layers compression works on;
//  * SlidingWindow: attention over the last ModelConfig::sliding_window tokens only, held in a
//    ring of that size per sequence (gpt-oss's even layers; never compressed: they never grow);
//  * DeltaNet: Gated DeltaNet linear attention, a constant-size recurrent state per sequence
//    (three of every four Qwen3.5 layers).
enum class LayerKind : std::uint8_t { Attention, SlidingWindow, DeltaNet };

// The feed-forward block of a mixture-of-experts layer.
struct MoeConfig {
  int experts = 0;       // 0: a dense SwiGLU FFN of intermediate_size
  int experts_used = 0;  // top-k
  int expert_ff = 0;     // each expert's intermediate size
  int shared_ff = 0;     // a gated shared expert's intermediate size (Qwen3.5 MoE), or 0
  // SoftmaxTopK (Qwen): p = softmax over all experts, the top k by p, weights p / sum(p_topk).
  // TopKSoftmax (gpt-oss): the top k by router logit, weights softmax over those k; experts with
  // biases and the clamped SwiGLU g * sigmoid(1.702 g) * (u + 1), g <= 7, |u| <= 7.
  enum class Routing : std::uint8_t { SoftmaxTopK, TopKSoftmax } routing = Routing::SoftmaxTopK;
};

// Gated DeltaNet (Qwen3.5's linear attention) shapes.
struct DeltaNetConfig {
  int k_heads = 0;      // q/k heads (ssm.group_count; HF linear_num_key_heads)
  int v_heads = 0;      // v heads (ssm.time_step_rank; HF linear_num_value_heads)
  int head_k_dim = 0;   // ssm.state_size
  int head_v_dim = 0;   // ssm.inner_size / v_heads
  int conv_kernel = 0;  // ssm.conv_kernel
  int conv_channels() const { return 2 * k_heads * head_k_dim + v_heads * head_v_dim; }
  // Floats of one layer's per-sequence state: the conv window (conv_kernel - 1 inputs of every
  // channel) and the [v_heads][head_v_dim][head_k_dim] recurrent state.
  std::size_t state_floats() const {
    return static_cast<std::size_t>(conv_kernel - 1) * static_cast<std::size_t>(conv_channels()) +
           static_cast<std::size_t>(v_heads) * static_cast<std::size_t>(head_v_dim) *
               static_cast<std::size_t>(head_k_dim);
  }
};

struct RopeScaling {
  // Llama-3.1's "llama3" scheme (DeepSeek-R1-Distill-Llama) or YaRN (gpt-oss).
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
  bool yarn = false;        // YaRN (factor and original context above)
  float beta_fast = 32.0f;  // YaRN's correction range
  float beta_slow = 1.0f;
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
  bool attention_bias = false;   // q/k/v biases (Qwen2 always has them)
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE (Qwen3)
  int rope_dim = 0;              // dimensions RoPE rotates, the first of each head (<= head_dim)
  bool attention_sinks = false;  // a learnt logit per head in the softmax denominator (gpt-oss)
  bool output_bias = false;      // o_proj bias (gpt-oss)
  bool attention_gate = false;   // out = o_proj(attn * sigmoid(gate)), gate from q_proj (Qwen3.5)
  int sliding_window = 0;        // keys a SlidingWindow layer sees, its own included
  MoeConfig moe;
  DeltaNetConfig delta_net;
  // One per layer; empty means every layer is Attention.
  std::vector<LayerKind> layer_kinds;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;  // config.json's plus generation_config.json's

  int group_size() const { return num_heads / num_kv_heads; }
  std::string arch_label() const;  // "llama", "qwen2", "qwen3", "qwen3moe", "gpt-oss", ...
  LayerKind layer_kind(int layer) const {
    return layer_kinds.empty() ? LayerKind::Attention
                               : layer_kinds[static_cast<std::size_t>(layer)];
  }
  // Whether the model is a Llama/Qwen2/Qwen3 dense transformer with every layer Attention (what
  // the CUDA backend and TriAttention's calibration run).
  bool is_dense_transformer() const {
    return arch == Architecture::Llama || arch == Architecture::Qwen2 ||
           arch == Architecture::Qwen3;
  }
  // The KV cache holds the Attention layers only: layer l's index among them (its cache layer),
  // or -1 for a SlidingWindow or DeltaNet layer. Every layer's own index for a dense model.
  int kv_layer(int layer) const;
  int kv_layers() const;              // how many Attention layers
  int window_layer(int layer) const;  // index among SlidingWindow layers, or -1
  int window_layers() const;
  int delta_net_layer(int layer) const;  // index among DeltaNet layers, or -1
  int delta_net_layers() const;
  int rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  // Qwen3.5's multimodal RoPE sections over the rotary pairs, in its published proportions (11, 11
  // and 10 of 32 pairs). A text token has the same position in each, so they are plain RoPE; the
  // checkpoints rkv writes carry them as Qwen3.5's do.
  std::array<int, 3> mrope_sections() const {
    const int pairs = rotary_dim() / 2, a = (pairs * 11 + 16) / 32;
    return {a, a, pairs - 2 * a};
  }

  // Parses and validates; every problem is an rkv::Error naming `source` and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // Reads dir/config.json and, when present, dir/generation_config.json (eos list).
  static ModelConfig load(const std::filesystem::path& dir);
  nlohmann::json to_json() const;
};

}  // namespace rkv
