// CompressionParams: validation, setting by name, JSON, and the parameter table that the CLI,
// the server's per-request overrides and docs/METHODS.md share ("every flag defined once").
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "compress/registry.h"
#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {
namespace {

constexpr int kMaxEntries = 1 << 24;  // keeps budget + buffer and n_all * head_dim far from int max
constexpr std::size_t kMaxListItems = 256;  // delimiters / keywords
constexpr std::size_t kMaxListText = 256;   // bytes of one delimiter / keyword

// The method's help lists the registry's methods (compression_param_table fills it in).
constexpr ParamInfo kParams[] = {
    {"method", "--kv-method", "compression method"},
    {"budget", "--kv-budget",
     "entries kept per KV head after a compression, window included (triattention: prompt "
     "included)"},
    {"buffer", "--kv-buffer",
     "new tokens accepted between two compressions (triattention: its divide_length)"},
    {"window", "--kv-window", "observation window: recent queries used for scoring, never evicted"},
    {"sinks", "--kv-sinks", "streamingllm: leading entries always kept"},
    {"kernel", "--kv-kernel",
     "1-D max-pooling kernel (odd, 1 = none); gkv pools only with pooling"},
    {"lambda", "--kv-lambda", "rkv/gkv: weight of importance against redundancy, in [0, 1]"},
    {"threshold", "--kv-threshold", "redundancy: cosine above which keys are near-duplicates"},
    {"smoothing", "--kv-smoothing", "gkv global score: max|mean|sum, or none (no score cache)"},
    {"decay", "--kv-decay", "gkv: decay a of the previous global score, in [0, 1]"},
    {"redundancy", "--kv-redundancy", "gkv: subtract the normalised redundancy (on|off)"},
    {"pooling", "--kv-pooling", "gkv: max-pool the global score with kernel (on|off)"},
    {"disable_norm", "--kv-disable-norm", "gkv: skip the per-head max-normalisations (on|off)"},
    {"ratio", "--kv-ratio", "gkv: budget grows to ratio * sequence length when larger (or none)"},
    {"shift_gamma", "--kv-shift-gamma",
     "gkv: attention-shift indicator, adds gamma * std over window rows (typ. 200, or none)"},
    {"trigger", "--kv-trigger", "when to compress: every-buffer|newline"},
    {"think_only", "--kv-think-only", "stop compressing once </think> has been generated (on|off)"},
    {"sigma", "--kv-sigma", "skipkv: weight of importance against redundancy, in [0, 1]"},
    {"tau", "--kv-tau",
     "skipkv: cosine above which an earlier sentence is redundant with a later one, in [0, 1]"},
    {"delimiters", "--kv-delimiters",
     "skipkv/steering: comma list of the texts of sentence-ending tokens (escapes \\n \\t "
     "\\r \\, \\\\)"},
    {"keywords", "--kv-keywords",
     "skipkv/steering: comma list of case-sensitive words that mark a non-execution sentence"},
    {"seed", "--kv-seed", "random: seed of the random evictions (the same seed, the same choices)"},
    {"selection", "--kv-selection",
     "triattention: per_head (the paper's: a set per KV head, every layer)|union|"
     "per_layer_perhead"},
    {"normalize", "--kv-normalize",
     "triattention: z-score each (layer, query head) row of scores before combining (on|off)"},
    {"offset_max", "--kv-offset-max",
     "triattention: the score averages future distances 1, 2, 4, ... up to this one"},
};

[[noreturn]] void bad_value(std::string_view name, std::string_view value, const char* expected) {
  throw Error("kv parameter " + std::string(name) + ": cannot parse '" + std::string(value) +
              "' as " + expected);
}

int parse_int(std::string_view name, std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) bad_value(name, text, "an integer");
  return v;
}

float parse_float(std::string_view name, std::string_view text) {
  float v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    bad_value(name, text, "a finite number");
  }
  return v;
}

bool parse_bool(std::string_view name, std::string_view text) {
  if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "0" || text == "no") return false;
  bad_value(name, text, "on|off");
}

std::optional<float> parse_optional(std::string_view name, std::string_view text) {
  if (text == "none" || text == "off" || text.empty()) return std::nullopt;
  return parse_float(name, text);
}

