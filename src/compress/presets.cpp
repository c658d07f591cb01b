// The method table (presets as data) and the names of methods, smoothings and triggers.
// Parameter parsing and validation live in params.cpp.
#include <array>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {
namespace {

template <typename Enum, std::size_t N>
Enum parse_name(std::string_view what, std::string_view name,
                const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [text, value] : names) {
    if (text == name) return value;
  }
  std::string accepted;
  for (const auto& [text, value] : names)
    accepted += (accepted.empty() ? "" : ", ") + std::string(text);
  throw Error("unknown " + std::string(what) + " '" + std::string(name) +
              "' (expected one of: " + accepted + ")");
}

template <typename Enum, std::size_t N>
std::string_view name_of(Enum value,
                         const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [text, v] : names) {
    if (v == value) return text;
  }
  return "?";
}

constexpr std::array<std::pair<std::string_view, Method>, 8> kMethodNames{{
    {"fullkv", Method::fullkv},
    {"streamingllm", Method::streamingllm},
    {"h2o", Method::h2o},
    {"snapkv", Method::snapkv},
    {"rkv", Method::rkv},
    {"gkv", Method::gkv},
    {"skipkv", Method::skipkv},
    {"random", Method::random},
}};
constexpr std::array<std::pair<std::string_view, Smoothing>, 4> kSmoothingNames{{
    {"none", Smoothing::none},
    {"max", Smoothing::max},
    {"mean", Smoothing::mean},
    {"sum", Smoothing::sum},
}};
constexpr std::array<std::pair<std::string_view, Trigger>, 2> kTriggerNames{{
    {"every-buffer", Trigger::every_buffer},
    {"newline", Trigger::newline},
}};

CompressionParams preset(Method method) {
  CompressionParams p;  // member defaults: ALGORITHMS.md 1 and the rkv preset
  p.method = method;
  switch (method) {
    case Method::fullkv:
    case Method::streamingllm:
    case Method::h2o:
    case Method::rkv:
    case Method::skipkv:  // R-KV's scores (kernel 7, T 0.5, window 8) mixed with sigma [0.1]
    case Method::random:  // window 8, as the scoring methods
      break;
    case Method::snapkv:
      p.kernel = 7;
      break;
    case Method::gkv:
      // G-KV's own recipe (scripts/inference.sh): window 16, mix 0.5, cache on with max smoothing
      // and decay 0.8, redundancy on, pooling off (kernel 5 when turned on).
      p.window = 16;
      p.lambda = 0.5f;
      p.kernel = 5;
      p.smoothing = Smoothing::max;
      p.decay = 0.8f;
      p.redundancy = true;
      p.pooling = false;
      break;
  }
  return p;
}

// The parameters every compressing method reads (the trigger ones are the engine's).
std::vector<std::string_view> uses(std::initializer_list<std::string_view> own) {
  std::vector<std::string_view> names = {"method", "budget", "buffer", "trigger", "think_only"};
  names.insert(names.end(), own.begin(), own.end());
  return names;
}

