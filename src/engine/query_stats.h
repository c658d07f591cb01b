// TriAttention's calibration statistics for one model (../shared/spec/TRIATTENTION.md section 2):
// per layer, query head and frequency pair, the first moments of the pre-RoPE queries (after the
// q bias and q_norm, before RoPE, without 1/sqrt(d)). `rkv calibrate` computes them from the
// model's own forward pass over a text and writes them to a safetensors file; the engine loads
// the file once and hands it to every triattention request's KV memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compress/triattention.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace rkv {

struct QueryStats {
  // [layers][q_heads][head_dim / 2], pairs in tri::half_layout(head_dim, rotary_dim): with
  // partial RoPE the unrotated dimensions' pairs (frequency 0) follow the rotated ones.
  tri::Stats stats;
  int rotary_dim = 0;       // the rotated dimensions of a head (0: all of them)
  std::int64_t tokens = 0;  // calibration tokens the moments are over
  std::string model;        // the model it was computed for (name or path, for messages)
  std::string text;         // the calibration text's name (file name), for messages
  std::string origin;       // the file it was loaded from ("" when computed here)
};

// The statistics of the pre-RoPE queries of `tokens` (one sequence, positions 0..n-1), run
// through the model `chunk` tokens per forward pass. progress(done, total) after each chunk.
// Each pass's post-RoPE queries are read from the cache's query ring and rotated back with the
// angles the pass used, so the model must be on the CPU. Throws rkv::Error on an empty text, a
// sequence longer than the model's context, or a model moved to a device.
QueryStats calibrate_queries(const Model& model, ThreadPool& pool, std::span<const int> tokens,
                             int chunk = 256,
                             const std::function<void(std::int64_t, std::int64_t)>& progress = {});

// The same over several sequences, each run from position 0 in a cache of its own (a corpus of
// short documents; the tiny models' training chains), every token of every sequence weighted
// equally. Empty sequences are skipped; progress counts the tokens of all of them.
QueryStats calibrate_queries(const Model& model, ThreadPool& pool,
                             std::span<const std::vector<int>> sequences, int chunk = 256,
                             const std::function<void(std::int64_t, std::int64_t)>& progress = {});

// The file format (docs/USAGE.md, "rkv calibrate"): safetensors with three float32 tensors
// q_mean_real, q_mean_imag, q_abs_mean of shape [layers, q_heads, head_dim / 2], and metadata
// format = "rkv-query-stats", version, tokens, head_dim, rope_style = "half", model, text.
void save_query_stats(const std::string& path, const QueryStats& stats);
// Loads and checks a file against the model (layers, query heads, head size); throws rkv::Error
// naming the file and what does not match.
std::shared_ptr<const QueryStats> load_query_stats(const std::string& path, const Model& model);

// Where a model's statistics are found when no file is named: query_stats.safetensors in the
// model's directory (a GGUF file: beside it, <file stem>.query_stats.safetensors).
std::string default_query_stats_path(const std::string& model_path);

}  // namespace rkv
