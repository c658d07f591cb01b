#include "steering_options.h"

#include "common.h"

namespace rkv::cli {

SteeringParams SteeringArgs::load(const Model& model) const {
  SteeringParams params;
  if (path.empty()) return params;
  params.vector = load_steering_vector_for(path, model);
  params.a0 = a0;
  params.gamma = gamma;
  params.validate();
  return params;
}

void add_steering_options(CLI::App& app, const std::shared_ptr<SteeringArgs>& args) {
  add_flag_option(app, "--steering", args->path,
                  "SkipKV adaptive steering: a vector from `rkv steer-calibrate` (its layer is "
                  "recorded in the file), added at sentence delimiters")
      ->group("Steering");
  add_flag_option(app, "--steer-a0", args->a0, "Steering strength a0 of a_t = a0 + gamma * N_o")
      ->group("Steering");
  add_flag_option(app, "--steer-gamma", args->gamma,
                  "Steering growth gamma per non-execution sentence generated so far (N_o)")
      ->group("Steering");
}

}  // namespace rkv::cli
