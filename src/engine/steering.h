// SkipKV's adaptive steering (ALGORITHMS.md 5): a vector v for the output hidden state of one
// decoder layer k, computed offline by a calibration run (rkv steer-calibrate) as
// mean(execution thoughts) - mean(non-execution thoughts) of the layer-k hidden states at the
// thoughts' delimiter tokens, and added at generation as a_t * v whenever the input token is a
// sentence delimiter, with a_t = a0 + gamma * N_o (N_o: the sequence's non-execution sentences
// so far). Layer k is 0-based: the vector is added to the output of decoder layer k (Hugging
// Face's hidden_states[k + 1]), and the calibration reads the same point.
//
// File format: safetensors with one F32 tensor "steering_vector" [hidden_size] and metadata
// rkv_kind=steering-vector, layer, hidden_size, num_layers, architecture, model (the checkpoint
// directory's name), model_fingerprint (model_fingerprint()), and the calibration counts.
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

namespace rkv {

struct SteeringVector {
  int layer = 0;              // decoder layer whose output receives the vector (0-based)
  std::vector<float> values;  // [hidden_size]
  int num_layers = 0;         // of the model it was made for
  std::string architecture;   // e.g. "Qwen2ForCausalLM"
  std::string model;          // the model directory's name (for messages)
  std::string fingerprint;    // model_fingerprint() of that model
  std::map<std::string, std::string> extra;  // other metadata (calibration counts, dataset)

  int hidden_size() const { return static_cast<int>(values.size()); }
};

// Steering settings of one sequence. No vector: no steering.
struct SteeringParams {
  std::shared_ptr<const SteeringVector> vector;
  float a0 = 1.0f;      // base strength
  float gamma = 0.02f;  // added per non-execution sentence generated so far
  bool enabled() const { return vector != nullptr; }
  // a_t = a0 + gamma * N_o.
  float strength(int non_execution_sentences) const {
    return a0 + gamma * static_cast<float>(non_execution_sentences);
  }
  // Throws rkv::Error for non-finite a0 / gamma.
  void validate() const;
};

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

// Writes / reads the file. load_steering_vector validates the file itself (tensor present,
// shape [hidden_size] matching the metadata, finite values, layer within num_layers) and throws
// rkv::Error naming the file and the problem.
void save_steering_vector(const std::filesystem::path& path, const SteeringVector& vector);
SteeringVector load_steering_vector(const std::filesystem::path& path);

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
