#include "engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace rkv {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

BatchEngine::BatchEngine(const Model& model, ThreadPool& pool, BatchEngineOptions options)
    : model_(model), pool_(pool), options_(options) {
  if (options_.prefill_chunk <= 0) throw Error("the prefill chunk must be at least 1 token");
  if (options_.max_batch < 0) throw Error("the batch limit must be >= 0 (0: no limit)");
  // A dtype that cannot hold the model's head size fails here, not at the first request.
  if (options_.kv_dtype) kv_row_bytes(*options_.kv_dtype, model.config().head_dim);
  if (model.device() != Device::Cpu) {
    // The caches live in the device's memory: the cap is what it has free, less room for the
    // passes' activations and scratch.
    const std::size_t free = model.device_free_bytes();
    const std::size_t reserve = free / 10 + (std::size_t{512} << 20);
    const std::size_t room = std::max<std::size_t>(free > reserve ? free - reserve : 0, 1);
    if (options_.kv_memory_bytes == 0 || options_.kv_memory_bytes > room)
      options_.kv_memory_bytes = room;
  }
  logits_.resize(static_cast<std::size_t>(model.config().vocab_size));
}

BatchEngine::~BatchEngine() = default;

std::size_t BatchEngine::slot_bytes(const BatchRequest& request) const {
  const SequenceCompressor compressor(request.compression, request.compression_vocab,
                                      request.steering);
  const int context =
      options_.context_size > 0 ? options_.context_size : model_.config().max_position_embeddings;
  const int prompt = static_cast<int>(request.prompt.size());
  const int max_new = std::max(0, std::min(request.max_new_tokens, context - prompt));
  return KvCache::slot_bytes_for(model_.cache_shape(compressor.cache_capacity(prompt, max_new),
                                                    compressor.window(), kv_dtype(request)));
}

KvDtype BatchEngine::kv_dtype(const BatchRequest& request) const {
  return request.kv_dtype.value_or(options_.kv_dtype.value_or(model_.default_kv_dtype()));
}

int BatchEngine::max_concurrent(const BatchRequest& request) const {
  const std::size_t slot = slot_bytes(request);
  std::size_t n = options_.kv_memory_bytes == 0 ? static_cast<std::size_t>(1) << 30
                                                : options_.kv_memory_bytes / slot;
  if (options_.max_batch > 0)
    n = std::min<std::size_t>(n, static_cast<std::size_t>(options_.max_batch));
  return static_cast<int>(std::min<std::size_t>(n, 1u << 30));
}

void check_runs_on_device(const Model& model, const CompressionParams& compression,
                          const SteeringParams& steering, KvDtype kv_dtype) {
  if (model.device() == Device::Cpu) return;
  // The CUDA backend runs the forward pass and fullkv caches; compression, steering and a q8_0
  // cache run on the CPU only in this build (docs/GPU.md).
  if (compression.method != Method::fullkv || steering.enabled())
    throw Error("--kv-method " + std::string(method_name(compression.method)) +
                (steering.enabled() ? " with steering" : "") +
                " runs on --device cpu only: the CUDA backend runs fullkv (docs/GPU.md)");
  if (kv_dtype == KvDtype::q8_0)
    throw Error(
        "a q8_0 KV cache has no CUDA kernels: use bf16, f16 or f32 (--kv-dtype, or kv.dtype in a "
        "request) on "
        "--device cuda, or run with --device cpu");
}

