// SkipKV's adaptive steering, the engine's side (ALGORITHMS.md 5): what a request carries
// (SteeringVector, SteeringParams) and the file format are public (rkv/steering.h); here are the
// default layer, the model fingerprint, writing a vector file, checking a vector against a model,
// and the calibration (`rkv steer-calibrate`) that computes v as mean(execution thoughts) -
// mean(non-execution thoughts) of the layer-k hidden states at the thoughts' delimiter tokens
// (the point the vector is added at).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/steering.h"

namespace rkv {

// The default steering layer for a model of `num_layers` decoder layers: 20 for 28-32 layers
// (the R1-distilled 7B/8B models), 35 for 48 (14B), else round(0.72 * num_layers), which passes
// through both anchors (28 -> 20, 48 -> 35), clamped to [0, num_layers - 1].
int default_steering_layer(int num_layers);

// A fingerprint of a checkpoint's identity: FNV-1a over its shape (architecture, sizes) and the
// bf16-rounded values of the final norm and the first embedding rows, so a conversion of the
// same weights between bf16 and f32 keeps it while another model (even of the same shape) does
// not. 16 hex digits.
std::string model_fingerprint(const std::filesystem::path& model_dir, const ModelConfig& config);

// A hex digest (FNV-1a 64) of a steering vector's layer and values: what identifies it among the
// settings of an eval run (eval/runner.cpp).
std::string steering_vector_digest(const SteeringVector& vector);

// Writes the file (rkv/steering.h: the format; load_steering_vector reads it).
void save_steering_vector(const std::filesystem::path& path, const SteeringVector& vector);

// Throws rkv::Error (naming `source`) unless the vector was made for this model: same hidden
// size, a layer this model has, and (when both are known) the same fingerprint.
void check_steering_vector(const SteeringVector& vector, const ModelConfig& config,
                           const std::string& fingerprint, const std::string& source);
// load_steering_vector + check_steering_vector against a loaded model.
std::shared_ptr<const SteeringVector> load_steering_vector_for(const std::filesystem::path& path,
                                                               const Model& model);

// ---- calibration (rkv steer-calibrate) ----------------------------------------------------------

enum class ThoughtLabel { execution, reflection, transition };
std::string_view thought_label_name(ThoughtLabel label);
// ALGORITHMS.md 5 (case-sensitive): reflection when the thought contains `Wait`, `But wait`,
// `Let me check`, `double-check` or `verify`; else transition when it contains `Alternatively`;
// else execution. Reflection and transition are the non-execution thoughts.
ThoughtLabel label_thought(std::string_view text);

// One thought of a generated output: tokens [begin, delimiter] of the output, ending at the token
// that completes a "\n\n" (a token containing "\n\n", or a token starting with "\n" right after
// one ending with "\n").
struct Thought {
  int begin = 0;
  int delimiter = 0;  // index into the output tokens
  std::string text;
  ThoughtLabel label = ThoughtLabel::execution;
};
// Splits generated tokens into thoughts (token_text: a token's raw text). A trailing piece
// without a delimiter is no thought. With stop_token >= 0 (</think>), splitting ends there.
std::vector<Thought> split_thoughts(const std::vector<int>& output,
                                    const std::function<std::string(int)>& token_text,
                                    int stop_token = -1);

// Accumulates layer-k hidden states at the thoughts' delimiter tokens over calibration samples
// (a prompt and the output generated for it: both are run through the model once more, in
// prefill chunks, so no generation hook is needed), and builds the vector.
class SteeringCalibration {
 public:
  // kv_dtype: the dtype of the caches its forward passes use (none: the model's default).
  SteeringCalibration(const Model& model, int layer, std::string model_fingerprint,
                      std::optional<KvDtype> kv_dtype = std::nullopt);

  // Returns the thoughts found in the output (with labels), after adding their hidden states.
  std::vector<Thought> add_sample(const std::vector<int>& prompt, const std::vector<int>& output,
                                  const std::function<std::string(int)>& token_text, int stop_token,
                                  ThreadPool& pool, int prefill_chunk = 512);

  int execution_count() const { return n_execution_; }
  int non_execution_count() const { return n_non_execution_; }
  // v = mean(execution) - mean(non-execution). Throws rkv::Error unless both are non-empty.
  SteeringVector finish() const;

 private:
  const Model& model_;
  int layer_;
  std::string fingerprint_;
  std::optional<KvDtype> kv_dtype_;
  std::vector<double> execution_sum_, non_execution_sum_;  // [hidden]
  int n_execution_ = 0, n_non_execution_ = 0;
};

}  // namespace rkv