std::vector<MethodInfo> build_table() {
  std::vector<MethodInfo> t;
  t.push_back({Method::fullkv,
               "fullkv",
               "never evict: the baseline every figure is relative to",
               "ALGORITHMS.md 4",
               StageNeeds{},
               false,
               preset(Method::fullkv),
               {"method"}});
  t.push_back({Method::streamingllm, "streamingllm",
               "keep the first `sinks` entries and the most recent budget - sinks; no scores",
               "ALGORITHMS.md 4", StageNeeds{}, true, preset(Method::streamingllm),
               uses({"sinks"})});
  t.push_back({Method::h2o, "h2o",
               "heavy hitters: attention accumulated at every decoding step (max over the query "
               "group, accumulate_h2o) plus the recent window",
               "ALGORITHMS.md 4", StageNeeds{false, false, true, true}, false, preset(Method::h2o),
               uses({"window"})});
  t.push_back({Method::snapkv, "snapkv",
               "window attention over the candidates (GQA max on logits), max-pooled (kernel 7)",
               "ALGORITHMS.md 2, 4", StageNeeds{true, true, false, false}, true,
               preset(Method::snapkv), uses({"window", "kernel"})});
  t.push_back({Method::rkv, "rkv",
               "R-KV: lambda * importance - (1 - lambda) * redundancy of the keys",
               "ALGORITHMS.md 2, 3, 4", StageNeeds{true, true, false, false}, true,
               preset(Method::rkv), uses({"window", "kernel", "lambda", "threshold"})});
  t.push_back({Method::gkv, "gkv",
               "G-KV: normalised local attention smoothed into a global score cache, minus the "
               "normalised redundancy",
               "ALGORITHMS.md 2 (G-KV variant), 3, 4", StageNeeds{true, true, false, false}, false,
               preset(Method::gkv),
               uses({"window", "kernel", "lambda", "threshold", "smoothing", "decay", "redundancy",
                     "pooling", "disable_norm", "ratio", "shift_gamma"})});
  StageNeeds skipkv_needs{true, true, false, false};
  skipkv_needs.positions = true;
  t.push_back({Method::skipkv, "skipkv",
               "SkipKV: sigma * importance - (1 - sigma) * redundancy - the penalty of the entry's "
               "sentence when a later sentence repeats it (cosine of mean final hidden states > "
               "tau); adaptive steering is separate (--steering)",
               "ALGORITHMS.md 2, 3, 5", skipkv_needs, true, preset(Method::skipkv),
               uses({"window", "kernel", "threshold", "sigma", "tau", "delimiters", "keywords"})});
  t.push_back({Method::random, "random",
               "the floor every scoring method must beat: keep the window and budget - window "
               "entries drawn uniformly at random per KV head (seeded by seed, layer, head and "
               "sequence length)",
               "not in ALGORITHMS.md (issue 19; docs/METHODS.md)", StageNeeds{}, false,
               preset(Method::random), uses({"window", "seed"})});
  return t;
}

}  // namespace

Method parse_method(std::string_view name) {
  return parse_name("kv method", name, kMethodNames);
}
std::string_view method_name(Method method) {
  return name_of(method, kMethodNames);
}
Smoothing parse_smoothing(std::string_view name) {
  return parse_name("gkv smoothing", name, kSmoothingNames);
}
std::string_view smoothing_name(Smoothing smoothing) {
  return name_of(smoothing, kSmoothingNames);
}
Trigger parse_trigger(std::string_view name) {
  return parse_name("kv trigger", name, kTriggerNames);
}
std::string_view trigger_name(Trigger trigger) {
  return name_of(trigger, kTriggerNames);
}

CompressionParams CompressionParams::defaults(Method method) {
  return preset(method);
}

std::span<const MethodInfo> method_table() {
  static const std::vector<MethodInfo> table = build_table();
  return table;
}

const MethodInfo& method_info(Method method) {
  for (const auto& info : method_table()) {
    if (info.method == method) return info;
  }
  throw Error("no method table entry for method " + std::to_string(static_cast<int>(method)));
}

std::string methods_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& info : method_table()) {
    nlohmann::json needs = {{"window_queries", info.needs.window_queries},
                            {"keys", info.needs.keys},
                            {"entry_state", info.needs.entry_state},
                            {"step_attention", info.needs.step_attention},
                            {"positions", info.needs.positions}};
    const nlohmann::json all = nlohmann::json::parse(info.defaults.to_json());
    nlohmann::json used = nlohmann::json::object();
    for (std::string_view name : info.params) used[std::string(name)] = all.at(std::string(name));
    out.push_back({{"name", info.name},
                   {"summary", info.summary},
                   {"spec", info.spec},
                   {"needs", needs},
                   {"defaults", used}});
  }
  return out.dump(2);
}

}  // namespace rkv
