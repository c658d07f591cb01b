// rkv make-model: writes a random-weight checkpoint of a real model shape.
#include <cstdio>

#include "command.h"
#include "common.h"
#include "model/random_checkpoint.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string shape = "tiny";
  std::string dtype = "bf16";
  std::uint64_t seed = 0;
  std::string out;
};

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  std::string shapes;
  for (const auto& s : known_shapes()) shapes += (shapes.empty() ? "" : ", ") + s;
  add_flag_option(app, "--shape", args->shape, "Model shape to write: " + shapes);
  add_flag_option(app, "--dtype", args->dtype, "Weight type of the matrices: bf16, f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  add_flag_option(app, "-s,--seed", args->seed, "Random seed of the weights");
  add_flag_option(app, "-o,--out", args->out, "Output directory (created if missing)")->required();
  app.callback([args] {
    RandomCheckpointOptions options;
    options.shape = args->shape;
    options.dtype = parse_dtype(args->dtype);
    options.seed = args->seed;
    write_random_checkpoint(args->out, options, stderr);
    std::printf("wrote %s checkpoint (%s, seed %llu) to %s\n", args->shape.c_str(),
                args->dtype.c_str(), static_cast<unsigned long long>(args->seed),
                args->out.c_str());
  });
}

const RegisterCommand reg(
    "make-model",
    "Write a random-weight checkpoint of a real model shape (config, safetensors, tokenizer)",
    setup);

}  // namespace
}  // namespace rkv::cli