std::uint64_t BatchEngine::submit(BatchRequest request) {
  const ModelConfig& c = model_.config();
  if (request.prompt.empty()) throw Error("the prompt is empty: give at least one token");
  for (int id : request.prompt)
    if (id < 0 || id >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  if (request.max_new_tokens < 0) throw Error("the number of tokens to predict must be >= 0");
  request.sampling.validate();
  const int context = options_.context_size > 0 ? options_.context_size : c.max_position_embeddings;
  const int prompt = static_cast<int>(request.prompt.size());
  if (prompt >= context)
    throw Error("the prompt has " + std::to_string(prompt) +
                " tokens, which does not fit the context of " + std::to_string(context) +
                " tokens (raise --ctx-size or shorten the prompt)");
  if (request.steering.enabled())
    check_steering_vector(*request.steering.vector, c, {}, "steering");
  auto seq = std::make_unique<Sequence>();
  seq->compressor = std::make_unique<SequenceCompressor>(
      request.compression, request.compression_vocab, request.steering);
  seq->max_new = std::min(request.max_new_tokens, context - prompt);
  if (request.seed_tokens < 0 || request.seed_tokens >= prompt)
    throw Error("seed tokens must be between 0 and the prompt's length less one, not " +
                std::to_string(request.seed_tokens));
  // Seed tokens count as generated ones: a compressed cache needs budget + buffer for them.
  seq->capacity = seq->compressor->cache_capacity(prompt - request.seed_tokens,
                                                  seq->max_new + request.seed_tokens);
  seq->kv_dtype = kv_dtype(request);
  check_runs_on_device(model_, request.compression, request.steering, seq->kv_dtype);
  if (model_.device() != Device::Cpu && seq->kv_dtype != kv_dtype(BatchRequest{}))
    throw Error("on --device cuda every request of a batch uses the engine's KV dtype (" +
                std::string(kv_dtype_name(kv_dtype(BatchRequest{}))) + "), not " +
                std::string(kv_dtype_name(seq->kv_dtype)));
  seq->slot_bytes = KvCache::slot_bytes_for(
      model_.cache_shape(seq->capacity, seq->compressor->window(), seq->kv_dtype));
  if (options_.kv_memory_bytes > 0 && seq->slot_bytes > options_.kv_memory_bytes)
    throw Error("the request needs a KV cache of " + std::to_string(seq->slot_bytes) + " bytes (" +
                std::to_string(seq->capacity) +
                " entries per head), more than the whole KV memory cap of " +
                std::to_string(options_.kv_memory_bytes) +
                " bytes: lower the budget or max tokens, or raise the cap");
  if (request.on_compression) seq->compressor->set_listener(request.on_compression);
  seq->id = next_id_++;
  seq->request = std::move(request);
  seq->submitted = Clock::now();
  waiting_.push_back(std::move(seq));
  return waiting_.back()->id;
}

void BatchEngine::admit() {
  while (!waiting_.empty()) {
    Sequence& seq = *waiting_.front();
    if (options_.max_batch > 0 && static_cast<int>(running_.size()) >= options_.max_batch) break;
    if (options_.kv_memory_bytes > 0 &&
        kv_bytes_in_use_ + seq.slot_bytes > options_.kv_memory_bytes)
      break;
    seq.cache = std::make_unique<KvCache>(
        model_.cache_shape(seq.capacity, seq.compressor->window(), seq.kv_dtype));
    seq.compressor->init_cache(*seq.cache);
    seq.sampler = std::make_unique<Sampler>(seq.request.sampling);
    seq.admitted = Clock::now();
    kv_bytes_in_use_ += seq.slot_bytes;
    peak_kv_bytes_ = std::max(peak_kv_bytes_, kv_bytes_in_use_);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  peak_running_ = std::max(peak_running_, static_cast<int>(running_.size()));
}

void BatchEngine::retire(Sequence& s) {
  BatchResult result;
  result.id = s.id;
  result.tokens = std::move(s.generated);
  result.stop_reason = s.stop_reason;
  result.error = s.error;
  result.prompt_tokens = s.prompt_size();
  result.kv_bytes = s.slot_bytes;
  result.kv_dtype = s.kv_dtype;
  result.cache_capacity = s.capacity;
  result.compressions = s.compressor->compressions();
  result.compression_seconds = s.compressor->compression_seconds();
  retired_compression_seconds_ += result.compression_seconds;
  result.kv_bytes_used = s.cache ? s.cache->used_kv_bytes() : 0;
  result.max_cache_entries = s.max_entries;
  if (s.admitted_yet()) {
    result.queued_seconds = seconds_between(s.submitted, s.admitted);
    result.prefill_seconds = s.prefilling() ? seconds_between(s.admitted, Clock::now())
                                            : seconds_between(s.admitted, s.prefill_done);
    kv_bytes_in_use_ -= s.slot_bytes;
  } else {
    result.queued_seconds = seconds_between(s.submitted, Clock::now());
  }
  result.decode_seconds = s.decode_seconds;
  results_.push_back(std::move(result));
}

bool BatchEngine::cancel(std::uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    (*it)->finish("cancelled");
    retire(**it);
    waiting_.erase(it);
    return true;
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id != id || (*it)->finished) continue;
    (*it)->finish("cancelled");
    retire(**it);  // frees the slot now: the next step can admit into it
    running_.erase(it);
    return true;
  }
  return false;
}

