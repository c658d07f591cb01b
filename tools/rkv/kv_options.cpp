#include "kv_options.h"

#include <filesystem>

namespace rkv::cli {

CompressionParams KvOptions::params(const std::string& default_method) const {
  auto it = values.find("method");
  CompressionParams p =
      CompressionParams::defaults(parse_method(it == values.end() ? default_method : it->second));
  for (const auto& [name, value] : values)
    if (name != "method") p.set(name, value);
  p.validate();
  return p;
}

std::optional<KvDtype> KvOptions::kv_dtype() const {
  if (dtype.empty()) return std::nullopt;
  return parse_kv_dtype(dtype);
}

std::shared_ptr<const QueryStats> KvOptions::load_query_stats(const std::string& model_path,
                                                              const Model& model,
                                                              bool needed) const {
  if (!query_stats.empty()) return rkv::load_query_stats(query_stats, model);
  if (!needed) return nullptr;
  const std::string fallback = default_query_stats_path(model_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(fallback, ec)) return nullptr;
  return rkv::load_query_stats(fallback, model);
}

bool needs_query_stats(const std::vector<std::string>& methods) {
  for (const auto& m : methods)
    if (method_info(m).needs.query_stats) return true;
  return false;
}

void add_kv_dtype_option(CLI::App& app, std::string& dtype) {
  app.add_option("--kv-dtype", dtype,
                 "element type the KV cache stores keys and values in: f32|bf16|f16|q8_0 "
                 "(q8_0: blocks of 32 int8 with an f16 scale, head size a multiple of 32; "
                 "default: bf16 for bf16/f16 checkpoints, f32 for f32 ones)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0"}))
      ->envname("RKV_ARG_KV_DTYPE")
      ->group("KV compression");
}

void add_kv_options(CLI::App& app, const std::shared_ptr<KvOptions>& options) {
  add_kv_dtype_option(app, options->dtype);
  app.add_option("--query-stats", options->query_stats,
                 "triattention: the model's query statistics from `rkv calibrate` (default: "
                 "query_stats.safetensors in the model's directory, when there)")
      ->envname("RKV_ARG_QUERY_STATS")
      ->group("KV compression");
  for (const ParamInfo& info : compression_param_table()) {
    const std::string name(info.name), flag(info.flag);
    std::string env = "RKV_ARG_" + flag.substr(2);
    for (char& ch : env)
      ch = ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    app.add_option_function<std::string>(
           flag, [options, name](const std::string& value) { options->values[name] = value; },
           std::string(info.help) + (name == "method"
                                         ? " (default: fullkv)"
                                         : " (default: the method's preset, see `rkv methods`)"))
        ->envname(env)
        ->group("KV compression");
  }
}

}  // namespace rkv::cli
