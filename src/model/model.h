// A decoder-only transformer of the Llama / Qwen2 / Qwen3 families and the mixture-of-experts and
// hybrid families (Qwen3 MoE, gpt-oss, Qwen3.5 dense and MoE: docs/ARCHITECTURES.md), loaded from
// a Hugging Face checkpoint directory or a GGUF file, with a batch-first forward pass over
// per-sequence KV caches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/forward_ops.h"
#include "model/safetensors.h"
#include "rkv/device.h"

namespace rkv {

// A mixture-of-experts FFN (ModelConfig::moe). The experts' matrices are stacked, expert e's
// rows at [e * rows_per_expert, (e + 1) * rows_per_expert) (expert()).
struct ExpertWeights {
  kernels::WeightView router;          // [experts][hidden]
  std::vector<float> router_bias;      // [experts] (gpt-oss)
  kernels::WeightView gate, up, down;  // [experts * ff][hidden], down [experts * hidden][ff]
  std::vector<float> gate_bias, up_bias, down_bias;         // [experts][ff], down [experts][hidden]
  kernels::WeightView shared_gate, shared_up, shared_down;  // shared expert (rows 0: none)
  std::vector<float> shared_router;                         // [hidden]: its sigmoid gate
};
// Expert e's matrix out of a stacked one.
kernels::WeightView expert_matrix(const kernels::WeightView& stacked, int experts, int e);

// A Gated DeltaNet layer's weights (ModelConfig::delta_net).
struct DeltaNetWeights {
  kernels::WeightView qkv;        // [conv_channels][hidden]: q (k_heads x dk), k, v (v_heads x dv)
  kernels::WeightView z;          // [v_heads * dv][hidden], the output gate
  kernels::WeightView beta;       // [v_heads][hidden]
  kernels::WeightView alpha;      // [v_heads][hidden]
  kernels::WeightView out;        // [hidden][v_heads * dv]
  std::vector<float> conv;        // [conv_channels][conv_kernel]; tap conv_kernel - 1 is the newest
  std::vector<float> dt_bias, a;  // [v_heads]; a = -exp(A_log)
  std::vector<float> norm;        // [dv]
};

struct LayerWeights {
  kernels::WeightView q, k, v, o, gate, up, down;  // [out][in], used in place
  kernels::WeightView q_gate;                      // [heads * head_dim][hidden] (Qwen3.5)
  std::vector<float> q_bias, k_bias, v_bias;       // Qwen2, gpt-oss (empty otherwise)
  std::vector<float> o_bias;                       // [hidden], gpt-oss
  std::vector<float> sinks;                        // [heads], gpt-oss
  std::vector<float> input_norm, post_norm;        // [hidden]
  std::vector<float> q_norm, k_norm;               // [head_dim], Qwen3 (empty otherwise)
  ExpertWeights moe;                               // MoE layers (ModelConfig::moe.experts > 0)
  DeltaNetWeights delta_net;                       // DeltaNet layers
};
// The matrix of one projection of a layer.
const kernels::WeightView& projection(const LayerWeights& w, Proj p);

// Scratch buffers of a forward pass, reused between calls to avoid allocation per token.
struct ForwardScratch {
  std::vector<float> x, xn, q, k, v, attn, q_gate, gate, up, rope_cos, rope_sin, logits_hidden;
  // Mixture of experts: router logits, each row's experts and weights, a batch of experts' rows,
  // the shared expert's products.
  std::vector<float> router, expert_in, expert_gate, expert_up, expert_out, moe_out;
  std::vector<float> shared_gate, shared_up, shared_out;
  std::vector<int> expert_ids;
  std::vector<float> expert_weights;
  // DeltaNet: the projections of the rows.
  std::vector<float> dn_qkv, dn_z, dn_beta, dn_alpha, dn_out;
};

class Model {
 public:
  // Loads config.json (+ generation_config.json) and the safetensors weights of `dir`, checking
  // every tensor's presence, shape and dtype (the Llama/Qwen2/Qwen3 classes and Qwen3 MoE,
  // gpt-oss with float or MXFP4 experts, Qwen3.5 dense and MoE, each converted once on load to
  // the layout the forward pass reads: docs/ARCHITECTURES.md). Throws rkv::Error naming the
  // file and tensor. A path to a .gguf file loads that file instead (model_load_gguf.cpp: llama,
  // qwen2, qwen3, qwen3moe, gpt-oss, qwen35, qwen35moe; F32/F16/BF16 and
  // Q8_0/Q4_0/Q5_0/Q4_K/Q6_K/MXFP4 weights).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir);

  const ModelConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Bytes of weights (as stored).
  std::size_t weight_bytes() const { return weight_bytes_; }
  // The matrices one token's forward pass multiplies (every layer's seven projections and the
  // output head; the embedding row and the norms aside): their parameters (a token costs twice
  // that in flops) and their bytes as stored (what a decode step streams from memory).
  // Parameters and stored bytes of every matrix product: all of them (a decode step reads each
  // once), and of the output head alone (a prefill pass runs it for the rows that want logits
  // only, so it is not part of the per-token work of prompt processing).
  struct MatmulFootprint {
    std::size_t params = 0;
    std::size_t bytes = 0;
    std::size_t head_params = 0;
  };
  MatmulFootprint matmul_footprint() const;

