// TriAttention's golden cases (../shared/spec/TRIATTENTION.md section 9): the calibration case,
// one compression (with the other selection modes on the same inputs), and a stream of tokens
// through the trigger (rounds). Reads only the case's inputs, params and rope; the output has
// the case's own field names.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "compress/golden_case.h"
#include "compress/triattention.h"
#include "core/error.h"

namespace rkv::compress {
namespace {

using json = nlohmann::json;

// A rectangular array of numbers of any depth: its shape and values, flattened.
struct Array {
  std::vector<int> shape;
  std::vector<float> data;
};

void flatten(const json& j, std::size_t depth, Array& a, const std::string& what) {
  if (depth == a.shape.size()) {
    if (!j.is_number()) throw Error(what + " holds a value that is not a number");
    a.data.push_back(j.get<float>());
    return;
  }
  if (!j.is_array() || static_cast<int>(j.size()) != a.shape[depth])
    throw Error(what + " is not a rectangular array");
  for (const auto& x : j) flatten(x, depth + 1, a, what);
}

Array array(const json& j, std::size_t rank, const std::string& what) {
  Array a;
  const json* cur = &j;
  for (std::size_t d = 0; d < rank; ++d) {
    if (!cur->is_array() || cur->empty())
      throw Error(what + " is not a non-empty " + std::to_string(rank) + "-D array");
    a.shape.push_back(static_cast<int>(cur->size()));
    cur = &(*cur)[0];
  }
  flatten(j, 0, a, what);
  return a;
}

json nested(const std::vector<double>& v) {
  return json(v);
}

tri::Params params_of(const json& gc) {
  const json& p = gc.at("params");
  tri::Params t;
  t.budget = p.at("budget").get<int>();
  t.divide_length = p.value("divide_length", 128);
  t.slack_trigger = p.value("use_slack_trigger", true);
  t.count_prompt_tokens = p.value("count_prompt_tokens", true);
  t.allow_prefill_compression = p.value("allow_prefill_compression", false);
  t.normalize_scores = p.value("normalize_scores", false);
  const std::string agg = p.value("score_aggregation", "mean");
  if (agg != "mean" && agg != "max") throw Error("score_aggregation '" + agg + "' is not mean|max");
  t.offsets_aggregation = agg == "max" ? tri::Aggregation::max : tri::Aggregation::mean;
  const std::string lagg = p.value("layer_perhead_aggregation", "max");
  if (lagg != "mean" && lagg != "max")
    throw Error("layer_perhead_aggregation '" + lagg + "' is not mean|max");
  t.layer_perhead_aggregation = lagg == "max" ? tri::Aggregation::max : tri::Aggregation::mean;
  t.disable_mlr = p.value("disable_mlr", false);
  t.disable_trig = p.value("disable_trig", false);
  if (p.contains("window_size") && !p["window_size"].is_null())
    throw Error("triattention: a recency window is not part of the reference (spec 5.6)");
  const std::string mode = p.value("selection_mode", "per_head");
  if (mode == "per_head") {
    t.mode = tri::Mode::per_head;
  } else if (mode == "union") {
    t.mode = tri::Mode::union_all;
  } else if (mode == "per_layer_perhead") {
    t.mode = tri::Mode::per_layer_perhead;
  } else {
    throw Error("triattention: selection_mode '" + mode +
                "' is not per_head, union or per_layer_perhead");
  }
  return t;
}

tri::Rope rope_of(const json& gc) {
  const json& r = gc.at("rope");
  tri::Rope rope;
  rope.omega = r.at("omega").get<std::vector<float>>();
  if (r.contains("freq_scale_sq")) {
    const auto s2 = r["freq_scale_sq"].get<std::vector<double>>();
    if (s2.empty() || std::any_of(s2.begin(), s2.end(), [&](double x) { return x != s2[0]; }))
      throw Error("triattention: freq_scale_sq must be uniform (spec 10.9)");
    rope.scale = std::sqrt(s2[0]);
  }
  if (r.contains("offsets")) {
    rope.offsets = r["offsets"].get<std::vector<std::int64_t>>();
  } else {
    rope.offsets = tri::geometric_offsets(gc.at("params").value("offset_max_length", 65536));
  }
  return rope;
}

tri::Stats stats_of(const json& cal) {
  const Array re = array(cal.at("q_mean_real"), 3, "q_mean_real");
  const Array im = array(cal.at("q_mean_imag"), 3, "q_mean_imag");
  const Array ab = array(cal.at("q_abs_mean"), 3, "q_abs_mean");
  if (im.shape != re.shape || ab.shape != re.shape)
    throw Error("the calibration statistics have different shapes");
  tri::Stats s;
  s.layers = re.shape[0];
  s.q_heads = re.shape[1];
  s.freqs = re.shape[2];
  s.mean_re.assign(re.data.begin(), re.data.end());
  s.mean_im.assign(im.data.begin(), im.data.end());
  s.abs_mean.assign(ab.data.begin(), ab.data.end());
  if (cal.contains("sampled_heads"))
    for (const auto& pair : cal["sampled_heads"])
      s.sampled.emplace_back(pair.at(0).get<int>(), pair.at(1).get<int>());
  return s;
}

const char* mode_name(tri::Mode m) {
  switch (m) {
    case tri::Mode::per_head:
      return "per_head";
    case tri::Mode::union_all:
      return "union";
    case tri::Mode::per_layer_perhead:
      return "per_layer_perhead";
  }
  return "";
}

// The kept lists of a decision and their positions, shaped per mode: per_head and union
// [kv_heads][...], per_layer_perhead [layers][kv_heads][...].
json by_mode(const tri::Decision& d, tri::Mode mode, int layers, int kv_heads,
             const std::function<json(int unit, const std::vector<int>&)>& f) {
  json out = json::array();
  if (mode != tri::Mode::per_layer_perhead) {
    for (int k = 0; k < kv_heads; ++k) out.push_back(f(k, d.kept[static_cast<std::size_t>(k)]));
    return out;
  }
  for (int l = 0; l < layers; ++l) {
    json layer = json::array();
    for (int k = 0; k < kv_heads; ++k) {
      const int unit = l * kv_heads + k;
      layer.push_back(f(unit, d.kept[static_cast<std::size_t>(unit)]));
    }
    out.push_back(layer);
  }
  return out;
}

json aggregated_json(const tri::Decision& d, tri::Mode mode, int layers, int kv_heads) {
  if (mode != tri::Mode::per_layer_perhead) return json(d.aggregated);
  json out = json::array();
  for (int l = 0; l < layers; ++l) {
    json layer = json::array();
    for (int k = 0; k < kv_heads; ++k)
      layer.push_back(nested(d.aggregated[static_cast<std::size_t>(l * kv_heads + k)]));
    out.push_back(layer);
  }
  return out;
}

// Scores [layers][q_heads][n] from the decision's rows (every head is sampled in the cases that
// store them; a row not sampled is left empty).
json rows_json(const std::vector<std::vector<double>>& rows, const tri::Stats& stats, int layers,
               int q_heads) {
  json out = json::array();
  std::vector<std::pair<int, int>> order = stats.sampled;
  if (order.empty())
    for (int l = 0; l < layers; ++l)
      for (int j = 0; j < q_heads; ++j) order.emplace_back(l, j);
  for (int l = 0; l < layers; ++l) {
    json layer = json::array();
    for (int j = 0; j < q_heads; ++j) {
      const auto it = std::find(order.begin(), order.end(), std::make_pair(l, j));
      layer.push_back(it == order.end() ? json::array()
                                        : json(rows[static_cast<std::size_t>(it - order.begin())]));
    }
    out.push_back(layer);
  }
  return out;
}

json run_calibration(const json& gc) {
  const Array q = array(gc.at("inputs").at("queries_pre_rope"), 4, "queries_pre_rope");
  const tri::Stats s = tri::calibrate(q.data, q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
  auto grid = [&](const std::vector<double>& v) {
    json out = json::array();
    for (int l = 0; l < s.layers; ++l) {
      json layer = json::array();
      for (int h = 0; h < s.q_heads; ++h)
        layer.push_back(json(
            std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(s.at(l, h, 0)),
                                v.begin() + static_cast<std::ptrdiff_t>(s.at(l, h, 0) + s.freqs))));
      out.push_back(layer);
    }
    return out;
  };
  return {{"q_mean_real", grid(s.mean_re)},
          {"q_mean_imag", grid(s.mean_im)},
          {"q_abs_mean", grid(s.abs_mean)}};
}

json run_single(const json& gc) {
  const json& in = gc.at("inputs");
  const tri::Params params = params_of(gc);
  const tri::Rope rope = rope_of(gc);
  const tri::Stats stats = stats_of(in.at("calibration"));
  const Array key = array(in.at("key"), 4, "key");
  const int layers = key.shape[0], kv_heads = key.shape[1], n = key.shape[2], d = key.shape[3];
  // Positions [kv_heads][n] (the same in every layer) or [layers][kv_heads][n].
  const json& pj = in.at("positions");
  const bool per_layer =
      pj.is_array() && !pj.empty() && pj[0].is_array() && !pj[0].empty() && pj[0][0].is_array();
  const Array pos = array(pj, per_layer ? 3 : 2, "positions");
  std::vector<std::int32_t> positions(pos.data.begin(), pos.data.end());
  auto pos_of = [&](int l, int k) {
    return positions.data() + (static_cast<std::size_t>(per_layer ? l * kv_heads + k : k)) * n;
  };
  std::vector<std::vector<tri::HeadKeys>> keys(static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l)
    for (int k = 0; k < kv_heads; ++k)
      keys[static_cast<std::size_t>(l)].push_back(
          {key.data.data() + (static_cast<std::size_t>(l) * kv_heads + k) * n * d, pos_of(l, k),
           n});
  const int prefix = in.at("prefix_len").get<int>();
  const std::int64_t round_start = in.at("round_start").get<std::int64_t>();
  const int q_heads = stats.q_heads;

  auto kept_json = [&](const tri::Decision& dec, tri::Mode mode) {
    json out;
    out["aggregated_scores"] = aggregated_json(dec, mode, layers, kv_heads);
    if (mode == tri::Mode::union_all) out["combined_scores"] = nested(dec.aggregated.at(0));
    out["kept_indices"] = by_mode(dec, mode, layers, kv_heads,
                                  [](int, const std::vector<int>& kept) { return json(kept); });
    out["kept_positions"] =
        by_mode(dec, mode, layers, kv_heads, [&](int unit, const std::vector<int>& kept) {
          const int l = mode == tri::Mode::per_layer_perhead ? unit / kv_heads : 0;
          const int k = mode == tri::Mode::per_layer_perhead ? unit % kv_heads : unit;
          std::vector<std::int32_t> p;
          for (int i : kept) p.push_back(pos_of(l, k)[i]);
          return json(p);
        });
    return out;
  };

  const tri::Decision dec = tri::decide(keys, d, q_heads, prefix, stats, rope, params, round_start);
  json out = kept_json(dec, params.mode);
  out["compressed"] = dec.compressed;
  out["raw_scores"] = rows_json(dec.raw, stats, layers, q_heads);
  out["normalized_scores"] = rows_json(dec.normalized, stats, layers, q_heads);
  // The decode entries' pre-RoPE keys [layers][kv_heads][n - prefix][d].
  json unrot = json::array();
  std::vector<float> buf(static_cast<std::size_t>(d));
  for (int l = 0; l < layers; ++l) {
    json layer = json::array();
    for (int k = 0; k < kv_heads; ++k) {
      json head = json::array();
      const tri::HeadKeys& h = keys[static_cast<std::size_t>(l)][static_cast<std::size_t>(k)];
      for (int i = dec.prefix; i < n; ++i) {
        tri::unrotate(h.keys + static_cast<std::size_t>(i) * d, h.positions[i], rope, d,
                      buf.data());
        head.push_back(json(buf));
      }
      layer.push_back(head);
    }
    unrot.push_back(layer);
  }
  out["k_unrot"] = unrot;
  json others = json::object();
  for (tri::Mode m : {tri::Mode::per_head, tri::Mode::union_all, tri::Mode::per_layer_perhead}) {
    if (m == params.mode) continue;
    tri::Params p = params;
    p.mode = m;
    others[mode_name(m)] =
        kept_json(tri::decide(keys, d, q_heads, prefix, stats, rope, p, round_start), m);
  }
  out["other_modes_same_inputs"] = others;
  return out;
}

json run_rounds(const json& gc) {
  const json& in = gc.at("inputs");
  const tri::Params params = params_of(gc);
  const tri::Rope rope = rope_of(gc);
  const tri::Stats stats = stats_of(in.at("calibration"));
  const Array stream = array(in.at("stream_key"), 4, "stream_key");
  const int layers = stream.shape[0], kv_heads = stream.shape[1], tokens = stream.shape[2],
            d = stream.shape[3];
  const int prompt = in.at("prompt_len").get<int>();
  if (prompt <= 0 || prompt > tokens) throw Error("prompt_len is outside the stream");
  const int q_heads = stats.q_heads;
  const bool per_layer = params.mode == tri::Mode::per_layer_perhead;
  // The cache of every (layer, KV head): the positions it holds, in the reference's order.
  std::vector<std::vector<std::int32_t>> cache(static_cast<std::size_t>(layers) * kv_heads);
  for (auto& c : cache)
    for (int t = 0; t < prompt; ++t) c.push_back(t);
  auto key_of = [&](int l, int k, int t) {
    return stream.data.data() + ((static_cast<std::size_t>(l) * kv_heads + k) * tokens + t) * d;
  };
  auto positions_json = [&](int l) {
    json out = json::array();
    for (int k = 0; k < kv_heads; ++k)
      out.push_back(cache[static_cast<std::size_t>(l * kv_heads + k)]);
    return out;
  };
  auto all_positions = [&]() {
    if (!per_layer) return positions_json(0);
    json out = json::array();
    for (int l = 0; l < layers; ++l) out.push_back(positions_json(l));
    return out;
  };

  json rounds = json::array();
  for (int t = prompt; t < tokens; ++t) {
    for (auto& c : cache) c.push_back(t);
    const int n = static_cast<int>(cache[0].size());
    const std::int64_t next_position = t + 1;
    if (!tri::should_compress(params, n, prompt, next_position)) continue;
    // Gather each cache's keys in its order.
    std::vector<std::vector<float>> gathered(cache.size());
    std::vector<std::vector<tri::HeadKeys>> keys(static_cast<std::size_t>(layers));
    for (int l = 0; l < layers; ++l)
      for (int k = 0; k < kv_heads; ++k) {
        const auto u = static_cast<std::size_t>(l * kv_heads + k);
        for (std::int32_t p : cache[u]) {
          const float* src = key_of(l, k, p);
          gathered[u].insert(gathered[u].end(), src, src + d);
        }
        keys[static_cast<std::size_t>(l)].push_back({gathered[u].data(), cache[u].data(), n});
      }
    const tri::Decision dec =
        tri::decide(keys, d, q_heads, prompt, stats, rope, params, next_position);
    json round;
    round["after_token_position"] = t;
    round["cache_len_before"] = n;
    round["round_start"] = next_position;
    round["cache_positions_before"] = all_positions();
    round["raw_scores"] = rows_json(dec.raw, stats, layers, q_heads);
    round["normalized_scores"] = rows_json(dec.normalized, stats, layers, q_heads);
    round["aggregated_scores"] = aggregated_json(dec, params.mode, layers, kv_heads);
    round["kept_indices"] = by_mode(dec, params.mode, layers, kv_heads,
                                    [](int, const std::vector<int>& kept) { return json(kept); });
    // Apply: every layer of a KV head takes its unit's kept list (per layer for
    // per_layer_perhead), in the decision's order.
    std::vector<std::vector<std::int32_t>> next(cache.size());
    for (int l = 0; l < layers; ++l)
      for (int k = 0; k < kv_heads; ++k) {
        const auto u = static_cast<std::size_t>(l * kv_heads + k);
        const auto& kept = dec.kept[per_layer ? u : static_cast<std::size_t>(k)];
        for (int i : kept) next[u].push_back(cache[u][static_cast<std::size_t>(i)]);
      }
    cache = std::move(next);
    round["kept_positions"] = all_positions();
    round["cache_len_after"] = cache[0].size();
    rounds.push_back(round);
  }
  return {{"rounds", rounds}, {"final_cache_positions", all_positions()}};
}

}  // namespace

bool is_triattention_case(const json& gc) {
  const std::string method = gc.value("method", "");
  return method.rfind("triattention", 0) == 0;
}

json run_triattention_case(const json& gc) {
  const std::string method = gc.at("method").get<std::string>();
  if (method == "triattention_calibration") return run_calibration(gc);
  if (method != "triattention") throw Error("unknown triattention case method '" + method + "'");
  if (gc.at("inputs").contains("stream_key")) return run_rounds(gc);
  return run_single(gc);
}

}  // namespace rkv::compress
