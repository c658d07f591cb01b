// TriAttention's calibration, score and selection (../shared/spec/TRIATTENTION.md sections 2-6).
#include "compress/triattention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"

namespace rkv::tri {

Stats calibrate(const std::vector<float>& queries, int layers, int q_heads, int tokens,
                int head_dim) {
  if (layers <= 0 || q_heads <= 0 || tokens <= 0 || head_dim <= 0 || head_dim % 2 != 0)
    throw Error(
        "triattention calibration: layers, heads and tokens must be positive and the "
        "head size even");
  if (queries.size() != static_cast<std::size_t>(layers) * q_heads * tokens * head_dim)
    throw Error("triattention calibration: the queries are not [layers][heads][tokens][head_dim]");
  Stats s;
  s.layers = layers;
  s.q_heads = q_heads;
  s.freqs = head_dim / 2;
  const std::size_t cells = static_cast<std::size_t>(layers) * q_heads * s.freqs;
  s.mean_re.assign(cells, 0.0);
  s.mean_im.assign(cells, 0.0);
  s.abs_mean.assign(cells, 0.0);
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < q_heads; ++h)
      for (int t = 0; t < tokens; ++t) {
        const float* q =
            queries.data() + ((static_cast<std::size_t>(l) * q_heads + h) * tokens + t) * head_dim;
        for (int f = 0; f < s.freqs; ++f) {
          const double re = q[f], im = q[f + s.freqs];
          const std::size_t i = s.at(l, h, f);
          s.mean_re[i] += re;
          s.mean_im[i] += im;
          s.abs_mean[i] += std::hypot(re, im);
        }
      }
  for (std::size_t i = 0; i < cells; ++i) {
    s.mean_re[i] /= tokens;
    s.mean_im[i] /= tokens;
    s.abs_mean[i] /= tokens;
  }
  return s;
}

std::vector<std::int64_t> geometric_offsets(std::int64_t max_length) {
  std::vector<std::int64_t> out;
  for (std::int64_t o = 1; o <= max_length; o *= 2) out.push_back(o);
  return out;
}

std::vector<int> half_layout(int head_dim, int rotary_dim) {
  const int F = head_dim / 2, Fr = rotary_dim / 2, Fu = F - Fr;
  std::vector<int> out(static_cast<std::size_t>(head_dim));
  for (int f = 0; f < Fr; ++f) {
    out[static_cast<std::size_t>(f)] = f;
    out[static_cast<std::size_t>(f + F)] = f + Fr;
  }
  for (int g = 0; g < Fu; ++g) {
    out[static_cast<std::size_t>(Fr + g)] = rotary_dim + g;
    out[static_cast<std::size_t>(Fr + g + F)] = rotary_dim + g + Fu;
  }
  return out;
}

void unrotate(const float* key, std::int32_t position, const Rope& rope, int head_dim, float* out) {
  const int F = head_dim / 2;
  const float s = static_cast<float>(rope.scale);
  for (int f = 0; f < F; ++f) {
    // HF's tables: cos/sin of the float32 product inv_freq * position (spec 3).
    const float angle = rope.omega[static_cast<std::size_t>(f)] * static_cast<float>(position);
    const float c = std::cos(angle), sn = std::sin(angle);
    out[f] = (key[f] * c + key[f + F] * sn) / s;
    out[f + F] = (key[f + F] * c - key[f] * sn) / s;
  }
}

