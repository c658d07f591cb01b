// Sampling settings of one request: greedy, temperature, top-k, top-p, min-p, seeded, with
// logit bias and repetition penalties. The logits are adjusted first (logit bias, then the
// repetition penalty, then the presence and frequency penalties, as vLLM does), then the filters
// apply in Hugging Face's order (temperature, top-k, top-p, min-p); greedy takes the argmax of
// the adjusted logits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace rkv {

// One generated token's log-probability under the model (the log-softmax of its logits, before
// the logit bias, the penalties and the temperature: vLLM's raw log-probabilities), and the most
// likely tokens at that step, best first.
struct TokenLogprob {
  int token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int, float>> top;  // (token id, log-probability)
};

struct SamplingParams {
  float temperature = 0.6f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.0f;        // 0: off
  std::uint64_t seed = 0;
  // OpenAI's: logit[t] -= frequency_penalty * c[t] + presence_penalty * (c[t] > 0), with c[t]
  // the times t was generated so far in this request. Each in [-2, 2]; 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Hugging Face's (vLLM's, llama.cpp's --repeat-penalty over the whole context): every token of
  // the prompt or generated so far has its logit divided by it when positive, multiplied by it
  // when negative. In (0, 10]; 1: off.
  float repetition_penalty = 1.0f;
  // (token id, bias) pairs added to those tokens' logits, each bias in [-100, 100] (OpenAI's
  // logit_bias; -100 in effect bans a token, 100 forces it). Engine::prepare checks the ids
  // against the vocabulary.
  std::vector<std::pair<int, float>> logit_bias;

  // Throws rkv::Error on values outside their ranges.
  void validate() const;
};

}  // namespace rkv
