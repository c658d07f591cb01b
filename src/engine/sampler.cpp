#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace rkv {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw Error("temperature must be >= 0 (0 is greedy), got " + std::to_string(temperature));
  if (top_k < 0) throw Error("top-k must be >= 0 (0 is off), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw Error("top-p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p < 1.0f))
    throw Error("min-p must be in [0, 1), got " + std::to_string(min_p));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    throw Error("presence penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    throw Error("frequency penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f))
    throw Error("repetition penalty must be in (0, 10] (1 is off), got " +
                std::to_string(repetition_penalty));
  if (logit_bias.size() > 4096)
    throw Error("logit bias takes at most 4096 tokens, got " + std::to_string(logit_bias.size()));
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) throw Error("logit bias: token id " + std::to_string(token) + " is negative");
    if (!(bias >= -100.0f && bias <= 100.0f))
      throw Error("logit bias of token " + std::to_string(token) + " must be in [-100, 100], got " +
                  std::to_string(bias));
  }
}

int argmax(const float* v, int n) {
  // Greedy decoding runs this over every row's vocabulary each step (64 rows of 128K logits in a
  // batch): each block's maximum is taken in independent lanes, which the compiler vectorises,
  // where std::max_element's one running comparison does not; then the first index holding the
  // maximum is found inside the first block that reached it.
  constexpr int kLanes = 16, kBlock = 512;
  float best = -std::numeric_limits<float>::infinity();
  int best_block = -1;
  int b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    float lane[kLanes];
    for (int k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<float>::infinity();
    for (int i = b; i < b + kBlock; i += kLanes)
      for (int k = 0; k < kLanes; ++k) lane[k] = v[i + k] > lane[k] ? v[i + k] : lane[k];
    float m = lane[0];
    for (int k = 1; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
    if (best_block < 0 || m > best) {
      best = m;
      best_block = b;
    }
  }
  int at = -1;
  if (best_block >= 0)
    for (int i = best_block; i < best_block + kBlock; ++i)
      if (v[i] == best) {
        at = i;
        break;
      }
  for (int i = b; i < n; ++i)  // the tail past the last whole block
    if (at < 0 || v[i] > v[at]) at = i;
  return std::max(at, 0);
}

Sampler::Sampler(const SamplingParams& params, std::span<const int> context)
    : params_(params), rng_(params.seed) {
  params_.validate();
  if (params_.repetition_penalty != 1.0f) seen_.insert(context.begin(), context.end());
}

void Sampler::adjust(float* logits, int vocab) const {
  for (const auto& [token, bias] : params_.logit_bias)
    if (token < vocab) logits[token] += bias;
  const float r = params_.repetition_penalty;
  if (r != 1.0f)
    for (int t : seen_)
      if (t >= 0 && t < vocab) logits[t] = logits[t] > 0.0f ? logits[t] / r : logits[t] * r;
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [t, count] : generated_)
      if (t >= 0 && t < vocab)
        logits[t] -=
            params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
}

int Sampler::sample(float* logits, int vocab) {
  adjust(logits, vocab);
  const int token = pick(logits, vocab);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) ++generated_[token];
  if (params_.repetition_penalty != 1.0f) seen_.insert(token);
  return token;
}

int Sampler::pick(float* logits, int vocab) {
  if (params_.temperature == 0.0f) return argmax(logits, vocab);
  const float inv_t = 1.0f / params_.temperature;
  const float max_logit = *std::max_element(logits, logits + vocab);
  // Probabilities below e^-40 of the best cannot matter to any filter or to the draw.
  const float cutoff = max_logit - 40.0f * params_.temperature;
  candidates_.clear();
  for (int i = 0; i < vocab; ++i)
    if (logits[i] >= cutoff) candidates_.emplace_back((logits[i] - max_logit) * inv_t, i);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::size_t n = candidates_.size();
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(),
                      by_logit);
    n = static_cast<std::size_t>(params_.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(n);
  double total = 0.0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first);
    total += c.first;
  }
  if (params_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0.0;
    std::size_t keep = 0;
    while (keep < n) {
      cum += candidates_[keep].first / total;
      ++keep;
      if (cum >= params_.top_p) break;
    }
    n = keep;
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_[0].first;
    std::size_t keep = 1;
    while (keep < n && candidates_[keep].first >= threshold) ++keep;
    n = keep;
  }
  double mass = 0.0;
  for (std::size_t i = 0; i < n; ++i) mass += candidates_[i].first;
  double u = rng_.uniform() * mass;
  for (std::size_t i = 0; i < n; ++i) {
    u -= candidates_[i].first;
    if (u < 0.0) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace rkv
