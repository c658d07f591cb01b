#include "engine/generator.h"

#include <algorithm>

#include "core/error.h"

namespace rkv {

void prefill(const Model& model, KvCache& cache, std::span<const int> tokens, int first_position,
             int chunk, ForwardScratch& scratch, ThreadPool& pool, float* last_logits,
             const LayerStatesFn& after_layer) {
  std::vector<ForwardRow> rows;
  chunk = std::max(1, chunk);
  for (std::size_t begin = 0; begin < tokens.size(); begin += static_cast<std::size_t>(chunk)) {
    const std::size_t end = std::min(tokens.size(), begin + static_cast<std::size_t>(chunk));
    rows.clear();
    for (std::size_t i = begin; i < end; ++i)
      rows.push_back({&cache, tokens[i], first_position + static_cast<int>(i),
                      last_logits != nullptr && i + 1 == tokens.size()});
    if (!after_layer) {
      model.forward(rows, scratch, pool, last_logits);
      continue;
    }
    const std::unique_ptr<ForwardOps> ops = model.ops(scratch, pool);
    ForwardPass pass(model.config(), *ops, rows);
    if (!pass.on_host()) throw Error("reading a layer's states needs --device cpu");
    for (int l = 0; l < pass.layers(); ++l) {
      pass.append_kv(l);
      pass.attend(l);
      after_layer(l, rows, pass.hidden());
    }
    pass.finish(last_logits);
  }
}

Completion generate_alone(const Model& model, ThreadPool& pool, Request request,
                          EngineOptions options, const Tokenizer* tokenizer) {
  Engine engine(model, tokenizer, pool, std::move(options));
  engine.submit(engine.prepare(std::move(request)));
  engine.run_until_idle();
  return engine.take_completions().at(0);
}

}  // namespace rkv
