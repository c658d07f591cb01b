// Replays a golden compression case (../shared/golden/compression, format in its README) through
// the library. Shared by `rkv policy-run` and the golden tests.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "rkv/compression.h"

namespace rkv::compress {

// Parses a case file's text. The generator wrote Python's non-standard `Infinity`, `-Infinity` and
// `NaN` literals in some `numerics` diagnostics; outside strings they are read as null.
nlohmann::json parse_case_json(std::string_view text);
// Reads and parses a case file; throws rkv::Error naming the file when it cannot.
nlohmann::json load_case(const std::filesystem::path& path);

// The case's `params` (the reference's own names: budget, window_size, kernel_size, mix_lambda,
// enable_score_cache, smooth_method, alpha, ...) as CompressionParams. Throws rkv::Error for a
// setting rkv does not reproduce (e.g. gqa_pooling other than max, triton_similarity).
CompressionParams params_from_case(const nlohmann::json& golden_case);

struct CaseOptions {
  bool include_cache = false;  // also output key_out / value_out (large)
};

// Runs the case's inputs (single call, multi-step threading per README 3.4, the prefill-seeded
// h2o case, or the redundancy function alone) and returns an object shaped like its `expected`.
nlohmann::json run_case(const nlohmann::json& golden_case, const CaseOptions& options = {});

// TriAttention's cases (method triattention or triattention_calibration; spec
// ../shared/spec/TRIATTENTION.md section 9): run_case hands them to run_triattention_case, whose
// output has the case's own field names: the calibration statistics; for one compression its
// scores, kept_indices and kept_positions per KV head (per layer too for per_layer_perhead) and
// the other selection modes on the same inputs; for a stream, its `rounds` and
// `final_cache_positions`.
bool is_triattention_case(const nlohmann::json& golden_case);
nlohmann::json run_triattention_case(const nlohmann::json& golden_case);

}  // namespace rkv::compress