  // Runs the rows through the model (run_forward, on the model's device), appending their
  // keys/values to their caches. Writes the float32 logits of the rows with want_logits, in row
  // order, to `logits` ([n][vocab], host memory). On the CPU, `scratch` holds the activations and
  // `pool` runs the kernels; on a device both are unused, and the passes run one at a time.
  void forward(std::span<const ForwardRow> rows, ForwardScratch& scratch, ThreadPool& pool,
               float* logits) const;
  // The steps of a pass on the model's device, for a caller that drives the layers itself
  // (ForwardPass; the engine's model runner). On a device, the returned object holds the device
  // until it is destroyed.
  std::unique_ptr<ForwardOps> ops(ForwardScratch& scratch, ThreadPool& pool) const;

  // How activations meet the 16-bit weights in every matrix product (kernels::MatmulPrecision):
  // Exact after load; Rounded is llama.cpp's arithmetic (`--matmul-precision llamacpp`). Set it
  // before the first forward pass, not during one.
  void set_matmul_precision(kernels::MatmulPrecision precision);
  kernels::MatmulPrecision matmul_precision() const { return lm_head_.precision; }
  // The attention's arithmetic (kernels::AttentionPrecision): Exact after load; LlamaCpp is
  // llama.cpp's f16 flash attention (`--attention-precision llamacpp`). Set it before the first
  // forward pass, not during one.
  void set_attention_precision(kernels::AttentionPrecision precision) {
    attention_precision_ = precision;
  }
  kernels::AttentionPrecision attention_precision() const { return attention_precision_; }

  // Where forward runs: the CPU (after load), or a CUDA device (use_device(Device::Cuda) copies
  // the weights there). Throws rkv::Error when this build or machine has no CUDA device, the
  // weights' dtype has no CUDA kernels (quantized GGUF types: run with --device cpu), or the
  // device runs out of memory. Call it before the first forward pass, not during one; caches
  // made afterwards (cache_shape) live on the device.
  void use_device(Device device);
  Device device() const { return device_; }
  // One line on the device's memory: weights and workspace (empty on the CPU).
  std::string device_memory_report() const;
  // Bytes of the device's memory free now (0 on the CPU).
  std::size_t device_free_bytes() const;

  // The weights, as loaded (the backends read them from here).
  const LayerWeights& layer(int l) const { return layers_[static_cast<std::size_t>(l)]; }
  const kernels::WeightView& embed_tokens() const { return embed_tokens_; }
  const kernels::WeightView& lm_head() const { return lm_head_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  // [rotary_dim / 2] RoPE inverse frequencies, every scaling applied (angle = position *
  // inv_freq).
  const std::vector<float>& rope_frequencies() const { return inv_freq_; }
  // YaRN's magnitude factor on cos and sin (1 without YaRN).
  float rope_magnitude() const { return rope_mscale_; }
  // The rotation the CPU pass applies at `position`: for each frequency pair f, the cosine and
  // sine of the float32 angle float32(position) * inv_freq[f] (as HF computes it), each rounded to
  // float32 (and times rope_magnitude()). cos and sin hold rotary_dim / 2 values. (Calibration
  // inverts exactly these.)
  void rope_rotation(std::int32_t position, float* cos, float* sin) const;
  // The float32 embedding of a token (throws rkv::Error for an id outside the vocabulary).
  void embed(std::int32_t token, float* out) const;

  // The KV cache dtype used when none is given: bf16 for a checkpoint whose attention weights
  // are bf16 or f16, f32 for an f32 one (whose results it leaves exactly as they were).
  KvDtype default_kv_dtype() const;
  // A cache shaped for this model, storing keys and values in `dtype` (default_kv_dtype() when
  // none is given).
  KvCacheShape cache_shape(int capacity, int window,
                           std::optional<KvDtype> dtype = std::nullopt) const;

 private:
  Model() = default;
  static std::unique_ptr<Model> load_gguf(const std::filesystem::path& path);

  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<TensorStore> store_;
  // GGUF: the mapped file and the weights re-ordered on load (Q/K rows), kept alive here.
  std::vector<std::shared_ptr<const void>> keep_alive_;
  kernels::WeightView embed_tokens_;
  kernels::WeightView lm_head_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2], llama3 or YaRN scaling applied
  float rope_mscale_ = 1.0f;
  // GGUF files: llama.cpp's rope_freqs.weight, one divisor per frequency (Llama-3.1's scaling as
  // its converter stores it); empty when the file has none.
  std::vector<float> rope_freq_divisors_;
  std::size_t weight_bytes_ = 0;
  kernels::AttentionPrecision attention_precision_ = kernels::AttentionPrecision::Exact;
  Device device_ = Device::Cpu;
  std::unique_ptr<ForwardOps> device_ops_;  // the device's steps (null on the CPU)
  mutable std::mutex device_mutex_;
};

}  // namespace rkv
