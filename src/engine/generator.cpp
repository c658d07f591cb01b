#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace rkv {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

double GenerateStats::decode_tokens_per_second() const {
  return decode_seconds > 0 ? generated_tokens / decode_seconds : 0.0;
}
double GenerateStats::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0;
}

void prefill(const Model& model, KvCache& cache, std::span<const int> tokens, int first_position,
             int chunk, ForwardScratch& scratch, ThreadPool& pool, float* last_logits,
             ForwardObserver* observer) {
  std::vector<ForwardRow> rows;
  chunk = std::max(1, chunk);
  for (std::size_t begin = 0; begin < tokens.size(); begin += static_cast<std::size_t>(chunk)) {
    const std::size_t end = std::min(tokens.size(), begin + static_cast<std::size_t>(chunk));
    rows.clear();
    for (std::size_t i = begin; i < end; ++i)
      rows.push_back({&cache, tokens[i], first_position + static_cast<int>(i),
                      last_logits != nullptr && i + 1 == tokens.size()});
    model.forward(rows, scratch, pool, last_logits, observer);
  }
}

GenerateStats Generator::generate(std::span<const int> prompt, const GenerateOptions& options,
                                  const std::function<bool(int)>& on_token) {
  const ModelConfig& c = model_.config();
  if (prompt.empty()) throw Error("the prompt is empty: give at least one token");
  for (int id : prompt)
    if (id < 0 || id >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  if (options.max_new_tokens < 0) throw Error("the number of tokens to predict must be >= 0");
  options.sampling.validate();
  const int context = options.context_size > 0 ? options.context_size : c.max_position_embeddings;
  const int n_prompt = static_cast<int>(prompt.size());
  if (n_prompt >= context)
    throw Error("the prompt has " + std::to_string(n_prompt) + " tokens, which does not fit the context of " +
                std::to_string(context) + " tokens (raise --ctx-size or shorten the prompt)");
  const int max_new = std::min(options.max_new_tokens, context - n_prompt);

  SequenceCompressor compressor(options.compression, options.compression_vocab);
  if (options.on_compression) compressor.set_listener(options.on_compression);
  KvCache cache(model_.cache_shape(compressor.cache_capacity(n_prompt, max_new), compressor.window()));
  compressor.init_cache(cache);
  CompressionObserver observer(&pool_);
  observer.attach(&cache, &compressor);
  GenerateStats stats;
  stats.prompt_tokens = n_prompt;
  stats.kv_bytes_allocated = cache.allocated_kv_bytes();
  stats.cache_capacity = cache.capacity();
  std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
  Sampler sampler(options.sampling);

  auto t0 = std::chrono::steady_clock::now();
  prefill(model_, cache, prompt, 0, options.prefill_chunk, scratch_, pool_, logits.data(), &observer);
  compressor.compress_after_prefill(cache, n_prompt, &pool_);
  stats.max_cache_entries = cache.length(0);
  stats.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  stats.stop_reason = "length";
  int position = n_prompt;
  for (int step = 0; step < max_new; ++step) {
    const int token = sampler.sample(logits.data(), c.vocab_size);
    if (!options.ignore_eos &&
        std::find(options.eos_ids.begin(), options.eos_ids.end(), token) != options.eos_ids.end()) {
      stats.stop_reason = "eos";
      break;
    }
    ++stats.generated_tokens;
    if (!on_token(token)) {
      stats.stop_reason = "stopped";
      break;
    }
    if (step + 1 == max_new) break;  // the last token needs no forward pass
    compressor.begin_decode_step(token, position, cache);
    ForwardRow row{&cache, token, position++, true};
    model_.forward({&row, 1}, scratch_, pool_, logits.data(), &observer);
    stats.max_cache_entries = std::max(stats.max_cache_entries, cache.length(0));
  }
  stats.decode_seconds = seconds_since(t0);
  stats.kv_bytes_used = cache.used_kv_bytes();
  stats.compressions = compressor.compressions();
  stats.compression_seconds = compressor.compression_seconds();
  return stats;
}

}  // namespace rkv
