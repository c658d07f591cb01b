// The method table as `rkv methods` prints it: JSON, and the Markdown table of docs/METHODS.md.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rkv/compression.h"

namespace rkv {
namespace {

using json = nlohmann::json;

json needs_json(const StageNeeds& needs) {
  return {{"window_queries", needs.window_queries}, {"keys", needs.keys},
          {"entry_state", needs.entry_state},       {"step_attention", needs.step_attention},
          {"positions", needs.positions},           {"reads_entry_state", needs.reads_entry_state},
          {"token_text", needs.token_text},         {"final_hidden", needs.final_hidden},
          {"query_stats", needs.query_stats}};
}

// The defaults of the parameters `info` reads, in the order of its `params`.
std::vector<std::pair<std::string, json>> read_defaults(const MethodInfo& info) {
  const json all = json::parse(info.defaults.to_json());
  std::vector<std::pair<std::string, json>> out;
  for (std::string_view name : info.params) out.emplace_back(name, all.at(std::string(name)));
  return out;
}

// One default as the Markdown table shows it: `name` `value`, with on/off, unset, and lists as
// the comma lists the flags take.
std::string markdown_setting(const std::string& name, const json& value) {
  std::string text;
  if (value.is_null()) {
    text = "unset";
  } else if (value.is_boolean()) {
    text = value.get<bool>() ? "on" : "off";
  } else if (value.is_string()) {
    text = value.get<std::string>();
  } else if (value.is_array()) {
    text = format_text_list(value.get<std::vector<std::string>>());
  } else {
    text = value.dump();
  }
  return "`" + name + "` `" + text + "`";
}

}  // namespace

std::string methods_json() {
  json out = json::array();
  for (const auto& info : method_table()) {
    json used = json::object();
    for (const auto& [name, value] : read_defaults(info)) used[name] = value;
    out.push_back({{"name", info.name},
                   {"summary", info.summary},
                   {"spec", info.spec},
                   {"needs", needs_json(info.needs)},
                   {"defaults", used},
                   {"compresses", info.compresses},
                   {"initial_state",
                    has_state(info.initial_state) ? json(info.initial_state) : json(nullptr)},
                   {"timing", info.timing == Timing::per_layer ? "per_layer" : "whole_pass"},
                   {"case_dump", info.case_dump},
                   {"trace_fields", info.trace_fields}});
  }
  return out.dump(2);
}

std::string methods_markdown() {
  // The settings every compressing method reads with the same default are said once, above.
  std::vector<std::pair<std::string, json>> common;
  bool first = true;
  for (const auto& info : method_table()) {
    if (!info.compresses) continue;
    const auto settings = read_defaults(info);
    if (first) common = settings;
    first = false;
    std::erase_if(common, [&](const auto& c) {
      return c.first == "method" ||
             std::find(settings.begin(), settings.end(), c) == settings.end();
    });
  }
  std::string out;
  for (const auto& [name, value] : common) {
    out += (out.empty() ? "Every method that compresses reads " : ", ") +
           markdown_setting(name, value);
  }
  if (!out.empty()) out += "; the table lists the other parameters each reads.\n\n";
  out += "| method | parameters (defaults) | needs | spec |\n|---|---|---|---|\n";
  for (const auto& info : method_table()) {
    std::string params, needs;
    for (const auto& setting : read_defaults(info)) {
      if (setting.first == "method" ||
          std::find(common.begin(), common.end(), setting) != common.end()) {
        continue;
      }
      params += (params.empty() ? "" : ", ") + markdown_setting(setting.first, setting.second);
    }
    const json all_needs = needs_json(info.needs);
    for (const auto& [name, value] : all_needs.items()) {
      if (value.get<bool>()) needs += (needs.empty() ? "`" : ", `") + name + "`";
    }
    out += "| `" + std::string(info.name) + "` | " + (params.empty() ? "none" : params) + " | " +
           (needs.empty() ? "none" : needs) + " | " + std::string(info.spec) + " |\n";
  }
  return out;
}

}  // namespace rkv
