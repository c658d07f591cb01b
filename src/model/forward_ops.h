// The forward pass's steps, behind one interface that each backend implements (DESIGN.md
// property 6): the CPU kernels (model_forward.cpp) and the CUDA backend (src/cuda). run_forward
// strings the steps together once for every backend, so the model's arithmetic is written in one
// place; a backend decides where the activations live and how each step runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kv/kv_cache.h"
#include "model/config.h"

namespace rkv {

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
  // Whether this observer reads or writes the caches' memory or the activations (compression,
  // steering, sentence embeddings) at the moment of the calls. A backend whose caches and
  // activations live on a device refuses such an observer; one that answers false has its calls
  // made with hidden == nullptr there and must not touch the caches' rows.
  virtual bool needs_host() const { return true; }
};

// The activations of a forward pass, [rows][width] float32 each, in the backend's memory:
// X the residual stream, XN a normed copy (and the products' scratch), Q/K/V the projections,
// Attn the attention output, Gate/Up the MLP's halves.
enum class Act : std::uint8_t { X, XN, Q, K, V, Attn, Gate, Up };
inline constexpr Act kActs[] = {Act::X, Act::XN,   Act::Q,    Act::K,
                                Act::V, Act::Attn, Act::Gate, Act::Up};
// Floats per row of an activation: hidden size, query heads x head size, KV heads x head size, or
// intermediate size.
std::size_t act_width(const ModelConfig& config, Act a);
// A layer's matrices.
enum class Proj : std::uint8_t { Q, K, V, O, Gate, Up, Down };
// The RMSNorm weights: a layer's input and post-attention norms, and the final norm.
enum class Norm : std::uint8_t { Input, Post, Final };

class ForwardOps {
 public:
  virtual ~ForwardOps() = default;
  // Sizes the activations for these rows, writes their token embeddings into X and prepares the
  // RoPE angles of their positions. The rows have been validated (run_forward).
  virtual void begin(std::span<const ForwardRow> rows) = 0;
  // out = RMSNorm(in) with the weights of `norm` (of `layer`; Final ignores it).
  virtual void rms_norm(Norm norm, int layer, Act in, Act out) = 0;
  // out = in * W^T for each product, W that of `layer`.
  struct Product {
    Proj proj;
    Act out;
  };
  virtual void project(int layer, Act in, std::span<const Product> products) = 0;
  // Q, K and V biases (Qwen2), per-head norms of Q and K (Qwen3), then RoPE on Q and K.
  virtual void prepare_qkv(int layer) = 0;
  // Each row's K and V into its cache at `layer`, its Q into the cache's query ring.
  virtual void append_kv(int layer, std::span<const ForwardRow> rows) = 0;
  // Attn = causal attention of each row's Q over its cache (everything up to its own entry),
  // handing the observer the probabilities when it wants them.
  virtual void attention(int layer, std::span<const ForwardRow> rows,
                         ForwardObserver* observer) = 0;
  // dst += src.
  virtual void add(Act dst, Act src) = 0;
  // Gate = SiLU(Gate) * Up.
  virtual void silu_mul() = 0;
  // Whether the activations and caches are in host memory, where observers can reach them.
  virtual bool on_host() const = 0;
  // The buffer in host memory, for observers (on_host() backends only, after begin()).
  virtual float* host(Act a) = 0;
  // The logits of the rows with want_logits, from `in` (the final norm's output), in row order,
  // into host memory out[n][vocab].
  virtual void logits(std::span<const ForwardRow> rows, Act in, float* out) = 0;
  // The pass is complete. A device backend records here the entries append_kv wrote in its
  // caches' lengths (so a pass that fails part-way changes none); the CPU's append does it as it
  // goes.
  virtual void end(std::span<const ForwardRow> rows) {}
};

// The forward pass (golden models README, "Architecture details"), per layer
//   h += o_proj(attention(rope(q), rope(k), v)) of input_layernorm(h)
//   h += down_proj(silu(gate_proj(x)) * up_proj(x)) of post_attention_layernorm(h)
// then the final norm and lm_head. Validates the rows first (tokens in the vocabulary, room in
// every cache), so a bad request leaves every sequence as it was. A backend whose activations
// are not in host memory refuses an observer that needs them (ForwardObserver::needs_host).
void run_forward(const ModelConfig& config, ForwardOps& ops, std::span<const ForwardRow> rows,
                 float* logits, ForwardObserver* observer);

}  // namespace rkv
