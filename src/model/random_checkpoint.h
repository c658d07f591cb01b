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

// The shapes make-model knows: tiny, tiny-r1 (tiny with the DeepSeek-R1 template), tiny-qwen3
// (tiny as a Qwen3: q_norm and k_norm), tiny-256 and
// tiny-llama-256 (Qwen2 and Llama with rows of 256 and 512, for K-quant GGUF tests),
// qwen2.5-0.5b,
// qwen3-0.6b, r1-distill-qwen-1.5b,
// r1-distill-llama-8b, and as GGUF files only qwen3-30b-a3b, gpt-oss-20b, qwen3.5-4b and their
// reduced-depth variants qwen3-30b-a3b-24l, gpt-oss-20b-12l, qwen3.5-4b-8l, and tiny versions
// tiny-qwen3moe, tiny-gpt-oss, tiny-qwen35. Throws rkv::Error for an unknown name (listing the
// known ones).
ModelConfig shape_config(const std::string& name);
std::vector<std::string> known_shapes();

struct RandomCheckpointOptions {
  std::string shape = "tiny";
  DType dtype = DType::BF16;  // safetensors: f32, bf16, f16; GGUF: any weight type
  bool q4_k_m = false;        // GGUF only: llama-quantize's Q4_K_M mix (dtype is then ignored)
  std::uint64_t seed = 0;
};

// Writes the checkpoint into `dir` (created if missing). Progress goes to `log` when not null.
void write_random_checkpoint(const std::filesystem::path& dir,
                             const RandomCheckpointOptions& options, std::FILE* log = nullptr);

// Writes the same random weights (same seed, same values before rounding) as one GGUF file: the
// llama, qwen2 or qwen3 architecture metadata, the shape's vocabulary as llama.cpp's byte-level
// BPE metadata (tokenizer.ggml.model "gpt2", the same tokens, merges and special tokens as the
// safetensors checkpoint's tokenizer.json, so rkv and llama.cpp both load the file alone),
// 1-D tensors in f32 and the matrices in gguf_weight_type's type, quantized row by row
// (quant::quantize_row); Llama-3.1's rope scaling as llama.cpp's rope_freqs.weight tensor.
void write_random_gguf(const std::filesystem::path& file, const RandomCheckpointOptions& options,
                       std::FILE* log = nullptr);

// The type make-model writes a GGUF matrix in (`layer` -1 outside the blocks, `cols` its row
// length). With q4_k_m, llama-quantize's Q4_K_M rule (llama_tensor_get_type): Q6_K for the
// output matrix (the token embedding when the output is tied to it) and for attn_v and ffn_down
// of the layers where use_more_bits(layer, n_layers) holds (the first and last eighth, and every
// third between), Q4_K for every other matrix; otherwise `dtype`. Then, as llama-quantize does,
// a row length that is not a multiple of 256 turns Q4_K into Q5_0 and Q6_K into Q8_0 (and one
// that no block fits, f16).
DType gguf_weight_type(const std::string& gguf_name, int layer, const ModelConfig& config,
                       std::int64_t cols, DType dtype, bool q4_k_m);

// Writes tokenizer.json and tokenizer_config.json: 256 byte tokens, merges of frequent-looking
// pairs up to the vocabulary size minus the special tokens, and the family's special tokens.
void write_synthetic_tokenizer(const std::filesystem::path& dir, const ModelConfig& config);

}  // namespace rkv
