// The forward pass's steps, behind one interface that each backend implements (DESIGN.md
// property 6): the CPU kernels (model_forward.cpp) and the CUDA backend (src/cuda). run_forward
// strings the steps together once for every backend, so the model's arithmetic is written in one
// place; a backend decides where the activations live and how each step runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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
  bool want_attention = false;  // hand back this row's attention probabilities (AttentionProbs)
};

// Attention probabilities a pass hands back for the rows that asked (ForwardRow::
// want_attention): row r's [kv_heads][G][entries[r]] floats start at data[offset[r]], where
// entries[r] is how many cache entries it attended to (its own included). Rows that did not ask
// have entries[r] == 0. H2O accumulates these (ALGORITHMS.md 4); the model only reports them.
struct AttentionProbs {
  std::vector<float> data;
  std::vector<std::size_t> offset;  // [rows]
  std::vector<int> entries;         // [rows]
};

// The activations of a forward pass, [rows][width] float32 each, in the backend's memory:
// X the residual stream, XN a normed copy (and the products' scratch), Q/K/V the projections,
// Attn the attention output, Gate/Up the MLP's halves, QGate the attention's output gate (Qwen3.5;
// empty for other models).
enum class Act : std::uint8_t { X, XN, Q, K, V, Attn, Gate, Up, QGate };
inline constexpr Act kActs[] = {Act::X,    Act::XN,   Act::Q,  Act::K,    Act::V,
                                Act::Attn, Act::Gate, Act::Up, Act::QGate};
// Floats per row of an activation: hidden size, query heads x head size, KV heads x head size, or
// intermediate size (0 for QGate where the model has no attention gate).
std::size_t act_width(const ModelConfig& config, Act a);
// A layer's matrices.
enum class Proj : std::uint8_t { Q, K, V, O, Gate, Up, Down, QGate };
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
  // (O adds the layer's o_proj bias where it has one.)
  virtual void project(int layer, Act in, std::span<const Product> products) = 0;
  // Q, K and V biases (Qwen2), per-head norms of Q and K (Qwen3), then RoPE on Q and K (on the
  // first rotary_dim dimensions of each head).
  virtual void prepare_qkv(int layer) = 0;
  // Each row's K and V into its cache at `layer`'s cache layer (ModelConfig::kv_layer), its Q
  // into the cache's query ring. Attention layers only.
  virtual void append_kv(int layer, std::span<const ForwardRow> rows) = 0;
  // Attn = causal attention of each row's Q over its cache (everything up to its own entry);
  // with sinks (gpt-oss), each head's sink logit joins the softmax's denominator. A
  // SlidingWindow layer attends over its window ring and this pass's rows, then keeps the
  // newest sliding_window of them in the ring. With `probs`, the probabilities of the rows with
  // want_attention are written there (Attention layers; a backend that cannot hand them back
  // throws rkv::Error).
  virtual void attention(int layer, std::span<const ForwardRow> rows, AttentionProbs* probs) = 0;
  // Attn *= sigmoid(QGate) (Qwen3.5's gated attention output).
  virtual void gate_attention();
  // residual += the layer's mixture of experts applied to `in` (routing, the chosen experts,
  // the shared expert).
  virtual void moe(int layer, Act in, Act residual);
  // residual += the layer's Gated DeltaNet applied to `in`, each row's sequence state (its
  // cache's recurrent()) advanced by its row, the rows of a sequence in order.
  virtual void delta_net(int layer, std::span<const ForwardRow> rows, Act in, Act residual);
  // dst += src.
  virtual void add(Act dst, Act src) = 0;
  // Gate = SiLU(Gate) * Up.
  virtual void silu_mul() = 0;
  // Whether the activations and caches are in host memory, where the caller can reach them
  // between steps (steering, sentence embeddings, compression).
  virtual bool on_host() const = 0;
  // The buffer in host memory (on_host() backends only, after begin()).
  virtual float* host(Act a) = 0;
  // The logits of the rows with want_logits, from `in` (the final norm's output), in row order,
  // into host memory out[n][vocab].
  virtual void logits(std::span<const ForwardRow> rows, Act in, float* out) = 0;
  // The pass is complete. A device backend records here the entries append_kv wrote in its
  // caches' lengths (so a pass that fails part-way changes none); the CPU's append does it as it
  // goes.
  virtual void end(std::span<const ForwardRow> rows) {}
};

// The forward pass (golden models README, "Architecture details"; docs/ARCHITECTURES.md for the
// MoE and hybrid families) as steps the caller drives, per layer
//   h += o_proj(attention(rope(q), rope(k), v)) of input_layernorm(h)     (append_kv, then attend)
//   h += down_proj(silu(gate_proj(x)) * up_proj(x)) of post_attention_layernorm(h)
// (a DeltaNet layer's mixer instead of attention, a mixture of experts instead of the MLP)
// then the final norm and lm_head (finish). Between append_kv(l) and attend(l) the caller may
// compact the caches (the engine's KV memory applies compression there, ALGORITHMS.md 1); after
// attend(l) it may change the residual stream (SkipKV steering). The pass computes and reports:
// it calls nothing above it and writes no cache but the rows' own appends.
// The constructor validates the rows (tokens in the vocabulary, room in every cache) before any
// step, so a bad request leaves every sequence as it was.
class ForwardPass {
 public:
  ForwardPass(const ModelConfig& config, ForwardOps& ops, std::span<const ForwardRow> rows);
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  int layers() const { return config_.num_layers; }
  // Layer l's cache layer (ModelConfig::kv_layer): -1 for a layer compression does not touch.
  int kv_layer(int layer) const { return config_.kv_layer(layer); }
  // Whether hidden() and final_hidden() are readable (the CPU; not a device backend).
  bool on_host() const { return on_host_; }

  // Layer l's input norm, q/k/v projections, biases, q/k norms, RoPE, and each row's K and V
  // appended to its cache (its Q to the cache's query ring). A SlidingWindow layer's keys go to
  // its ring in attend; a DeltaNet layer stops after the norm.
  void append_kv(int layer);
  // Layer l's attention over the caches as they are now, o_proj, residual, MLP, residual. With
  // `probs`, the attention probabilities of the rows with want_attention go there.
  void attend(int layer, AttentionProbs* probs = nullptr);
  // The residual stream [rows][hidden] after the last attend() (host only; null otherwise).
  float* hidden();
  // The final norm, and the logits of the rows with want_logits, in row order, into
  // logits[n][vocab] (host memory; nothing when null). Ends the pass.
  void finish(float* logits);
  // The final norm's output [rows][hidden] after finish() (host only; null otherwise).
  const float* final_hidden();

 private:
  void expect(int step, const char* what);

  const ModelConfig& config_;
  ForwardOps& ops_;
  std::span<const ForwardRow> rows_;
  bool on_host_;
  int next_ = 0;  // the next step: 2 * layer (append_kv), 2 * layer + 1 (attend), 2 * layers
};

// All steps of a pass with nothing between them (logits, tests, benchmarks of the bare model).
void run_forward(const ModelConfig& config, ForwardOps& ops, std::span<const ForwardRow> rows,
                 float* logits);

}  // namespace rkv
