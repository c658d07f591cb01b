// Random-weight checkpoints of real model shapes (`rkv make-model`), so that benchmarks and tests
// run without downloads: config.json, generation_config.json, model.safetensors, and a
// byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) that covers the vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace rkv {

// The shapes make-model knows: tiny, tiny-r1 (tiny with the DeepSeek-R1 template), qwen2.5-0.5b,
// qwen3-0.6b, r1-distill-qwen-1.5b,
// r1-distill-llama-8b. Throws rkv::Error for an unknown name (listing the known ones).
ModelConfig shape_config(const std::string& name);
std::vector<std::string> known_shapes();

struct RandomCheckpointOptions {
  std::string shape = "tiny";
  DType dtype = DType::BF16;
  std::uint64_t seed = 0;
};

// Writes the checkpoint into `dir` (created if missing). Progress goes to `log` when not null.
void write_random_checkpoint(const std::filesystem::path& dir,
                             const RandomCheckpointOptions& options, std::FILE* log = nullptr);

// Writes tokenizer.json and tokenizer_config.json: 256 byte tokens, merges of frequent-looking
// pairs up to the vocabulary size minus the special tokens, and the family's special tokens.
void write_synthetic_tokenizer(const std::filesystem::path& dir, const ModelConfig& config);

}  // namespace rkv
