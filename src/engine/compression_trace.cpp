#include "engine/compression_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rkv {

namespace {
nlohmann::json summary(const std::vector<float>& v) {
  if (v.empty()) return nullptr;
  double sum = 0.0;
  for (float x : v) sum += x;
  return {{"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())},
          {"mean", sum / static_cast<double>(v.size())}};
}
}  // namespace

CompressionTrace::CompressionTrace(const std::string& path) : out_(path) {
  if (!out_) throw Error(path + ": cannot open the trace file for writing");
}

void CompressionTrace::record(const CompressionEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int heads = static_cast<int>(e.selection->kept.size());
  for (int h = 0; h < heads; ++h) {
    const std::int32_t* positions = e.cache->positions(e.layer, h);
    std::vector<std::int32_t> kept_positions;
    for (std::int32_t index : e.selection->kept[static_cast<std::size_t>(h)])
      kept_positions.push_back(positions[index]);
    nlohmann::json line = {{"step", e.step},
                           {"layer", e.layer},
                           {"head", h},
                           {"method", std::string(method_name(e.params->method))},
                           {"n_before", e.n_before},
                           {"n_after", kept_positions.size()},
                           {"kept_positions", kept_positions}};
    if (e.diagnostics != nullptr && static_cast<int>(e.diagnostics->heads.size()) > h) {
      const HeadDiagnostics& d = e.diagnostics->heads[static_cast<std::size_t>(h)];
      line["importance"] = summary(d.importance);
      line["redundancy"] = summary(d.redundancy);
      line["final_score"] = summary(d.final_score);
    }
    out_ << line.dump() << '\n';
    ++lines_;
  }
  out_.flush();
}

}  // namespace rkv
