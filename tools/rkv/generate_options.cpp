#include "generate_options.h"

#include <random>

#include "common.h"

namespace rkv::cli {

SamplingParams GenerateFlags::sampling() const {
  SamplingParams s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.presence_penalty = presence_penalty;
  s.frequency_penalty = frequency_penalty;
  s.repetition_penalty = repeat_penalty;
  s.seed = seed >= 0 ? static_cast<std::uint64_t>(seed) : std::random_device{}();
  return s;
}

void add_generate_options(CLI::App& app, const std::shared_ptr<GenerateFlags>& flags,
                          const std::string& n_predict_help) {
  GenerateFlags& f = *flags;
  add_chat_template_options(app, f.chat_template, f.chat_template_file);
  add_flag_option(app, "-n,--predict,--max-new-tokens", f.n_predict, n_predict_help)
      ->check(at_least(0));
  add_flag_option(app, "--temp,--temperature", f.temperature, "Sampling temperature; 0 is greedy");
  add_flag_option(app, "--top-k", f.top_k, "Keep only the k most likely tokens (0: off)");
  add_flag_option(app, "--top-p", f.top_p,
                  "Nucleus sampling: keep the smallest set with this mass (1: off)");
  add_flag_option(app, "--min-p", f.min_p,
                  "Drop tokens below min-p times the best token's probability (0: off)");
  add_flag_option(app, "--presence-penalty", f.presence_penalty,
                  "Subtract this from the logit of every token generated before (OpenAI's, "
                  "[-2, 2]; 0: off)");
  add_flag_option(app, "--frequency-penalty", f.frequency_penalty,
                  "Subtract this times its count from the logit of every token generated before "
                  "(OpenAI's, [-2, 2]; 0: off)");
  add_flag_option(app, "--repeat-penalty,--repetition-penalty", f.repeat_penalty,
                  "Divide the positive logits of every token of the prompt and the output so far "
                  "by this and multiply the negative ones (Hugging Face's; 1: off)");
  add_flag_option(app, "--thinking-budget", f.thinking_budget,
                  "Close the chain of thought after this many of its tokens (writing "
                  "--thinking-budget-message, then </think>) and let the answer follow (-1: none)")
      ->check(at_least(-1));
  add_flag_option(app, "--thinking-budget-message", f.thinking_budget_message,
                  "Text written before </think> when the thinking budget is spent (e.g. \"Time "
                  "to answer.\")");
  add_flag_option(app, "-s,--seed", f.seed,
                  "Random seed; the same seed gives the same output (-1: random)");
  app.add_option("--stop", f.stops,
                 "Stop when the output contains this text (repeatable); it is not printed");
  app.add_flag("--ignore-eos", f.ignore_eos, "Keep generating after an end-of-sequence token");
  add_flag_option(app, "-c,--ctx-size", f.ctx_size,
                  "Context size in tokens (0: the model's maximum)")
      ->check(at_least(0));
  add_kv_options(app, f.kv);
  add_steering_options(app, f.steering);
}

}  // namespace rkv::cli
