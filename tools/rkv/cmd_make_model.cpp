// rkv make-model: writes a random-weight checkpoint of a real model shape.
#include <cstdio>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "model/random_checkpoint.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string shape = "tiny";
  std::string dtype = "bf16";
  std::string format = "safetensors";
  std::uint64_t seed = 0;
  std::string out;
};

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  std::string shapes;
  for (const auto& s : known_shapes()) shapes += (shapes.empty() ? "" : ", ") + s;
  add_flag_option(app, "--shape", args->shape, "Model shape to write: " + shapes);
  add_flag_option(app, "--format", args->format,
                  "safetensors (a checkpoint directory) or gguf (one file with its vocabulary, "
                  "which llama.cpp loads too)")
      ->check(CLI::IsMember({"safetensors", "gguf"}));
  add_flag_option(
      app, "--dtype", args->dtype,
      "Weight type of the matrices: bf16, f16 or f32; mxfp4 (a mixture's experts in MXFP4, "
      "its other matrices bf16, as gpt-oss ships: any gpt-oss shape, and in GGUF any mixture); "
      "with --format gguf also q8_0, q4_0, q5_0, q4_k, q6_k and q4_k_m (llama-quantize's "
      "Q4_K_M mix)")
      ->check(CLI::IsMember(
          {"bf16", "f16", "f32", "q8_0", "q4_0", "q5_0", "q4_k", "q6_k", "q4_k_m", "mxfp4"}));
  add_flag_option(app, "-s,--seed", args->seed, "Random seed of the weights");
  add_flag_option(app, "-o,--out", args->out,
                  "Output directory (created if missing); with --format gguf, the .gguf file")
      ->required();
  app.callback([args] {
    RandomCheckpointOptions options;
    options.shape = args->shape;
    options.q4_k_m = args->dtype == "q4_k_m";
    options.dtype = options.q4_k_m ? DType::Q4_K : parse_dtype(args->dtype);
    options.seed = args->seed;
    if (args->format == "gguf") {
      write_random_gguf(args->out, options, stderr);
    } else {
      write_random_checkpoint(args->out, options, stderr);
    }
    std::printf("wrote %s %s (%s, seed %llu) to %s\n", args->shape.c_str(),
                args->format == "gguf" ? "GGUF file" : "checkpoint", args->dtype.c_str(),
                static_cast<unsigned long long>(args->seed), args->out.c_str());
  });
}

const RegisterCommand reg(
    "make-model",
    "Write a random-weight checkpoint of a real model shape (config, safetensors, tokenizer), or "
    "one GGUF file",
    setup);

}  // namespace
}  // namespace rkv::cli
