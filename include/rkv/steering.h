// SkipKV's adaptive steering as a request carries it (rkv/engine.h's Request::steering;
// ALGORITHMS.md 5): a vector v for the output hidden state of one decoder layer k, added at
// generation as a_t * v whenever the input token is a sentence delimiter, with
// a_t = a0 + gamma * N_o (N_o: the sequence's non-execution sentences so far). Layer k is 0-based:
// the vector is added to the output of decoder layer k (Hugging Face's hidden_states[k + 1]).
//
// A vector is made offline by a calibration run (`rkv steer-calibrate`) and kept in a file:
// safetensors with one F32 tensor "steering_vector" [hidden_size] and metadata
// rkv_kind=steering-vector, layer, hidden_size, num_layers, architecture, model (the checkpoint
// directory's name), model_fingerprint, and the calibration counts.
//
//   rkv::Request r;
//   r.steering.vector = std::make_shared<const rkv::SteeringVector>(
//       rkv::load_steering_vector("steer.safetensors"));
//   r.steering.a0 = 1.0f;  // Engine::prepare checks the vector against the engine's model
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

// Reads a steering vector file and validates the file itself (tensor present, shape
// [hidden_size] matching the metadata, finite values, layer within num_layers); throws
// rkv::Error naming the file and the problem.
SteeringVector load_steering_vector(const std::filesystem::path& path);

}  // namespace rkv
