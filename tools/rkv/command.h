// Each subcommand lives in its own file (tools/rkv/cmd_*.cpp) and registers itself here with a
// static RegisterCommand object; main.cpp builds the CLI from the list. The setup function adds
// the subcommand's options and sets its callback. A callback reports bad input by throwing
// rkv::Error; main prints "rkv <cmd>: error: <message>" and exits with status 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace rkv::cli {

struct Command {
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
};

std::vector<Command>& registered_commands();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string description, std::function<void(CLI::App&)> setup) {
    registered_commands().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace rkv::cli
