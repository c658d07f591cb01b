// The --kv-* flags, registered from the compression parameter table (rkv/compression.h), so
// every compression parameter has exactly one definition shared by the CLI, the server and docs.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>

#include "rkv/compression.h"

namespace rkv::cli {

struct KvOptions {
  std::map<std::string, std::string> values;  // parameter name -> text, for the flags given
  // The method's preset with the given flags applied, validated (rkv::Error on bad values).
  CompressionParams params(const std::string& default_method = "fullkv") const;
};

// Adds --kv-method, --kv-budget, ... (each also read from RKV_ARG_KV_METHOD, ...).
void add_kv_options(CLI::App& app, const std::shared_ptr<KvOptions>& options);

}  // namespace rkv::cli
