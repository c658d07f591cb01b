// --steering / --steer-a0 / --steer-gamma, shared by the commands that generate.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/steering.h"

namespace rkv {
class Model;
}

namespace rkv::cli {

struct SteeringArgs {
  std::string path;
  float a0 = 1.0f;
  float gamma = 0.02f;
  // The loaded vector (checked against `model`) with a0 and gamma; no steering when no path.
  SteeringParams load(const Model& model) const;
};

void add_steering_options(CLI::App& app, const std::shared_ptr<SteeringArgs>& args);

}  // namespace rkv::cli
