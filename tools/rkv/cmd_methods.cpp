// rkv methods: lists the compression methods and their default parameters as JSON (the typed
// preset table of include/rkv/compression.h), or the parameter table with --params.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "rkv/compression.h"

namespace rkv::cli {
namespace {

const RegisterCommand kRegister{
    "methods", "List the KV-compression methods with their defaults (JSON)", [](CLI::App& app) {
      auto params = std::make_shared<bool>(false);
      app.add_flag("--params", *params, "list the settable parameters (name, flag, help) instead");
      app.callback([params] {
        if (!*params) {
          std::cout << methods_json() << "\n";
          return;
        }
        nlohmann::json out = nlohmann::json::array();
        for (const auto& p : compression_param_table()) {
          out.push_back({{"name", p.name}, {"flag", p.flag}, {"help", p.help}});
        }
        std::cout << out.dump(2) << "\n";
      });
    }};

}  // namespace
}  // namespace rkv::cli
