// The method registry: one record per method, each built in its own file
// (src/compress/methods/<name>.cpp), listed in one table (registry.cpp). A record is the public
// MethodInfo (include/rkv/compression.h: name, defaults, parameters, needs, the properties the
// engine asks) plus what only the compress library uses: the stages the method runs and its own
// validation.
//
// Why a table of functions and not self-registering files: librkv is a static library, and a
// method file that only registers itself from a static initializer would be dropped by the linker
// (nothing refers to it). One explicit row per method also fixes the order `rkv methods` prints.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compress/pipeline.h"
#include "compress/whole_pass.h"
#include "rkv/compression.h"

namespace rkv::compress {

struct MethodRecord {
  MethodInfo info;
  // The stages (the scoring pipeline, pipeline.h) this method runs with these parameters.
  Pipeline (*stages)(const CompressionParams& params) = nullptr;
  // Checks of its own beyond CompressionParams::validate's common ones, or null. Throws
  // rkv::Error; `method_suffix` (" (kv method NAME)") ends every message.
  void (*validate)(const CompressionParams& params, const std::string& method_suffix) = nullptr;
  // A whole_pass method (info.timing): its trigger and its plan of every layer at once
  // (whole_pass.h); null for a per_layer one.
  bool (*whole_pass_due)(const CompressionParams& params, int n_all, int prefix,
                         std::int64_t next_position) = nullptr;
  SequencePlan (*plan_whole_pass)(const SequenceView& view, const CompressionParams& params,
                                  ThreadPool* pool) = nullptr;
};

// The records, in the order of the Method enum.
std::span<const MethodRecord> method_records();
const MethodRecord& method_record(Method method);

// The HeadDiagnostics vectors by member name, in declaration order (MethodInfo::trace_fields).
struct DiagnosticField {
  std::string_view name;
  bool (*filled)(const HeadDiagnostics& diagnostics);
};
std::span<const DiagnosticField> diagnostic_fields();

// ---- what the records share (methods/shared.cpp) ------------------------------------------------

// A record of a method that compresses per layer, decided alone (no needs, no trace fields),
// whose preset is CompressionParams' member defaults.
MethodRecord new_record(Method method, std::string_view name, std::string_view summary,
                        std::string_view spec);
// The parameters every compressing method reads (method, budget, buffer, and the engine's
// trigger and think_only), then `own`.
std::vector<std::string_view> compressing_params(std::initializer_list<std::string_view> own);

// SnapKV's score (ALGORITHMS.md 2): attention of the window queries over the candidates (GQA max
// on the logits), max-pooled with `kernel`, the top budget - window kept.
Pipeline window_importance(const CompressionParams& params);
// R-KV's (ALGORITHMS.md 3): the same, mixed as mix * importance - (1 - mix) * redundancy.
Pipeline importance_minus_redundancy(const CompressionParams& params, float mix);
// The trace fields of those two scores.
std::vector<std::string_view> window_importance_fields();
std::vector<std::string_view> importance_minus_redundancy_fields();

}  // namespace rkv::compress