namespace {

// The post-RoPE form (spec 4.3): with a = Re(qbar conj k), b = Im(qbar conj k) per frequency of
// the cached (rotated) key k,
//   S_trig(i, o) = s * sum_f (a_f cos((R + delta_o) w_f) - b_f sin((R + delta_o) w_f))
//   S_norm(i)    = s * sum_f (qabs_f - |qbar_f|) |k_f|        (|kappa_f| = |k_f| / s)
// Mean over the offsets: the cosines and sines averaged once per frequency.
std::vector<double> post_rope_scores(const HeadKeys& keys, int head_dim, const Stats& stats,
                                     int layer, int q_head, const Rope& rope, const Params& params,
                                     std::int64_t round_start) {
  const int F = head_dim / 2;
  const std::size_t O = rope.offsets.size();
  const bool mean = params.offsets_aggregation == Aggregation::mean;
  // [O or 1][F] rotations of the future query positions (mean: their average).
  const std::size_t rows = mean ? 1 : O;
  std::vector<double> c(rows * F, 0.0), sn(rows * F, 0.0);
  for (std::size_t o = 0; o < O; ++o)
    for (int f = 0; f < F; ++f) {
      const double angle = static_cast<double>(round_start + rope.offsets[o]) *
                           static_cast<double>(rope.omega[static_cast<std::size_t>(f)]);
      const std::size_t at = (mean ? 0 : o) * F + f;
      c[at] += std::cos(angle) / (mean ? static_cast<double>(O) : 1.0);
      sn[at] += std::sin(angle) / (mean ? static_cast<double>(O) : 1.0);
    }
  std::vector<double> qr(F), qi(F), m(F);
  for (int f = 0; f < F; ++f) {
    const std::size_t at = stats.at(layer, q_head, f);
    qr[f] = stats.mean_re[at];
    qi[f] = stats.mean_im[at];
    const double qbar_abs = std::hypot(qr[f], qi[f]);
    m[f] = params.disable_mlr ? stats.abs_mean[at] : stats.abs_mean[at] - qbar_abs;
  }
  const double s = rope.scale;
  std::vector<double> a(F), b(F);
  std::vector<double> out(static_cast<std::size_t>(keys.n));
  for (int i = 0; i < keys.n; ++i) {
    const float* k = keys.keys + static_cast<std::size_t>(i) * head_dim;
    double s_norm = 0.0;
    for (int f = 0; f < F; ++f) {
      const double kr = k[f], ki = k[f + F];
      a[f] = qr[f] * kr + qi[f] * ki;
      b[f] = qi[f] * kr - qr[f] * ki;
      s_norm += m[f] * std::hypot(kr, ki);
    }
    s_norm *= s;
    if (params.disable_trig) {
      out[static_cast<std::size_t>(i)] = s_norm;
      continue;
    }
    double best = -HUGE_VAL;
    for (std::size_t o = 0; o < rows; ++o) {
      double trig = 0.0;
      for (int f = 0; f < F; ++f) trig += a[f] * c[o * F + f] - b[f] * sn[o * F + f];
      best = std::max(best, s * trig + s_norm);
    }
    out[static_cast<std::size_t>(i)] = best;  // mean: the one averaged row
  }
  return out;
}

}  // namespace

std::vector<double> raw_scores(const HeadKeys& keys, int head_dim, const Stats& stats, int layer,
                               int q_head, const Rope& rope, const Params& params,
                               std::int64_t round_start) {
  const int F = head_dim / 2;
  if (F != stats.freqs || static_cast<int>(rope.omega.size()) != F)
    throw Error("triattention: the statistics and the rotary embedding are for head size " +
                std::to_string(2 * stats.freqs) + ", the keys have " + std::to_string(head_dim));
  if (!params.reference_phases)
    return post_rope_scores(keys, head_dim, stats, layer, q_head, rope, params, round_start);
  const double s2 = rope.scale * rope.scale;
  std::vector<double> amp(static_cast<std::size_t>(F)), phi(static_cast<std::size_t>(F));
  std::vector<float> kappa(static_cast<std::size_t>(head_dim));
  std::vector<double> out(static_cast<std::size_t>(keys.n));
  for (int i = 0; i < keys.n; ++i) {
    unrotate(keys.keys + static_cast<std::size_t>(i) * head_dim, keys.positions[i], rope, head_dim,
             kappa.data());
    double s_norm = 0.0;
    for (int f = 0; f < F; ++f) {
      const std::size_t c = stats.at(layer, q_head, f);
      const double qr = stats.mean_re[c], qi = stats.mean_im[c];
      const double ka = kappa[static_cast<std::size_t>(f)];
      const double kb = kappa[static_cast<std::size_t>(f + F)];
      // r = qbar * conj(kappa~), amp = |qbar| |kappa~|, phi = arg r (spec 4.2).
      const double re = qr * ka + qi * kb, im = qi * ka - qr * kb;
      const double qbar_abs = std::hypot(qr, qi), k_abs = std::hypot(ka, kb);
      amp[static_cast<std::size_t>(f)] = qbar_abs * k_abs;
      phi[static_cast<std::size_t>(f)] = std::atan2(im, re);
      const double m =
          params.disable_mlr ? stats.abs_mean[c] * k_abs : (stats.abs_mean[c] - qbar_abs) * k_abs;
      s_norm += s2 * m;
    }
    if (params.disable_trig) {
      out[static_cast<std::size_t>(i)] = s_norm;
      continue;
    }
    double total = 0.0, best = -HUGE_VAL;
    for (const std::int64_t delta : rope.offsets) {
      const std::int64_t distance = round_start - keys.positions[i] + delta;
      double s_trig = 0.0;
      for (int f = 0; f < F; ++f) {
        // The reference's float32 phase: fl32(fl32(D * w) + fl32(phi)) (spec 4.3).
        const float dw = static_cast<float>(distance) * rope.omega[static_cast<std::size_t>(f)];
        const float phase = dw + static_cast<float>(phi[static_cast<std::size_t>(f)]);
        s_trig += s2 * amp[static_cast<std::size_t>(f)] * std::cos(static_cast<double>(phase));
      }
      total += s_trig + s_norm;
      best = std::max(best, s_trig + s_norm);
    }
    out[static_cast<std::size_t>(i)] = params.offsets_aggregation == Aggregation::max
                                           ? best
                                           : total / static_cast<double>(rope.offsets.size());
  }
  return out;
}

