// A scoring pipeline: which stages run, in which configuration. Each method's record builds its
// Pipeline value (MethodRecord::stages, src/compress/methods/); run_head executes a pipeline on
// one KV head. A new method is a new configuration (or one new stage), never a new copy of the
// loop (DESIGN.md 4).
#pragma once

#include <optional>

#include "compress/stages.h"
#include "rkv/compression.h"

namespace rkv::compress {

struct Pipeline {
  enum class Attention { none, rkv, gkv };
  enum class Select { keep_all, top_k, sinks_recent, random };

  Select select = Select::keep_all;
  Attention attention = Attention::none;  // the local score (ALGORITHMS.md 2)
  bool accumulated = false;               // h2o: the local score is the entry's accumulator
  std::optional<float> shift_gamma;       // + gamma * std over the window rows
  bool normalize_local = false;           // local / max(local)
  Smoothing smoothing = Smoothing::none;  // global score from the entry state
  float decay = 0.0f;
  int pool_kernel = 1;                // 1-D max pooling of the (global) score
  bool redundancy = false;            // final = lambda * I - (1 - lambda) * R
  bool normalize_redundancy = false;  // R / max(R)
  float lambda = 1.0f;
  float threshold = 0.5f;
  bool sentence_penalty = false;  // skipkv: final -= penalty of the entry's sentence
  int sinks = 0;                  // sinks_recent
  std::uint32_t seed = 0;         // random
  bool store_global = false;      // new state = global score (candidates), none (window)
  bool carry_state = false;       // new state = the entry's own state
};

struct HeadResult {
  std::vector<std::int32_t> kept;
  std::vector<float> new_state;
};

// One KV head h of `view`, keeping `budget` entries (budget <= n_all). `diag` may be null.
HeadResult run_head(const LayerView& view, const Pipeline& pipeline, int h, int budget,
                    HeadDiagnostics* diag);

}  // namespace rkv::compress
