// rkv methods: lists the compression methods and their default parameters as JSON (the method
// registry of include/rkv/compression.h), the parameter table with --params, or the Markdown table
// of docs/METHODS.md with --markdown.
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
      auto markdown = std::make_shared<bool>(false);
      app.add_flag("--params", *params, "list the settable parameters (name, flag, help) instead");
      app.add_flag("--markdown", *markdown,
                   "print the methods as the Markdown table of docs/METHODS.md instead")
          ->excludes("--params");
      app.callback([params, markdown] {
        if (*markdown) {
          std::cout << methods_markdown();
          return;
        }
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