namespace {

// The `keep` best entries by descending score, ties to the lower index.
std::vector<int> top(const std::vector<double>& score, int keep) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
  });
  order.resize(static_cast<std::size_t>(keep));
  return order;
}

// Elementwise max (or mean) of the given rows.
std::vector<double> reduce(const std::vector<const std::vector<double>*>& rows, std::size_t n,
                           Aggregation how) {
  std::vector<double> out(n, how == Aggregation::max ? -HUGE_VAL : 0.0);
  for (const auto* r : rows)
    for (std::size_t i = 0; i < n; ++i)
      out[i] = how == Aggregation::max ? std::max(out[i], (*r)[i]) : out[i] + (*r)[i];
  if (how == Aggregation::mean)
    for (double& x : out) x /= static_cast<double>(rows.size());
  return out;
}

}  // namespace

Decision decide(const std::vector<std::vector<HeadKeys>>& keys, int head_dim, int q_heads,
                int prefix, const Stats& stats, const Rope& rope, const Params& params,
                std::int64_t round_start, ThreadPool* pool) {
  const int layers = static_cast<int>(keys.size());
  if (layers == 0 || keys[0].empty()) throw Error("triattention: no keys");
  const int kv_heads = static_cast<int>(keys[0].size());
  if (q_heads % kv_heads != 0)
    throw Error("triattention: the query heads are not a multiple of the KV heads");
  if (stats.layers != layers || stats.q_heads != q_heads)
    throw Error("triattention: the statistics are for " + std::to_string(stats.layers) +
                " layers of " + std::to_string(stats.q_heads) + " query heads, the model has " +
                std::to_string(layers) + " of " + std::to_string(q_heads));
  const int group = q_heads / kv_heads;
  const int n = keys[0][0].n;
  for (const auto& layer : keys)
    for (const HeadKeys& h : layer)
      if (h.n != n) throw Error("triattention: every layer and head must hold as many entries");

  Decision d;
  d.prefix = params.allow_prefill_compression ? 0 : std::min(prefix, n);
  const int units = params.mode == Mode::per_layer_perhead ? layers * kv_heads : kv_heads;
  if (params.budget <= d.prefix) {
    // The reference's edge case (spec 10.3): the first `budget` prompt entries, nothing else.
    d.compressed = true;
    std::vector<int> first(static_cast<std::size_t>(std::min(params.budget, d.prefix)));
    std::iota(first.begin(), first.end(), 0);
    d.kept.assign(static_cast<std::size_t>(units), first);
    return d;
  }
  const int n_decode = n - d.prefix;
  d.keep = std::min(params.budget - d.prefix, n_decode);
  d.compressed = n_decode > d.keep;

  std::vector<std::pair<int, int>> rows = stats.sampled;
  if (rows.empty())
    for (int l = 0; l < layers; ++l)
      for (int j = 0; j < q_heads; ++j) rows.emplace_back(l, j);
  for (const auto& [l, j] : rows)
    if (l < 0 || l >= layers || j < 0 || j >= q_heads)
      throw Error("triattention: a sampled head is outside the model");
  // Each (layer, query head) row is scored and normalised alone: the rows run in parallel.
  d.raw.resize(rows.size());
  d.normalized.resize(rows.size());
  const auto score_row = [&](std::size_t r) {
    const auto [l, j] = rows[r];
    const HeadKeys& all = keys[static_cast<std::size_t>(l)][static_cast<std::size_t>(j / group)];
    HeadKeys decode{all.keys + static_cast<std::size_t>(d.prefix) * head_dim,
                    all.positions + d.prefix, n_decode};
    d.raw[r] = raw_scores(decode, head_dim, stats, l, j, rope, params, round_start);
    std::vector<double> z = d.raw[r];
    if (params.normalize_scores && n_decode > 0) {
      double mean = 0.0;
      for (double x : z) mean += x;
      mean /= n_decode;
      double var = 0.0;
      for (double x : z) var += (x - mean) * (x - mean);
      const double sd = std::max(std::sqrt(var / n_decode), 1e-6);
      for (double& x : z) x = (x - mean) / sd;
    }
    d.normalized[r] = std::move(z);
  };
  if (pool != nullptr) {
    pool->parallel_for(rows.size(), score_row);
  } else {
    for (std::size_t r = 0; r < rows.size(); ++r) score_row(r);
  }

  const auto n_d = static_cast<std::size_t>(n_decode);
  std::vector<const std::vector<double>*> all_rows;
  for (const auto& r : d.normalized) all_rows.push_back(&r);
  auto prompt_then = [&](const std::vector<int>& chosen) {
    std::vector<int> kept(static_cast<std::size_t>(d.prefix));
    std::iota(kept.begin(), kept.end(), 0);
    for (int i : chosen) kept.push_back(d.prefix + i);
    return kept;
  };
  if (params.mode == Mode::union_all) {
    d.aggregated.push_back(reduce(all_rows, n_d, Aggregation::max));
    std::vector<int> chosen = top(d.aggregated[0], d.keep);
    std::sort(chosen.begin(), chosen.end());
    d.kept.assign(static_cast<std::size_t>(kv_heads), prompt_then(chosen));
    return d;
  }
  for (int l = 0; l < layers; ++l) {
    if (params.mode == Mode::per_head && l > 0) break;
    for (int k = 0; k < kv_heads; ++k) {
      std::vector<double> score;
      if (params.mode == Mode::per_head) {
        // Mean over layers of the max over the group (spec 5.4); no row: the mean of all rows.
        std::vector<std::vector<double>> per_layer;
        for (int ll = 0; ll < layers; ++ll) {
          std::vector<const std::vector<double>*> group_rows;
          for (std::size_t r = 0; r < rows.size(); ++r)
            if (rows[r].first == ll && rows[r].second / group == k)
              group_rows.push_back(&d.normalized[r]);
          if (!group_rows.empty()) per_layer.push_back(reduce(group_rows, n_d, Aggregation::max));
        }
        std::vector<const std::vector<double>*> layer_rows;
        for (const auto& v : per_layer) layer_rows.push_back(&v);
        score = layer_rows.empty() ? reduce(all_rows, n_d, Aggregation::mean)
                                   : reduce(layer_rows, n_d, Aggregation::mean);
      } else {
        std::vector<const std::vector<double>*> group_rows;
        for (std::size_t r = 0; r < rows.size(); ++r)
          if (rows[r].first == l && rows[r].second / group == k)
            group_rows.push_back(&d.normalized[r]);
        score = group_rows.empty() ? reduce(all_rows, n_d, Aggregation::mean)
                                   : reduce(group_rows, n_d, params.layer_perhead_aggregation);
      }
      d.kept.push_back(prompt_then(top(score, d.keep)));
      d.aggregated.push_back(std::move(score));
    }
  }
  return d;
}

bool should_compress(const Params& params, int cache_len, int prefix,
                     std::int64_t absolute_position) {
  const int e = params.count_prompt_tokens ? cache_len : cache_len - prefix;
  if (params.slack_trigger) return e >= params.budget + params.divide_length;
  return e >= params.budget && absolute_position % params.divide_length == 0;
}

}  // namespace rkv::tri
