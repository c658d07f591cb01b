// The names of smoothings and triggers (methods are named by their records, registry.cpp).
#include "compress/names.h"

#include <array>
#include <string>

#include "core/error.h"
#include "rkv/compression.h"

namespace rkv {
namespace compress {

void throw_unknown_name(std::string_view what, std::string_view name,
                        const std::vector<std::string_view>& accepted) {
  std::string list;
  for (std::string_view text : accepted) list += (list.empty() ? "" : ", ") + std::string(text);
  throw Error("unknown " + std::string(what) + " '" + std::string(name) +
              "' (expected one of: " + list + ")");
}

}  // namespace compress

namespace {

template <typename Enum, std::size_t N>
Enum parse_name(std::string_view what, std::string_view name,
                const std::array<std::pair<std::string_view, Enum>, N>& names) {
  std::vector<std::string_view> accepted;
  for (const auto& [text, value] : names) {
    if (text == name) return value;
    accepted.push_back(text);
  }
  compress::throw_unknown_name(what, name, accepted);
}

template <typename Enum, std::size_t N>
std::string_view name_of(Enum value,
                         const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [text, v] : names) {
    if (v == value) return text;
  }
  return "?";
}

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
constexpr std::array<std::pair<std::string_view, TriSelection>, 3> kSelectionNames{{
    {"per_head", TriSelection::per_head},
    {"union", TriSelection::union_all},
    {"per_layer_perhead", TriSelection::per_layer_perhead},
}};

}  // namespace

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
TriSelection parse_selection(std::string_view name) {
  return parse_name("triattention selection", name, kSelectionNames);
}
std::string_view selection_name(TriSelection selection) {
  return name_of(selection, kSelectionNames);
}

}  // namespace rkv
