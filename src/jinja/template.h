// rkv's Jinja interpreter: renders chat templates exactly as Hugging Face transformers'
// apply_chat_template does (Jinja2 3.1's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks, loop controls and {% generation %}, its tojson, raise_exception and
// strftime_now). docs/USAGE.md lists the limits and the known differences from Jinja2.
//
//   auto t = rkv::jinja::Template::compile(text);          // throws Error(TemplateSyntaxError)
//   std::string prompt = t.render(context_json, options);  // throws Error(kind, message)
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace rkv::jinja {

struct Stmt;

struct RenderOptions {
  // What strftime_now() formats (naive local time); the current local time when unset.
  std::optional<std::tm> now;
  // Resource bounds. Templates are untrusted: whatever they do, rendering ends within these, with
  // Error(LimitExceeded) when one is reached.
  std::size_t max_output_bytes = 64u << 20;  // the rendered text, and any one string built
  std::uint64_t max_work = 50'000'000;  // evaluation steps plus bytes (/4) and items (x4) built
  int max_call_depth = 256;             // nested macro calls and recursive loops
};

// A JSON value as a template variable: objects keep their key order, null is none.
Value from_json(const nlohmann::ordered_json& json);

// Template variables in binding order; binding a name again replaces its value in place (as
// Python's **{**a, **b} does for apply_chat_template's keyword arguments).
using Variables = std::vector<std::pair<std::string, Value>>;
void bind(Variables& variables, const std::string& name, Value value);

class Template {
 public:
  static Template compile(std::string_view source);

  // Renders with `variables` bound (besides the globals: range, dict, namespace, cycler,
  // joiner, raise_exception, strftime_now, ...).
  std::string render(const std::vector<std::pair<std::string, Value>>& variables,
                     const RenderOptions& options = {}) const;
  // Renders with the keys of a JSON object bound as variables.
  std::string render(const nlohmann::ordered_json& variables,
                     const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

// The date of a YYYY-MM-DD string at 12:00:00, for RenderOptions::now; nullopt when malformed.
std::optional<std::tm> parse_date(std::string_view date);

}  // namespace rkv::jinja
