// rkv: the command-line program. Subcommands register themselves (command.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "build_info.h"
#include "command.h"
#include "core/error.h"

namespace rkv::cli {
std::vector<Command>& registered_commands() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace rkv::cli

int main(int argc, char** argv) {
  CLI::App app{
      "rkv: an inference engine for reasoning models with a fixed-size, compressed KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("rkv 0.1.0 (") + rkv::cli::build_commit() + ")");
  auto& commands = rkv::cli::registered_commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    command.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rkv::Error& e) {
    std::string name = "rkv";
    for (const auto* sub : app.get_subcommands()) name += " " + sub->get_name();
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rkv: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