BatchEngine::StepPlan BatchEngine::schedule() {
  admit();
  StepPlan plan;
  plan.observer = std::make_unique<CompressionObserver>(&pool_, model_.config().hidden_size);
  // One decode row per sequence past its prompt...
  for (auto& s : running_) {
    if (s->prefilling() || s->next_token < 0) continue;
    const int position = s->prompt_size() + static_cast<int>(s->generated.size()) - 1;
    s->compressor->begin_decode_step(s->next_token, position, *s->cache);
    plan.rows.push_back({s->cache.get(), s->next_token, position, true});
    plan.row_seq.push_back(s.get());
    plan.observer->attach(s->cache.get(), s->compressor.get());
  }
  plan.n_decode = plan.rows.size();
  // ...then prompt chunks within the prefill budget.
  int prefill_budget = options_.prefill_chunk;
  for (auto& s : running_) {
    if (!s->prefilling() || prefill_budget == 0) continue;
    // Seed tokens of a compressing sequence go in chunks of at most `buffer`, each compressed
    // after it (postprocess), so its cache stays within budget + buffer.
    int stop = s->prompt_size();
    const int real = s->prompt_size() - s->request.seed_tokens;
    if (s->request.seed_tokens > 0 && s->compressor->enabled())
      stop = s->prefilled < real ? real
                                 : std::min(stop, s->prefilled + s->compressor->params().buffer);
    const int n = std::min(prefill_budget, stop - s->prefilled);
    for (int i = 0; i < n; ++i) {
      const int p = s->prefilled + i;
      plan.rows.push_back({s->cache.get(), s->request.prompt[static_cast<std::size_t>(p)], p,
                           p + 1 == s->prompt_size()});
      plan.row_seq.push_back(s.get());
    }
    plan.observer->attach(s->cache.get(), s->compressor.get());
    s->prefilled += n;
    prefill_budget -= n;
    if (s->request.seed_tokens > 0 && s->prefilling() && s->prefilled >= real)
      plan.seeding.push_back(s.get());
  }
  return plan;
}

double BatchEngine::run(StepPlan& plan) {
  std::size_t n_logits = 0;
  for (const auto& r : plan.rows) n_logits += r.want_logits ? 1 : 0;
  logits_.resize(std::max<std::size_t>(1, n_logits) *
                 static_cast<std::size_t>(model_.config().vocab_size));
  const auto t0 = Clock::now();
  model_.forward(plan.rows, scratch_, pool_, logits_.data(), plan.observer.get());
  const double seconds = seconds_between(t0, Clock::now());
  ++steps_;
  step_seconds_ += seconds;
  return seconds;
}

