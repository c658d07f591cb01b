// The registry: the one table of method records, and the lookups by enum and by name that
// everything else goes through.
#include "compress/registry.h"

#include <algorithm>

#include "compress/names.h"
#include "core/error.h"

namespace rkv::compress {

// The methods, one file each in methods/, in the order of the Method enum.
MethodRecord fullkv_method();
MethodRecord streamingllm_method();
MethodRecord h2o_method();
MethodRecord snapkv_method();
MethodRecord rkv_method();
MethodRecord gkv_method();
MethodRecord skipkv_method();
MethodRecord random_method();
MethodRecord triattention_method();

namespace {

std::vector<MethodRecord> build_records() {
  std::vector<MethodRecord> records = {
      fullkv_method(), streamingllm_method(), h2o_method(),    snapkv_method(),      rkv_method(),
      gkv_method(),    skipkv_method(),       random_method(), triattention_method()};
  const auto fields = diagnostic_fields();
  const auto field_rank = [&](std::string_view name) {
    const auto it = std::find_if(fields.begin(), fields.end(),
                                 [&](const DiagnosticField& f) { return f.name == name; });
    if (it == fields.end())
      throw Error("method record: unknown trace field '" + std::string(name) + "'");
    return it - fields.begin();
  };
  for (std::size_t i = 0; i < records.size(); ++i) {
    MethodInfo& info = records[i].info;
    if (info.method != static_cast<Method>(i) || records[i].stages == nullptr) {
      throw Error("method registry: row " + std::to_string(i) + " (" + std::string(info.name) +
                  ") is out of the Method enum's order or has no stages");
    }
    const bool whole = info.timing == Timing::whole_pass;
    if (whole != (records[i].whole_pass_due != nullptr) ||
        whole != (records[i].plan_whole_pass != nullptr)) {
      throw Error("method registry: " + std::string(info.name) +
                  " must have a whole-pass trigger and plan exactly when its timing is whole_pass");
    }
    std::sort(
        info.trace_fields.begin(), info.trace_fields.end(),
        [&](std::string_view a, std::string_view b) { return field_rank(a) < field_rank(b); });
  }
  return records;
}

}  // namespace

std::span<const DiagnosticField> diagnostic_fields() {
  // clang-format off
#define RKV_DIAGNOSTIC_FIELD(member) \
  DiagnosticField{#member, [](const HeadDiagnostics& d) { return !d.member.empty(); }}
  // clang-format on
  static const DiagnosticField fields[] = {
      RKV_DIAGNOSTIC_FIELD(attention),        RKV_DIAGNOSTIC_FIELD(attention_mean),
      RKV_DIAGNOSTIC_FIELD(shift_std),        RKV_DIAGNOSTIC_FIELD(local_shifted),
      RKV_DIAGNOSTIC_FIELD(local_normalized), RKV_DIAGNOSTIC_FIELD(old_score),
      RKV_DIAGNOSTIC_FIELD(global_score),     RKV_DIAGNOSTIC_FIELD(importance),
      RKV_DIAGNOSTIC_FIELD(redundancy_full),  RKV_DIAGNOSTIC_FIELD(redundancy_raw),
      RKV_DIAGNOSTIC_FIELD(redundancy),       RKV_DIAGNOSTIC_FIELD(sentence_penalty),
      RKV_DIAGNOSTIC_FIELD(final_score),      RKV_DIAGNOSTIC_FIELD(top_k),
  };
#undef RKV_DIAGNOSTIC_FIELD
  return fields;
}

std::span<const MethodRecord> method_records() {
  static const std::vector<MethodRecord> records = build_records();
  return records;
}

const MethodRecord& method_record(Method method) {
  const auto records = method_records();
  const auto i = static_cast<std::size_t>(method);
  if (i >= records.size()) {
    throw Error("no method record for method " + std::to_string(static_cast<int>(method)));
  }
  return records[i];
}

}  // namespace rkv::compress

namespace rkv {

std::span<const MethodInfo> method_table() {
  static const std::vector<MethodInfo> table = [] {
    std::vector<MethodInfo> infos;
    for (const auto& record : compress::method_records()) infos.push_back(record.info);
    return infos;
  }();
  return table;
}

const MethodInfo& method_info(Method method) {
  compress::method_record(method);  // throws for a value outside the registry
  return method_table()[static_cast<std::size_t>(method)];
}

const MethodInfo& method_info(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& info : method_table()) {
    if (info.name == name) return info;
    names.push_back(info.name);
  }
  compress::throw_unknown_name("kv method", name, names);
}

Method parse_method(std::string_view name) {
  return method_info(name).method;
}

std::string_view method_name(Method method) {
  const auto table = method_table();
  const auto i = static_cast<std::size_t>(method);
  return i < table.size() ? table[i].name : "?";
}

bool MethodInfo::reads(std::string_view param) const {
  return std::find(params.begin(), params.end(), param) != params.end();
}

CompressionParams CompressionParams::defaults(Method method) {
  return method_info(method).defaults;
}

CompressionParams CompressionParams::defaults(std::string_view method_name) {
  return method_info(method_name).defaults;
}

CompressionParams CompressionParams::none() {
  for (const auto& info : method_table()) {
    if (!info.compresses) return info.defaults;
  }
  throw Error("method registry: no method that never compresses");
}

const MethodInfo& CompressionParams::info() const {
  return method_info(method);
}

}  // namespace rkv
