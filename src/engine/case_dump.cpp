#include "engine/case_dump.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"

namespace rkv {

using nlohmann::json;

CaseDumper::CaseDumper(const std::filesystem::path& dir, Method method, int limit)
    : dir_(dir), limit_(limit) {
  if (!method_info(method).case_dump) {
    // The methods whose records say the golden case format can hold them: "a, b and c".
    std::vector<std::string_view> names;
    for (const MethodInfo& info : method_table())
      if (info.case_dump) names.push_back(info.name);
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i)
      list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
    throw Error("--dump-case supports " + list + "; " + std::string(method_name(method)) +
                " carries per-entry state that the case format cannot hold");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create the case directory: " + ec.message());
}

void CaseDumper::record(const CompressionEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (written_ >= limit_) return;
  const LayerView& v = *e.view;
  const CompressionParams& p = *e.params;
  const std::size_t d = static_cast<std::size_t>(v.head_dim);
  json query = json::array(), key = json::array(), value = json::array(), positions = json::array();
  for (int q = 0; q < v.q_heads; ++q) {
    json rows = json::array();
    for (int w = 0; w < v.window; ++w) {
      const float* row = v.queries + (static_cast<std::size_t>(q) * v.window + w) * d;
      rows.push_back(std::vector<float>(row, row + d));
    }
    query.push_back(std::move(rows));
  }
  for (int h = 0; h < v.kv_heads; ++h) {
    json krows = json::array(), vrows = json::array();
    std::vector<float> values(static_cast<std::size_t>(v.n_all) * d);
    kernels::kv_to_f32(e.cache->values(e.layer, h), values.data());
    for (int i = 0; i < v.n_all; ++i) {
      krows.push_back(std::vector<float>(v.keys[h] + i * d, v.keys[h] + (i + 1) * d));
      vrows.push_back(std::vector<float>(values.data() + i * d, values.data() + (i + 1) * d));
    }
    key.push_back(std::move(krows));
    value.push_back(std::move(vrows));
    positions.push_back(std::vector<std::int32_t>(v.positions[h], v.positions[h] + v.n_all));
  }
  const std::string id = std::string(method_name(p.method)) + "_step" + std::to_string(e.step) +
                         "_layer" + std::to_string(e.layer);
  json c = {
      {"format_version", 1},
      {"case_id", id},
      {"method", std::string(method_name(p.method))},
      {"preset", std::string(method_name(p.method))},
      {"source", "rkv generate --dump-case (a real compression of the engine)"},
      {"description",
       "layer " + std::to_string(e.layer) + " at " + std::to_string(e.step) + " tokens"},
      {"params",
       {{"budget", p.budget},
        {"window_size", p.window},
        {"kernel_size", p.kernel},
        {"mix_lambda", p.lambda},
        {"first_tokens", p.sinks},
        {"similarity_threshold", p.threshold},
        {"retain_direction", "last"}}},
      {"shapes",
       {{"batch", 1},
        {"q_heads", v.q_heads},
        {"kv_heads", v.kv_heads},
        {"head_dim", v.head_dim},
        {"q_len", v.window},
        {"kv_len", v.n_all},
        {"n_candidates", v.n_all - v.window},
        {"kept_per_head", e.selection->kept.empty() ? 0 : e.selection->kept[0].size()}}},
      {"inputs", {{"query", query}, {"key", key}, {"value", value}, {"positions", positions}}},
      {"expected", {{"compressed", true}, {"kept_indices", e.selection->kept}}}};
  std::ofstream out(dir_ / (id + ".json"));
  if (!out) throw Error((dir_ / (id + ".json")).string() + ": cannot write");
  out << c.dump() << "\n";
  ++written_;
}

}  // namespace rkv