// "a,b\,c,\n" -> {"a", "b,c", "\n"}: a comma list whose items may hold escaped commas,
// backslashes, newlines, tabs and carriage returns.
std::vector<std::string> parse_text_list(std::string_view name, std::string_view text) {
  std::vector<std::string> items(1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ',') {
      items.emplace_back();
    } else if (c == '\\') {
      if (i + 1 == text.size()) bad_value(name, text, "a comma list (a trailing backslash)");
      const char e = text[++i];
      if (e == 'n') {
        items.back() += '\n';
      } else if (e == 't') {
        items.back() += '\t';
      } else if (e == 'r') {
        items.back() += '\r';
      } else if (e == ',' || e == '\\') {
        items.back() += e;
      } else {
        bad_value(name, text, "a comma list (escapes: \\n \\t \\r \\, \\\\)");
      }
    } else {
      items.back() += c;
    }
  }
  return items;
}

// The inverse of parse_text_list (for messages).
std::string text_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ',';
    for (char c : item) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == ',' || c == '\\') {
        out += '\\';
        out += c;
      } else {
        out += c;
      }
    }
  }
  return out;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

// The shortest decimal that round-trips the float, as a double (so JSON shows 0.1, not
// 0.10000000149011612).
double shortest(float v) {
  char buf[48];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return v;
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

std::string num(float v) {
  char buf[48];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

}  // namespace

std::span<const ParamInfo> compression_param_table() {
  static const std::string method_help = [] {
    std::string names;
    for (const auto& info : method_table())
      names += (names.empty() ? "" : "|") + std::string(info.name);
    return std::string(kParams[0].help) + ": " + names;
  }();
  static const std::vector<ParamInfo> table = [] {
    std::vector<ParamInfo> t(std::begin(kParams), std::end(kParams));
    t.front().help = method_help;
    return t;
  }();
  return table;
}

void CompressionParams::validate() const {
  const compress::MethodRecord& record = compress::method_record(method);
  const std::string m = " (kv method " + std::string(record.info.name) + ")";
  require(budget >= 1 && budget <= kMaxEntries, "kv budget must be in [1, " +
                                                    std::to_string(kMaxEntries) + "], got " +
                                                    std::to_string(budget) + m);
  require(buffer >= 1 && buffer <= kMaxEntries, "kv buffer must be in [1, " +
                                                    std::to_string(kMaxEntries) + "], got " +
                                                    std::to_string(buffer) + m);
  require(window >= 1, "kv window must be at least 1, got " + std::to_string(window) + m);
  // A method that keeps a window of recent entries must keep more than that.
  require(!record.info.reads("window") || budget > window,
          "kv budget (" + std::to_string(budget) + ") must be larger than the window (" +
              std::to_string(window) + ")" + m);
  if (record.validate != nullptr) record.validate(*this, m);
  require(kernel >= 1 && kernel % 2 == 1 && kernel <= 1023,
          "kv kernel must be an odd number in [1, 1023] (same-size pooling), got " +
              std::to_string(kernel) + m);
  require(lambda >= 0.0f && lambda <= 1.0f, "kv lambda must be in [0, 1], got " + num(lambda) + m);
  require(threshold >= -1.0f && threshold <= 1.0f,
          "kv threshold must be a cosine in [-1, 1], got " + num(threshold) + m);
  require(decay >= 0.0f && decay <= 1.0f, "kv decay must be in [0, 1], got " + num(decay) + m);
  if (ratio) {
    require(*ratio > 0.0f && *ratio <= 1.0f,
            "kv ratio must be in (0, 1] (or unset), got " + num(*ratio) + m);
  }
  if (shift_gamma) {
    require(std::isfinite(*shift_gamma) && *shift_gamma >= 0.0f,
            "kv shift_gamma must be a finite number >= 0 (or unset), got " + num(*shift_gamma) + m);
    require(window >= 2,
            "kv shift_gamma needs a window of at least 2 (the std over the window "
            "rows is unbiased), got window " +
                std::to_string(window) + m);
  }
  require(sigma >= 0.0f && sigma <= 1.0f, "kv sigma must be in [0, 1], got " + num(sigma) + m);
  require(tau >= 0.0f && tau <= 1.0f,
          "kv tau must be a cosine in [0, 1] (the paper uses 0.95-0.99), got " + num(tau) + m);
  const auto check_list = [&](const std::vector<std::string>& items, const char* what) {
    require(!items.empty() && items.size() <= kMaxListItems,
            std::string("kv ") + what + " must list 1 to " + std::to_string(kMaxListItems) +
                " texts, got " + std::to_string(items.size()) + m);
    for (const auto& item : items) {
      require(!item.empty() && item.size() <= kMaxListText,
              std::string("kv ") + what + " must not contain an empty text or one longer than " +
                  std::to_string(kMaxListText) + " bytes, got '" + text_list(items) + "'" + m);
    }
  };
  check_list(delimiters, "delimiters");
  check_list(keywords, "keywords");
  require(offset_max >= 1 && offset_max <= (1 << 30),
          "kv offset_max must be in [1, 1073741824], got " + std::to_string(offset_max) + m);
  require(smoothing == Smoothing::none || smoothing == Smoothing::max ||
              smoothing == Smoothing::mean || smoothing == Smoothing::sum,
          "kv smoothing has an invalid value" + m);
}

int CompressionParams::budget_for(std::int64_t seq_len) const {
  if (!ratio) return budget;
  const double grown = std::floor(static_cast<double>(seq_len) * static_cast<double>(*ratio));
  if (grown <= budget) return budget;
  return grown >= kMaxEntries ? kMaxEntries : static_cast<int>(grown);
}

void CompressionParams::set(std::string_view name, std::string_view value) {
  if (name == "method") {
    method = parse_method(value);
  } else if (name == "budget") {
    budget = parse_int(name, value);
  } else if (name == "buffer") {
    buffer = parse_int(name, value);
  } else if (name == "window") {
    window = parse_int(name, value);
  } else if (name == "sinks") {
    sinks = parse_int(name, value);
  } else if (name == "kernel") {
    kernel = parse_int(name, value);
  } else if (name == "lambda") {
    lambda = parse_float(name, value);
  } else if (name == "threshold") {
    threshold = parse_float(name, value);
  } else if (name == "smoothing") {
    smoothing = parse_smoothing(value);
  } else if (name == "decay") {
    decay = parse_float(name, value);
  } else if (name == "redundancy") {
    redundancy = parse_bool(name, value);
  } else if (name == "pooling") {
    pooling = parse_bool(name, value);
  } else if (name == "disable_norm") {
    disable_norm = parse_bool(name, value);
  } else if (name == "ratio") {
    ratio = parse_optional(name, value);
  } else if (name == "shift_gamma") {
    shift_gamma = parse_optional(name, value);
  } else if (name == "trigger") {
    trigger = parse_trigger(value);
  } else if (name == "think_only") {
    think_only = parse_bool(name, value);
  } else if (name == "sigma") {
    sigma = parse_float(name, value);
  } else if (name == "tau") {
    tau = parse_float(name, value);
  } else if (name == "delimiters") {
    delimiters = parse_text_list(name, value);
  } else if (name == "keywords") {
    keywords = parse_text_list(name, value);
  } else if (name == "selection") {
    selection = parse_selection(value);
  } else if (name == "normalize") {
    normalize = parse_bool(name, value);
  } else if (name == "offset_max") {
    offset_max = parse_int(name, value);
  } else if (name == "seed") {
    std::uint32_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size())
      bad_value(name, value, "an integer in [0, 4294967295]");
    seed = v;
  } else {
    std::string names;
    for (const auto& p : kParams) names += (names.empty() ? "" : ", ") + std::string(p.name);
    throw Error("unknown kv parameter '" + std::string(name) + "' (expected one of: " + names +
                ")");
  }
}

