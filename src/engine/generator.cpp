#include "engine/generator.h"

#include <algorithm>

#include "engine/batch_engine.h"

namespace rkv {

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
  // One sequence through the batch engine: the same loop serves a single stream and a batch,
  // so a sequence produces the same tokens alone and beside others.
  BatchEngineOptions engine_options;
  engine_options.context_size = options.context_size;
  engine_options.prefill_chunk = options.prefill_chunk;
  BatchEngine engine(model_, pool_, engine_options);
  BatchRequest request;
  request.prompt.assign(prompt.begin(), prompt.end());
  request.max_new_tokens = options.max_new_tokens;
  request.sampling = options.sampling;
  request.eos_ids = options.eos_ids;
  request.ignore_eos = options.ignore_eos;
  request.compression = options.compression;
  request.compression_vocab = options.compression_vocab;
  request.on_compression = options.on_compression;
  request.steering = options.steering;
  request.on_token = on_token;
  engine.submit(std::move(request));
  engine.run();
  const BatchResult r = engine.take_results().at(0);
  GenerateStats stats;
  stats.prompt_tokens = r.prompt_tokens;
  stats.generated_tokens = static_cast<int>(r.tokens.size());
  stats.prefill_seconds = r.prefill_seconds;
  stats.decode_seconds = r.decode_seconds;
  stats.kv_bytes_allocated = r.kv_bytes;
  stats.kv_bytes_used = r.kv_bytes_used;
  stats.stop_reason = r.stop_reason;
  stats.cache_capacity = r.cache_capacity;
  stats.max_cache_entries = r.max_cache_entries;
  stats.compressions = r.compressions;
  stats.compression_seconds = r.compression_seconds;
  return stats;
}

}  // namespace rkv
