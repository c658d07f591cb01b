// Reading golden case files, and mapping the references' parameter names onto CompressionParams.
#include <fstream>
#include <sstream>
#include <string>

#include "compress/golden_case.h"
#include "core/error.h"

namespace rkv::compress {

using json = nlohmann::json;

json parse_case_json(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      clean += c;
      if (c == '\\' && i + 1 < text.size()) {
        clean += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view lit : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, lit.size()) == lit) {
        clean += "null";
        i += lit.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) clean += c;
  }
  return json::parse(clean);
}

json load_case(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open case file " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_case_json(text.str());
  } catch (const json::exception& e) {
    throw Error(path.string() + ": not valid JSON: " + e.what());
  }
}

CompressionParams params_from_case(const json& gc) {
  const std::string method = gc.at("method").get<std::string>();
  const json& P = gc.at("params");
  CompressionParams p = CompressionParams::defaults(parse_method(method));
  auto take_int = [&](const char* name, int& field) {
    if (P.contains(name)) field = P.at(name).get<int>();
  };
  auto take_float = [&](const char* name, float& field) {
    if (P.contains(name)) field = P.at(name).get<float>();
  };
  auto take_bool = [&](const char* name, bool& field) {
    if (P.contains(name)) field = P.at(name).get<bool>();
  };
  take_int("budget", p.budget);
  take_int("window_size", p.window);
  take_int("kernel_size", p.kernel);
  take_int("first_tokens", p.sinks);
  take_int("append_per_step", p.buffer);
  take_float("mix_lambda", p.lambda);
  take_float("similarity_threshold", p.threshold);
  if (p.method == Method::gkv) {
    take_bool("enable_pooling", p.pooling);
    take_bool("suppressing_redundancy", p.redundancy);
    take_bool("disable_norm", p.disable_norm);
    take_float("alpha", p.decay);
    p.smoothing = parse_smoothing(P.value("smooth_method", std::string("max")));
    if (!P.value("enable_score_cache", true)) p.smoothing = Smoothing::none;
    if (P.value("compress_mode", std::string("budget")) == "ratio") {
      p.ratio = P.at("compress_ratio").get<float>();
    }
    if (P.value("attention_shift_indicator", false)) p.shift_gamma = P.value("gamma", 200.0f);
    if (P.value("gqa_pooling", std::string("max")) != "max") {
      throw Error("gqa_pooling other than max is not supported");
    }
    if (P.value("triton_similarity", false)) {
      throw Error("triton_similarity is not reproduced (golden README 7.8)");
    }
  } else if (P.value("retain_direction", std::string("last")) != "last") {
    throw Error("only retain_direction 'last' is supported by the rkv policy");
  }
  p.validate();
  return p;
}

}  // namespace rkv::compress