std::string CompressionParams::to_json() const {
  nlohmann::json j;
  j["method"] = method_name(method);
  j["budget"] = budget;
  j["buffer"] = buffer;
  j["window"] = window;
  j["sinks"] = sinks;
  j["kernel"] = kernel;
  j["lambda"] = shortest(lambda);
  j["threshold"] = shortest(threshold);
  j["smoothing"] = smoothing_name(smoothing);
  j["decay"] = shortest(decay);
  j["redundancy"] = redundancy;
  j["pooling"] = pooling;
  j["disable_norm"] = disable_norm;
  j["ratio"] = ratio ? nlohmann::json(shortest(*ratio)) : nlohmann::json(nullptr);
  j["shift_gamma"] = shift_gamma ? nlohmann::json(shortest(*shift_gamma)) : nlohmann::json(nullptr);
  j["trigger"] = trigger_name(trigger);
  j["think_only"] = think_only;
  j["sigma"] = shortest(sigma);
  j["tau"] = shortest(tau);
  j["delimiters"] = delimiters;
  j["keywords"] = keywords;
  j["seed"] = seed;
  j["selection"] = selection_name(selection);
  j["normalize"] = normalize;
  j["offset_max"] = offset_max;
  // Delimiters and keywords are raw token bytes and need not be valid UTF-8 (found by
  // fuzz/compression_params.cpp): invalid bytes are written as U+FFFD instead of throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string format_text_list(const std::vector<std::string>& items) {
  return text_list(items);
}

std::vector<std::string> CompressionParams::default_sentence_delimiters() {
  return {"\n", ".\n", ")\n", "\n\n", ".\n\n", ")\n\n"};
}

std::vector<std::string> CompressionParams::default_sentence_keywords() {
  return {"Wait", "Alternatively", "again"};
}

}  // namespace rkv
