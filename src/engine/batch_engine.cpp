#include "engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace rkv {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

BatchEngine::BatchEngine(const Model& model, ThreadPool& pool, BatchEngineOptions options)
    : model_(model), pool_(pool), options_(std::move(options)), runner_(model, pool) {
  if (options_.prefill_chunk <= 0) throw Error("the prefill chunk must be at least 1 token");
  if (options_.max_batch < 0) throw Error("the batch limit must be >= 0 (0: no limit)");
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

int BatchEngine::max_concurrent(const PreparedRequest& request) const {
  const std::size_t slot = std::max<std::size_t>(1, request.slot_bytes);
  std::size_t n = options_.kv_memory_bytes == 0 ? static_cast<std::size_t>(1) << 30
                                                : options_.kv_memory_bytes / slot;
  if (options_.max_batch > 0)
    n = std::min<std::size_t>(n, static_cast<std::size_t>(options_.max_batch));
  return static_cast<int>(std::min<std::size_t>(n, 1u << 30));
}

std::uint64_t BatchEngine::submit(PreparedRequest request, SequenceHooks hooks) {
  if (options_.kv_memory_bytes > 0 && request.slot_bytes > options_.kv_memory_bytes)
    throw Error("the request needs a KV cache of " + std::to_string(request.slot_bytes) +
                " bytes (" + std::to_string(request.cache_capacity) +
                " entries per head), more than the whole KV memory cap of " +
                std::to_string(options_.kv_memory_bytes) +
                " bytes: lower the budget or max tokens, or raise the cap");
  auto seq = std::make_unique<Sequence>();
  seq->memory = std::make_unique<KvMemory>(
      request.request.compression, options_.compression_vocab, request.request.steering,
      ModelCalibration{options_.query_stats, model_.rope_frequencies(), model_.rope_magnitude()});
  if (request.request.on_compression) seq->memory->set_listener(request.request.on_compression);
  seq->id = next_id_++;
  seq->request = std::move(request);
  seq->hooks = std::move(hooks);
  seq->submitted = Clock::now();
  waiting_.push_back(std::move(seq));
  return waiting_.back()->id;
}

void BatchEngine::admit() {
  while (!waiting_.empty()) {
    Sequence& seq = *waiting_.front();
    if (options_.max_batch > 0 && static_cast<int>(running_.size()) >= options_.max_batch) break;
    if (options_.kv_memory_bytes > 0 &&
        kv_bytes_in_use_ + seq.request.slot_bytes > options_.kv_memory_bytes)
      break;
    seq.memory->allocate(KvMemory::shape_for(model_, seq.request.request.compression,
                                             seq.request.cache_capacity, seq.kv_dtype()),
                         seq.prompt_size() - seq.seed_tokens());
    seq.sampler = std::make_unique<Sampler>(seq.request.request.sampling, seq.request.prompt);
    seq.thinking = seq.request.starts_in_reasoning;
    if (!seq.thinking) start_answer(seq);
    seq.admitted = Clock::now();
    kv_bytes_in_use_ += seq.request.slot_bytes;
    peak_kv_bytes_ = std::max(peak_kv_bytes_, kv_bytes_in_use_);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  peak_running_ = std::max(peak_running_, static_cast<int>(running_.size()));
}

void BatchEngine::start_answer(Sequence& s) {
  s.answer_started = true;
  const auto& prefix = s.request.answer_prefix;
  s.forced.insert(s.forced.end(), prefix.begin(), prefix.end());
}

void BatchEngine::retire(Sequence& s) {
  BatchResult result;
  result.id = s.id;
  result.tokens = std::move(s.generated);
  result.logprobs = std::move(s.logprobs);
  result.reasoning_tokens = s.reasoning_tokens;
  result.stop_reason = s.stop_reason;
  result.error = s.error;
  result.prompt_tokens = s.prompt_size();
  result.kv_bytes = s.request.slot_bytes;
  result.kv_dtype = s.kv_dtype();
  result.cache_capacity = s.request.cache_capacity;
  result.compressions = s.memory->compressions();
  result.compression_seconds = s.memory->compression_seconds();
  retired_compression_seconds_ += result.compression_seconds;
  result.kv_bytes_used = s.admitted_yet() ? s.memory->cache().used_kv_bytes() : 0;
  result.max_cache_entries = s.max_entries;
  if (s.admitted_yet()) {
    result.queued_seconds = seconds_between(s.submitted, s.admitted);
    result.prefill_seconds = s.prefilling() ? seconds_between(s.admitted, Clock::now())
                                            : seconds_between(s.admitted, s.prefill_done);
    kv_bytes_in_use_ -= s.request.slot_bytes;
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
  const auto add_row = [&plan](Sequence& s, int token, int position, bool want_logits) {
    plan.rows.push_back({s.memory->cache_for_appends(), token, position, want_logits});
    plan.row_seq.push_back(&s);
    plan.row_memory.push_back(s.memory.get());
  };
  // One decode row per sequence past its prompt...
  for (auto& s : running_) {
    if (s->prefilling() || s->next_token < 0) continue;
    const int position = s->prompt_size() + static_cast<int>(s->generated.size()) - 1;
    s->memory->begin_decode_step(s->next_token, position);
    add_row(*s, s->next_token, position, true);
  }
  plan.n_decode = plan.rows.size();
  // ...then prompt chunks within the prefill budget.
  int prefill_budget = options_.prefill_chunk;
  for (auto& s : running_) {
    if (!s->prefilling() || prefill_budget == 0) continue;
    // Seed tokens of a compressing sequence go in chunks of at most `buffer`, each compressed
    // after it (postprocess), so its cache stays within budget + buffer.
    int stop = s->prompt_size();
    const int real = s->prompt_size() - s->seed_tokens();
    if (s->seed_tokens() > 0 && s->memory->compresses())
      stop = s->prefilled < real
                 ? real
                 : std::min(stop, s->prefilled + s->request.request.compression.buffer);
    const int n = std::min(prefill_budget, stop - s->prefilled);
    for (int i = 0; i < n; ++i) {
      const int p = s->prefilled + i;
      add_row(*s, s->request.prompt[static_cast<std::size_t>(p)], p, p + 1 == s->prompt_size());
    }
    s->prefilled += n;
    prefill_budget -= n;
    if (s->seed_tokens() > 0 && s->prefilling() && s->prefilled >= real)
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
  runner_.run(plan.rows, plan.row_memory, logits_.data());
  const double seconds = seconds_between(t0, Clock::now());
  ++steps_;
  step_seconds_ += seconds;
  return seconds;
}

void BatchEngine::postprocess(const StepPlan& plan, double step_seconds) {
  const int V = model_.config().vocab_size;
  for (auto& s : running_) s->max_entries = std::max(s->max_entries, s->memory->cache().length(0));
  std::size_t logit_row = 0;
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    if (!plan.rows[r].want_logits) continue;
    Sequence& s = *plan.row_seq[r];
    float* logits = logits_.data() + logit_row++ * static_cast<std::size_t>(V);
    if (r < plan.n_decode) {
      s.decode_seconds += step_seconds;
      if (s.hooks.on_step_time) s.hooks.on_step_time(plan.rows[r].position, step_seconds);
    } else {
      // The prompt is complete: compress it once if it exceeds the budget (ALGORITHMS.md 1).
      if (!compress_or_fail(s, s.prompt_size())) continue;
      s.max_entries = s.memory->cache().length(0);
      s.prefill_done = Clock::now();
      if (s.request.max_new_tokens == 0) {
        s.finish("length");
        continue;
      }
    }
    if (s.request.request.on_logits)
      s.request.request.on_logits(plan.rows[r].position,
                                  std::span<const float>(logits, static_cast<std::size_t>(V)));
    // Log-probabilities are the model's own, before the sampler adjusts the logits in place.
    const int want_logprobs = s.request.request.logprobs;
    std::optional<TokenLogprob> logprob;
    if (want_logprobs >= 0) logprob = top_logprobs(logits, V, want_logprobs, logprob_scratch_);
    // A thinking budget spent: the thought's closing tokens are written, not sampled.
    const int budget = s.request.request.thinking_budget;
    if (budget >= 0 && s.thinking && !s.thought_closed && s.thought_tokens >= budget &&
        s.forced.empty()) {
      s.forced.assign(s.request.thinking_close.begin(), s.request.thinking_close.end());
      s.thought_closed = true;
    }
    int token;
    if (!s.forced.empty()) {
      token = s.forced.front();
      s.forced.pop_front();
    } else if (const auto& replay = s.request.request.replay_ids; !replay.empty()) {
      if (s.script_pos == replay.size()) {
        s.finish("length");
        continue;
      }
      token = replay[s.script_pos++];
    } else if (s.request.request.scripted_reply) {
      const auto& script = s.request.scripted_reply;
      token = s.script_pos < script.size() ? script[s.script_pos++] : s.request.eos_ids.front();
    } else {
      token = s.sampler->sample(logits, V);
    }
    const auto& eos = s.request.eos_ids;
    if (!s.request.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      s.finish("eos");
      continue;
    }
    s.generated.push_back(token);
    // The chain of thought: reasoning_tokens counts it up to and including </think>, the
    // thinking budget its tokens between the markers. (An absent marker's id is -1.)
    const bool opens = token == s.request.think_start_id;
    if (opens) s.thinking = true;
    if (s.thinking) ++s.reasoning_tokens;
    if (token == s.request.think_end_id) {
      s.thinking = false;
      if (!s.answer_started) start_answer(s);
    } else if (s.thinking && !opens) {
      ++s.thought_tokens;
    }
    if (logprob) {
      logprob->token = token;
      logprob->logprob = logprob_scratch_[static_cast<std::size_t>(token)];
      s.logprobs.push_back(std::move(*logprob));
      if (s.hooks.on_logprob) s.hooks.on_logprob(s.logprobs.back());
    }
    if (s.hooks.on_token && !s.hooks.on_token(token)) {
      s.finish("stopped");
      continue;
    }
    if (static_cast<int>(s.generated.size()) >= s.request.max_new_tokens) {
      s.finish("length");
      continue;
    }
    s.next_token = token;
  }
  // Seeded sequences between chunks: compressed as after a prompt (Request::seed_tokens).
  for (Sequence* s : plan.seeding)
    if (!s->finished) compress_or_fail(*s, s->prefilled);
  retire_finished();
}

double BatchEngine::compression_seconds() const {
  double total = retired_compression_seconds_;
  for (const auto& s : running_) total += s->memory->compression_seconds();
  return total;
}

TokenLogprob top_logprobs(const float* logits, int vocab, int top, std::vector<float>& all) {
  // log p = logit - logsumexp(logits), the sum in double.
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const double lse = static_cast<double>(max_logit) + std::log(sum);
  all.resize(static_cast<std::size_t>(vocab));
  for (int i = 0; i < vocab; ++i)
    all[static_cast<std::size_t>(i)] = static_cast<float>(static_cast<double>(logits[i]) - lse);
  // The `top` best ids, kept sorted as one pass goes over the vocabulary in id order (a later id
  // displaces only a strictly larger logit: ties go to the lower id). No vocabulary-sized scratch.
  TokenLogprob out;
  const std::size_t k = static_cast<std::size_t>(std::min(top, vocab));
  std::vector<int> best;
  best.reserve(k + 1);
  for (int i = 0; i < vocab && k > 0; ++i) {
    if (best.size() == k && logits[i] <= logits[best.back()]) continue;
    auto at = std::find_if(best.begin(), best.end(), [&](int b) { return logits[i] > logits[b]; });
    best.insert(at, i);
    if (best.size() > k) best.pop_back();
  }
  for (int id : best) out.top.emplace_back(id, all[static_cast<std::size_t>(id)]);
  return out;
}

bool BatchEngine::compress_or_fail(Sequence& s, std::int64_t tokens) {
  try {
    s.memory->compress_all_layers(tokens, &pool_);
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
