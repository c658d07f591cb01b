#include "engine/generator.h"

#include <algorithm>

namespace rkv {

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

BatchResult generate_alone(const Model& model, ThreadPool& pool, BatchRequest request,
                           BatchEngineOptions options) {
  BatchEngine engine(model, pool, options);
  engine.submit(std::move(request));
  engine.run();
  return engine.take_results().at(0);
}

}  // namespace rkv
