// The --kv-* flags, registered from the compression parameter table (rkv/compression.h), so
// every compression parameter has exactly one definition shared by the CLI, the server and docs;
// and --kv-dtype, the element type of the cache's keys and values (rkv/kv_dtype.h).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/query_stats.h"
#include "rkv/compression.h"
#include "rkv/kv_dtype.h"

namespace rkv::cli {

struct KvOptions {
  std::map<std::string, std::string> values;  // parameter name -> text, for the flags given
  std::string dtype;                          // --kv-dtype as given ("": the model's default)
  std::string query_stats;                    // --query-stats as given ("": the default path)
  // The method's preset with the given flags applied, validated (rkv::Error on bad values).
  CompressionParams params(const std::string& default_method = "fullkv") const;
  // --kv-dtype, or nothing when not given (the engine then picks the model's default).
  std::optional<KvDtype> kv_dtype() const;
  // The model's TriAttention statistics: --query-stats, else, when `needed` (a method the run
  // uses reads them), default_query_stats_path(model_path) if that file exists; null otherwise.
  // Throws rkv::Error for a file that does not load.
  std::shared_ptr<const QueryStats> load_query_stats(const std::string& model_path,
                                                     const Model& model, bool needed) const;
};

// Whether any of these methods (by name) reads the model's query statistics.
bool needs_query_stats(const std::vector<std::string>& methods);

// Adds --kv-method, --kv-budget, ... (each also read from RKV_ARG_KV_METHOD, ...),
// --kv-dtype and --query-stats.
void add_kv_options(CLI::App& app, const std::shared_ptr<KvOptions>& options);

// Adds --kv-dtype alone (RKV_ARG_KV_DTYPE), into `dtype` (commands without compression flags).
void add_kv_dtype_option(CLI::App& app, std::string& dtype);

}  // namespace rkv::cli
