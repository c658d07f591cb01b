// Golden-case replay (golden README sections 2-3): one call, several threaded steps (3.4), the
// prefill-seeded h2o case, or the redundancy function alone.
#include "compress/golden_case.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compress/stages.h"
#include "core/error.h"

namespace rkv::compress {
namespace {

using json = nlohmann::json;

// A rectangular [a][b][c] array of numbers, flattened. Throws rkv::Error naming `what` otherwise.
struct Tensor3 {
  int a = 0, b = 0, c = 0;
  std::vector<float> data;
};

Tensor3 tensor3(const json& j, const std::string& what) {
  Tensor3 t;
  const auto bad = [&] { return Error(what + " is not a non-empty rectangular [.][.][.] array"); };
  if (!j.is_array() || j.empty() || !j[0].is_array() || j[0].empty() || !j[0][0].is_array()) {
    throw bad();
  }
  t.a = static_cast<int>(j.size());
  t.b = static_cast<int>(j[0].size());
  t.c = static_cast<int>(j[0][0].size());
  if (t.c == 0) throw bad();
  t.data.reserve(static_cast<std::size_t>(t.a) * t.b * t.c);
  for (const auto& m : j) {
    if (!m.is_array() || static_cast<int>(m.size()) != t.b) throw bad();
    for (const auto& row : m) {
      if (!row.is_array() || static_cast<int>(row.size()) != t.c) throw bad();
      for (const auto& x : row) {
        if (!x.is_number()) throw bad();
        t.data.push_back(x.get<float>());
      }
    }
  }
  return t;
}

// One layer's cache, per KV head, as the reference holds it between calls.
struct Cache {
  int kv_heads = 0, head_dim = 0, n = 0;
  std::vector<std::vector<float>> keys, values;  // [kv_heads][n][head_dim]
  std::vector<std::vector<std::int32_t>> positions;
  std::vector<std::vector<float>> state;  // per-entry policy state, kNoState = none

  void append(const json& key_json, const json& value_json) {
    const Tensor3 k = tensor3(key_json, "key");
    const Tensor3 v = tensor3(value_json, "value");
    if (v.a != k.a || v.b != k.b || v.c != k.c) throw Error("key and value shapes differ");
    if (kv_heads == 0) {
      kv_heads = k.a, head_dim = k.c;
      keys.resize(kv_heads), values.resize(kv_heads), positions.resize(kv_heads);
      state.resize(kv_heads);
    }
    if (k.a != kv_heads || k.c != head_dim) throw Error("appended keys change the cache shape");
    const std::size_t rows = static_cast<std::size_t>(k.b) * head_dim;
    for (int h = 0; h < kv_heads; ++h) {
      keys[h].insert(keys[h].end(), k.data.begin() + h * rows, k.data.begin() + (h + 1) * rows);
      values[h].insert(values[h].end(), v.data.begin() + h * rows, v.data.begin() + (h + 1) * rows);
      // New entries continue the positions (README 3.4 step 3) and have no state yet.
      std::int32_t next = positions[h].empty() ? 0 : positions[h].back() + 1;
      for (int i = 0; i < k.b; ++i) positions[h].push_back(next++);
      state[h].resize(state[h].size() + k.b, kNoState);
    }
    n += k.b;
  }

  // Keeps kept[h] in that (ascending) order: the layout the next step sees.
  void gather(const Selection& sel) {
    for (int h = 0; h < kv_heads; ++h) {
      keys[h] = rows(keys[h], sel.kept[h]);
      values[h] = rows(values[h], sel.kept[h]);
      std::vector<std::int32_t> p;
      for (std::int32_t e : sel.kept[h]) p.push_back(positions[h][e]);
      positions[h] = std::move(p);
      state[h] = sel.new_state[h];
    }
    n = static_cast<int>(sel.kept[0].size());
  }