void BatchEngine::postprocess(const StepPlan& plan, double step_seconds) {
  const int V = model_.config().vocab_size;
  for (auto& s : running_) s->max_entries = std::max(s->max_entries, s->cache->length(0));
  std::size_t logit_row = 0;
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    if (!plan.rows[r].want_logits) continue;
    Sequence& s = *plan.row_seq[r];
    float* logits = logits_.data() + logit_row++ * static_cast<std::size_t>(V);
    if (r < plan.n_decode) {
      s.decode_seconds += step_seconds;
      if (s.request.on_step_time) s.request.on_step_time(plan.rows[r].position, step_seconds);
    } else {
      // The prompt is complete: compress it once if it exceeds the budget (ALGORITHMS.md 1).
      if (!compress_or_fail(s, s.prompt_size())) continue;
      s.max_entries = s.cache->length(0);
      s.prefill_done = Clock::now();
      if (s.max_new == 0) {
        s.finish("length");
        continue;
      }
    }
    const int token = s.sampler->sample(logits, V);
    const auto& eos = s.request.eos_ids;
    if (!s.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      s.finish("eos");
      continue;
    }
    s.generated.push_back(token);
    if (s.request.on_token && !s.request.on_token(token)) {
      s.finish("stopped");
      continue;
    }
    if (static_cast<int>(s.generated.size()) >= s.max_new) {
      s.finish("length");
      continue;
    }
    s.next_token = token;
  }
  // Seeded sequences between chunks: compressed as after a prompt (BatchRequest::seed_tokens).
  for (Sequence* s : plan.seeding)
    if (!s->finished) compress_or_fail(*s, s->prefilled);
  retire_finished();
}

double BatchEngine::compression_seconds() const {
  double total = retired_compression_seconds_;
  for (const auto& s : running_) total += s->compressor->compression_seconds();
  return total;
}

bool BatchEngine::compress_or_fail(Sequence& s, std::int64_t tokens) {
  try {
    s.compressor->compress_after_prefill(*s.cache, tokens, &pool_);
    return true;
  } catch (const std::exception& e) {
    // A compression that fails (a listener that throws) ends its sequence, not the engine.
    s.finish("error");
    s.error = e.what();
    return false;
  }
}

void BatchEngine::retire_finished() {
  // Retire finished sequences and free their slots.
  for (auto& s : running_)
    if (s->finished) retire(*s);
  std::erase_if(running_, [](const auto& s) { return s->finished; });
}

bool BatchEngine::step() {
  StepPlan plan = schedule();
  if (running_.empty()) return !waiting_.empty();
  double seconds = 0.0;
  try {
    seconds = run(plan);
  } catch (const std::exception& e) {
    // A pass that failed (a device out of memory, a CUDA error) ends the sequences it carried,
    // with the error; the others, and the engine, go on.
    for (Sequence* s : plan.row_seq) {
      if (s->finished) continue;
      s->finish("error");
      s->error = e.what();
    }
    retire_finished();
    return !running_.empty() || !waiting_.empty();
  }
  postprocess(plan, seconds);
  return !running_.empty() || !waiting_.empty();
}

void BatchEngine::run() {
  while (step()) {
  }
}

std::vector<BatchResult> BatchEngine::take_results() {
  std::vector<BatchResult> out;
  out.swap(results_);
  return out;
}

int BatchEngine::running() const {
  return static_cast<int>(running_.size());
}
int BatchEngine::waiting() const {
  return static_cast<int>(waiting_.size());
}

std::size_t parse_byte_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = used == 0 ? "?" : text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 0.0;
  if (unit.empty() || unit == "B")
    scale = 1.0;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    scale = 1024.0;
  else if (unit == "M" || unit == "MiB")
    scale = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "GiB")
    scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  if (scale == 0.0 || !(value > 0.0) || !std::isfinite(value))
    throw Error("'" + text + "' is not a memory size (examples: 6GiB, 512MiB, 1.5G, 1000000)");
  return static_cast<std::size_t>(value * scale);
}

}  // namespace rkv
