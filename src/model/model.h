// A decoder-only transformer of the Llama / Qwen2 / Qwen3 families, loaded from a Hugging Face
// checkpoint directory or a GGUF file, with a batch-first forward pass over per-sequence KV
// caches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace rkv {

struct LayerWeights {
  kernels::WeightView q, k, v, o, gate, up, down;  // [out][in], used in place
  std::vector<float> q_bias, k_bias, v_bias;       // Qwen2 (empty otherwise)
  std::vector<float> input_norm, post_norm;        // [hidden]
  std::vector<float> q_norm, k_norm;               // [head_dim], Qwen3 (empty otherwise)
};

// One token of one sequence in a forward pass. Rows of the same sequence must be consecutive,
// with increasing positions; each row attends to everything its cache holds before it plus the
// earlier rows of its own sequence in this pass (causal). `position` is the token's true
// position in its sequence (never the cache length: ALGORITHMS.md 1.4).
struct ForwardRow {
  KvCache* cache = nullptr;
  std::int32_t token = 0;
  std::int32_t position = 0;
  bool want_logits = false;
};

// Callbacks into the forward pass (observers, not forks: DESIGN.md). All are optional.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // Called for every layer after the rows' keys/values have been appended to their caches and
  // their queries pushed into the query rings, before attention reads the caches: the point
  // where decode-time compression plugs in (ALGORITHMS.md 1, trigger).
  virtual void after_kv_append(int layer, std::span<const ForwardRow> rows) {}
  // Called with the residual stream [rows][hidden] after decoder layer `layer`; may modify it
  // (SkipKV steering adds a vector here).
  virtual void after_layer(int layer, std::span<const ForwardRow> rows, float* hidden) {}
  // Called with the final-norm output [rows][hidden] (SkipKV sentence embeddings).
  virtual void final_hidden(std::span<const ForwardRow> rows, const float* hidden) {}
  // Whether attention should hand back its probabilities (H2O accumulation).
  virtual bool wants_attention_probs() const { return false; }
  // Attention probabilities of row r, layer, KV head: [G][n] for the cache's first n entries.
  // Called from worker threads, one call per (row, KV head), never twice for the same pair.
  virtual void attention_probs(int layer, std::span<const ForwardRow> rows, std::size_t row,
                               int kv_head, const float* probs, int G, int n) {}
};

// Scratch buffers of a forward pass, reused between calls to avoid allocation per token.
struct ForwardScratch {
  std::vector<float> x, xn, q, k, v, attn, gate, up, rope_cos, rope_sin, logits_hidden;
};

class Model {
 public:
  // Loads config.json (+ generation_config.json) and the safetensors weights of `dir`, checking
  // every tensor's presence, shape and dtype. Throws rkv::Error naming the file and tensor.
  // A path to a .gguf file loads that file instead (model_load_gguf.cpp: llama, qwen2, qwen3;
  // F32/F16/BF16 and Q8_0/Q4_0/Q5_0/Q4_K/Q6_K weights).
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

  // Runs the rows through the model, appending their keys/values to their caches. Writes the
  // float32 logits of the rows with want_logits, in row order, to `logits` ([n][vocab]).
  void forward(std::span<const ForwardRow> rows, ForwardScratch& scratch, ThreadPool& pool,
               float* logits, ForwardObserver* observer = nullptr) const;

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
  void embed(std::int32_t token, float* out) const;

  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<TensorStore> store_;
  // GGUF: the mapped file and the weights re-ordered on load (Q/K rows), kept alive here.
  std::vector<std::shared_ptr<const void>> keep_alive_;
  kernels::WeightView embed_tokens_;
  kernels::WeightView lm_head_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;  // [head_dim / 2], llama3 scaling applied
  // GGUF files: llama.cpp's rope_freqs.weight, one divisor per frequency (Llama-3.1's scaling as
  // its converter stores it); empty when the file has none.
  std::vector<float> rope_freq_divisors_;
  std::size_t weight_bytes_ = 0;
  kernels::AttentionPrecision attention_precision_ = kernels::AttentionPrecision::Exact;
};

}  // namespace rkv