  std::vector<float> rows(const std::vector<float>& a, const std::vector<std::int32_t>& idx) const {
    std::vector<float> out;
    out.reserve(idx.size() * head_dim);
    for (std::int32_t e : idx) {
      out.insert(out.end(), a.begin() + static_cast<std::size_t>(e) * head_dim,
                 a.begin() + static_cast<std::size_t>(e + 1) * head_dim);
    }
    return out;
  }
};

json rows_of(const std::vector<float>& flat, int cols) {
  json out = json::array();
  for (std::size_t i = 0; cols > 0 && i + cols <= flat.size(); i += cols) {
    out.push_back(std::vector<float>(flat.begin() + i, flat.begin() + i + cols));
  }
  return out;
}

template <typename Field>
json per_head(const Diagnostics& d, Field field) {
  json out = json::array();
  for (const auto& h : d.heads) out.push_back(h.*field);
  return out;
}

json redundancy_case(const json& gc) {
  const Tensor3 key = tensor3(gc.at("inputs").at("key"), "inputs.key");
  const json& params = gc.at("params");
  const float threshold = params.value("threshold", params.value("similarity_threshold", 0.5f));
  const std::string dir = params.value("retain_direction", std::string("last"));
  if (dir != "last" && dir != "first") {
    throw Error("retain_direction '" + dir + "' is not supported (last or first)");
  }
  const auto direction = dir == "last" ? RetainDirection::last : RetainDirection::first;
  const bool want_matrix = gc.contains("expected") && gc["expected"].contains("cosine_zeroed");
  json out = {{"retain_index", json::array()},
              {"n_above_threshold", json::array()},
              {"column_mean", json::array()},
              {"redundancy_full", json::array()}};
  if (want_matrix) out["cosine_zeroed"] = json::array();
  for (int h = 0; h < key.a; ++h) {
    const float* k = key.data.data() + static_cast<std::size_t>(h) * key.b * key.c;
    std::vector<float> r(key.b);
    RedundancyDetail detail;
    redundancy_scores(k, key.b, key.c, threshold, r.data(), direction, &detail);
    out["retain_index"].push_back(detail.retain_index);
    out["n_above_threshold"].push_back(detail.n_above_threshold);
    out["column_mean"].push_back(detail.column_mean);
    out["redundancy_full"].push_back(r);
    if (want_matrix) {
      std::vector<float> unused(key.b);
      out["cosine_zeroed"].push_back(rows_of(
          redundancy_reference(k, key.b, key.c, threshold, unused.data(), direction), key.b));
    }
  }
  return out;
}

// The per-head diagnostics of a scored call, under the names of the golden README 3.2 / 3.3.
void put_scores(json& s, const Diagnostics& d, const CompressionParams& p, int n, bool gkv) {
  json attention = json::array();
  for (const auto& h : d.heads) attention.push_back(rows_of(h.attention, n));
  s[gkv ? "attn_probs" : "attn_logits"] = attention;
  s[gkv ? "local_score" : "importance_prepool"] = per_head(d, &HeadDiagnostics::attention_mean);
  if (gkv) {
    if (p.shift_gamma) {
      s["attn_std_unbiased"] = per_head(d, &HeadDiagnostics::shift_std);
      s["local_score_with_shift"] = per_head(d, &HeadDiagnostics::local_shifted);
    }
    const bool normalized = !d.heads[0].local_normalized.empty();
    s["local_score_normalized"] =
        normalized ? per_head(d, &HeadDiagnostics::local_normalized) : json(nullptr);
    if (!d.heads[0].old_score.empty()) s["old_score"] = per_head(d, &HeadDiagnostics::old_score);
    s["global_score"] = per_head(d, &HeadDiagnostics::global_score);
  }
  s["importance"] = per_head(d, &HeadDiagnostics::importance);
  if (!d.heads[0].redundancy_full.empty()) {
    s["redundancy_full"] = per_head(d, &HeadDiagnostics::redundancy_full);
    if (gkv) s["redundancy_raw"] = per_head(d, &HeadDiagnostics::redundancy_raw);
    s["redundancy"] = per_head(d, &HeadDiagnostics::redundancy);
  }
  s["final_score"] = per_head(d, &HeadDiagnostics::final_score);
  s["topk_indices"] = per_head(d, &HeadDiagnostics::top_k);
}

// One compression call on `cache` with window queries `query`; returns the step's JSON.
json run_step(Cache& cache, const json& query_json, const CompressionParams& p, bool multi,
              int step, const json& score_cache_in, const CaseOptions& opt) {
  const bool gkv = p.method == Method::gkv;
  const Tensor3 q = tensor3(query_json, "query");
  if (q.c != cache.head_dim) throw Error("query head_dim differs from the keys'");
  LayerView view;
  view.q_heads = q.a;
  view.kv_heads = cache.kv_heads;
  view.head_dim = cache.head_dim;
  view.n_all = cache.n;
  view.window = q.b;
  view.seq_len = cache.positions[0].back() + 1;
  view.queries = q.data.data();
  for (int h = 0; h < view.kv_heads; ++h) {
    view.keys.push_back(cache.keys[h].data());
    view.positions.push_back(cache.positions[h].data());
    view.state.push_back(cache.state[h].data());
  }
  const int budget = p.budget_for(view.seq_len);
  // The R-KV reference runs at n_all >= budget (README 6.1, 7.5); G-KV at n_all > budget.
  const bool ran = method_info(p.method).reference_compresses_at_budget
                       ? view.n_all >= budget
                       : should_compress(view.n_all, p, view.seq_len);
  Diagnostics d;
  const Selection sel = ran ? score_and_select(view, p, &d) : Selection{};
  const int n = view.n_all - p.window;
  const bool scored = ran && p.method != Method::streamingllm;

  json s = json::object();
  if (gkv) {
    s["kv_len_in"] = view.n_all;
    s["cur_len"] = view.seq_len;
    s["step"] = step;
    s["score_cache_in"] = score_cache_in;
  }
  s["compressed"] = ran;
  if (scored) put_scores(s, d, p, n, gkv);
  json kept = json::array();
  json order = json::array();  // the reference's output order (R-KV: top-k by score, window)
  for (int h = 0; h < view.kv_heads; ++h) {
    std::vector<std::int32_t> k(view.n_all);
    for (int i = 0; i < view.n_all; ++i) k[i] = i;
    if (ran) k = sel.kept[h];
    std::vector<std::int32_t> o = k;
    if (scored && !gkv) {
      o = d.heads[h].top_k;
      for (int i = n; i < view.n_all; ++i) o.push_back(i);
    }
    kept.push_back(k);
    order.push_back(o);
  }
  s["kept_indices"] = kept;
  if (!gkv) s["kept_order"] = order;
  if (opt.include_cache) {
    json key_out = json::array(), value_out = json::array();
    for (int h = 0; h < view.kv_heads; ++h) {
      const auto idx = order[h].get<std::vector<std::int32_t>>();
      key_out.push_back(rows_of(cache.rows(cache.keys[h], idx), cache.head_dim));
      value_out.push_back(rows_of(cache.rows(cache.values[h], idx), cache.head_dim));
    }
    s["key_out"] = key_out;
    s["value_out"] = value_out;
  }
  if (ran) cache.gather(sel);
  if (multi) s["kept_positions"] = cache.positions;
  if (gkv) {
    json cache_out = nullptr;  // what the next step's score cache holds
    if (p.smoothing != Smoothing::none && ran) {
      cache_out = json::array();
      for (const auto& st : sel.new_state) {
        cache_out.push_back(std::vector<float>(st.begin(), st.begin() + (budget - p.window)));
      }
    }
    s["score_cache_out"] = cache_out;
  } else if (multi) {
    s["step"] = step;
    s["kv_len_in"] = view.n_all;
  }
  return s;
}

}  // namespace

json run_case(const json& gc, const CaseOptions& opt) {
  if (is_triattention_case(gc)) return run_triattention_case(gc);
  const std::string method = gc.at("method").get<std::string>();
  if (method == "redundancy") return redundancy_case(gc);
  const CompressionParams p = params_from_case(gc);
  const json& in = gc.at("inputs");
  const bool prefill = in.contains("prompt_key");
  const json appends = in.value("appends", json::array());
  const bool multi = p.method == Method::gkv || !appends.empty();

  Cache cache;
  cache.append(in.at(prefill ? "prompt_key" : "key"), in.at(prefill ? "prompt_value" : "value"));
  if (in.contains("positions")) {
    const auto pos = in.at("positions").get<std::vector<std::vector<std::int32_t>>>();
    if (static_cast<int>(pos.size()) != cache.kv_heads) throw Error("positions: wrong head count");
    for (int h = 0; h < cache.kv_heads; ++h) {
      if (static_cast<int>(pos[h].size()) != cache.n) throw Error("positions: wrong length");
      cache.positions[h] = pos[h];
    }
  }
  json out = json::object();
  json score_cache_in = nullptr;
  if (prefill) {
    // G-KV seeds its score cache at prefill (README 6.3); the prefill call compresses nothing.
    if (should_compress(cache.n, p)) {
      throw Error("a prompt longer than the budget crashes the reference (README 7.7)");
    }
    const Tensor3 pq = tensor3(in.at("prompt_queries"), "inputs.prompt_queries");
    if (pq.b != cache.n || pq.c != cache.head_dim) throw Error("prompt_queries: wrong shape");
    std::vector<const float*> keys;
    std::vector<float*> seeds;
    for (int h = 0; h < cache.kv_heads; ++h) {
      keys.push_back(cache.keys[h].data());
      seeds.push_back(cache.state[h].data());
    }
    gkv_prefill_scores(pq.data.data(), keys, pq.a, cache.kv_heads, cache.head_dim, cache.n, seeds);
    out["initial_score_cache"] = cache.state;
    score_cache_in = cache.state;
  }
  if (!multi) return run_step(cache, in.at("query"), p, false, 0, nullptr, opt);

  json steps = json::array();
  const int n_steps = static_cast<int>(appends.size()) + (prefill ? 0 : 1);
  for (int s = 0; s < n_steps; ++s) {
    const json* query = prefill ? nullptr : &in.at("query");
    if (prefill || s > 0) {
      const json& a = appends.at(prefill ? s : s - 1);
      cache.append(a.at("key"), a.at("value"));
      query = &a.at("query");
    }
    json step = run_step(cache, *query, p, true, s, score_cache_in, opt);
    if (p.method == Method::gkv) score_cache_in = step["score_cache_out"];
    steps.push_back(std::move(step));
  }
  out["steps"] = std::move(steps);
  return out;
}

}  // namespace rkv::compress
