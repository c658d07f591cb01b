// rkv policy-run: replays one golden compression case file (../shared/golden/compression/*.json)
// through the compression library, with no model, and prints a JSON object shaped like the
// case's `expected` part (per-head scores, kept indices, per step for multi-step cases).
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "compress/golden_case.h"
#include "core/error.h"

namespace rkv::cli {
namespace {

struct PolicyRunArgs {
  std::string case_path;
  std::string out_path;
  int indent = -1;
  bool include_cache = false;
};

void run(const PolicyRunArgs& args) {
  const nlohmann::json golden_case = compress::load_case(args.case_path);
  nlohmann::json result;
  try {
    result = compress::run_case(golden_case, {args.include_cache});
  } catch (const nlohmann::json::exception& e) {
    throw Error(args.case_path + ": not in the golden case format: " + e.what());
  }
  const std::string text = result.dump(args.indent) + "\n";
  if (args.out_path.empty()) {
    std::cout << text;
    return;
  }
  std::ofstream out(args.out_path);
  if (!out) throw Error("cannot write " + args.out_path);
  out << text;
  if (!out) throw Error("failed writing " + args.out_path);
}

const RegisterCommand kRegister{
    "policy-run",
    "Run a compression policy on a golden case file (no model) and print the result as JSON",
    [](CLI::App& app) {
      auto args = std::make_shared<PolicyRunArgs>();
      app.footer(
          "The case file uses the format of ../shared/golden/compression (see its README): "
          "method rkv, snapkv, streamingllm, gkv (single or multi-step, optionally "
          "prefill-seeded), redundancy, triattention or triattention_calibration. The output "
          "has the shape of the case's `expected` object; kept_indices are in ascending order "
          "(compare them as sets), topk_indices are by descending score. A triattention case "
          "gives kept_indices and kept_positions per KV head (per layer too for "
          "per_layer_perhead) with the scores and the other selection modes on the same "
          "inputs, or for a stream its `rounds` and `final_cache_positions`; only the case's "
          "inputs, params and rope are read.");
      app.add_option("--case", args->case_path, "golden case file (JSON)")
          ->required()
          ->check(CLI::ExistingFile);
      app.add_option("--out", args->out_path, "write the JSON here instead of stdout");
      app.add_option("--indent", args->indent, "indent the JSON by this many spaces (-1: compact)");
      app.add_flag("--include-cache", args->include_cache,
                   "also output key_out/value_out (the kept cache rows)");
      app.callback([args] { run(*args); });
    }};

}  // namespace
}  // namespace rkv::cli
