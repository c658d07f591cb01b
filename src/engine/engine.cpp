#include "rkv/engine.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/batch_engine.h"
#include "engine/compression_vocab.h"
#include "engine/text_stream.h"
#include "model/model.h"
#include "rkv/device.h"
#include "rkv/tokenizer.h"

namespace rkv {

struct Engine::Vocab {
  CompressionVocab compression;  // token ids and text the compression triggers need
  std::vector<int> eos_ids;      // the model's, then the tokenizer's
  int think_start_id = -1;       // <think>
};

// A request from submission to completion (owned by the inbox, then by active_).
struct Engine::Active {
  std::uint64_t id = 0;
  PreparedRequest prepared;
  RequestCallbacks callbacks;
  std::unique_ptr<TextStream> text;
  bool cancel_requested = false;
  std::string callback_error;  // the submitter's on_token threw: the request ends with this
  std::optional<TokenLogprob> last_logprob;  // the token on_token is about to report
};

Engine::Engine(const Model& model, const Tokenizer* tokenizer, ThreadPool& pool,
               EngineOptions options)
    : model_(model), tokenizer_(tokenizer), pool_(pool), options_(std::move(options)) {
  BatchEngineOptions b;
  b.kv_memory_bytes = options_.kv_memory_bytes;
  b.max_batch = options_.max_batch;
  b.prefill_chunk = options_.prefill_chunk;
  // A dtype that cannot hold the model's head size fails here, not at the first request.
  if (options_.kv_dtype) kv_row_bytes(*options_.kv_dtype, model_.config().head_dim);
  vocab_ = std::make_unique<Vocab>();
  vocab_->eos_ids = model_.config().eos_token_ids;
  chat_template_ =
      resolve_chat_template(tokenizer_, options_.chat_template, options_.chat_template_text,
                            options_.chat_template_origin);
  thought_close_ = thought_close(chat_template_);
  if (tokenizer_ != nullptr) {
    vocab_->compression = compression_vocab(*tokenizer_);
    for (int id : tokenizer_->eos_ids())
      if (std::find(vocab_->eos_ids.begin(), vocab_->eos_ids.end(), id) == vocab_->eos_ids.end())
        vocab_->eos_ids.push_back(id);
    vocab_->think_start_id = tokenizer_->token_id("<think>");
  }
  b.compression_vocab = vocab_->compression;
  b.query_stats = options_.query_stats;
  batch_ = std::make_unique<BatchEngine>(model_, pool_, std::move(b));
  stats_.kv_bytes_cap = options_.kv_memory_bytes;
}

Engine::~Engine() {
  stop();
}

int Engine::context_size() const {
  return options_.context_size > 0 ? options_.context_size
                                   : model_.config().max_position_embeddings;
}

PreparedRequest Engine::prepare(Request request) const {
  const ModelConfig& c = model_.config();
  // Token ids given to the model (the prompt's, a replay's) must name rows of its embedding.
  const auto require_in_vocabulary = [&c](const std::vector<int>& ids, const std::string& what,
                                          const char* field) {
    for (int id : ids)
      if (id < 0 || id >= c.vocab_size)
        throw RequestError(what + " " + std::to_string(id) + " is outside the vocabulary (size " +
                               std::to_string(c.vocab_size) + ")",
                           field);
  };
  const int sources =
      !request.text.empty() + !request.messages.empty() + !request.prompt_ids.empty();
  if (sources != 1)
    throw Error(sources == 0 ? "the prompt is empty: give text, chat messages or token ids"
                             : "give exactly one prompt: text, chat messages or token ids");
  const bool needs_tokenizer = !request.text.empty() || !request.messages.empty() ||
                               request.decode_text || !request.stop.empty() ||
                               request.compression.info().needs.token_text ||
                               request.steering.enabled();
  if (needs_tokenizer && tokenizer_ == nullptr)
    throw Error(
        "this request needs a tokenizer (text, chat messages, stop strings, text output, skipkv "
        "or steering), and the engine has none");
  for (const auto& s : request.stop)
    if (s.empty()) throw Error("a stop string is empty");

  PreparedRequest p;
  bool opens_think = false;
  if (!request.prompt_ids.empty()) {
    p.prompt = request.prompt_ids;
  } else {
    std::string text = request.text;
    bool add_special = true;
    if (!request.messages.empty()) {
      text = render_chat(chat_template_, request.messages, true, request.chat_template_kwargs,
                         request.tools);
      opens_think = prompt_opens_think(text);
      add_special = chat_template_.add_special_tokens();
    } else if (!request.chat_template_kwargs.is_null()) {
      throw Error("chat template kwargs need chat messages");
    } else if (!request.tools.is_null()) {
      throw Error("tools need chat messages");
    }
    // A bound that needs no tokenization: a text that cannot fit is refused before encoding it
    // (a 16 MiB prompt would take seconds and hundreds of MiB).
    const std::size_t at_least = tokenizer_->min_tokens(text.size());
    if (at_least >= static_cast<std::size_t>(context_size()))
      throw Error("the prompt is " + std::to_string(text.size()) + " bytes, at least " +
                  std::to_string(at_least) + " tokens, which does not fit the context of " +
                  std::to_string(context_size()) +
                  " tokens (raise --ctx-size or shorten the prompt)");
    const auto ids = tokenizer_->encode(text, add_special);
    p.prompt.assign(ids.begin(), ids.end());
    if (p.prompt.empty()) throw Error("the prompt is empty after tokenization");
  }
  require_in_vocabulary(p.prompt, "prompt token id", "prompt");
  if (!request.replay_ids.empty()) {
    if (request.scripted_reply) throw Error("a replay and a scripted reply exclude each other");
    require_in_vocabulary(request.replay_ids, "replay: token id", "replay_ids");
    // A replay runs to its end, and one step past its last token so that its logits are
    // computed too (the context still bounds it below).
    request.max_new_tokens = static_cast<int>(request.replay_ids.size()) + 1;
  }
  if (request.max_new_tokens < 0) throw Error("the number of tokens to generate must be >= 0");
  const int context = context_size();
  const int prompt = static_cast<int>(p.prompt.size());
  if (prompt >= context)
    throw Error("the prompt has " + std::to_string(prompt) +
                " tokens, which does not fit the context of " + std::to_string(context) +
                " tokens (raise --ctx-size or shorten the prompt)");
  if (request.strict_length && prompt + request.max_new_tokens > context)
    throw Error("the context is " + std::to_string(context) + " tokens, but " +
                std::to_string(prompt + request.max_new_tokens) + " were requested (" +
                std::to_string(prompt) + " in the prompt, " +
                std::to_string(request.max_new_tokens) +
                " to generate): lower the number of tokens to generate or shorten the prompt");
  // The settings' own checks, each naming the request field it concerns (the server's `param`).
  const auto checked = [](const char* field, const auto& settings) {
    try {
      settings.validate();
    } catch (const RequestError&) {
      throw;
    } catch (const Error& e) {
      throw RequestError(e.what(), field);
    }
  };
  checked("", request.sampling);
  if (request.thinking_budget < -1)
    throw RequestError("the thinking budget must be >= 0 tokens (or -1: none), got " +
                           std::to_string(request.thinking_budget),
                       "thinking_budget");
  if (request.thinking_budget >= 0 &&
      (tokenizer_ == nullptr || vocab_->compression.think_end_id < 0))
    throw RequestError(
        "a thinking budget closes the thought with </think>, and the tokenizer has no such token",
        "thinking_budget");
  if (request.thinking_budget_message.size() > 4096)
    throw RequestError("the thinking budget message is longer than 4096 bytes",
                       "thinking_budget_message");
  if (request.logprobs < -1 || request.logprobs > 20)
    throw RequestError(
        "top log-probabilities must be between 0 and 20, got " + std::to_string(request.logprobs),
        "top_logprobs");
  for (const auto& [token, bias] : request.sampling.logit_bias)
    if (token >= c.vocab_size)
      throw RequestError("logit bias: token id " + std::to_string(token) +
                             " is outside the vocabulary (size " + std::to_string(c.vocab_size) +
                             ")",
                         "logit_bias");
  checked("kv", request.compression);
  checked("", request.steering);
  const CompressionVocab& vocab = vocab_->compression;
  if (request.compression.trigger == Trigger::newline && vocab.newline_ids.empty())
    throw RequestError(
        "the newline trigger needs the tokenizer's line-break tokens, and none were found", "kv");
  if (request.compression.think_only && vocab.think_end_id < 0)
    throw RequestError("think-only compression needs a </think> token, and the tokenizer has none",
                       "kv");
  if (request.steering.enabled())
    check_steering_vector(*request.steering.vector, c, {}, "steering");

  if (request.seed_tokens < 0 || request.seed_tokens >= prompt)
    throw Error("seed tokens must be between 0 and the prompt's length less one, not " +
                std::to_string(request.seed_tokens));
  const MethodInfo& method = request.compression.info();
  if (method.needs.query_stats && !options_.query_stats)
    throw RequestError("kv method " + std::string(method.name) +
                           " needs the model's query statistics, and none are loaded: compute "
                           "them with `rkv calibrate -m MODEL -f TEXT -o "
                           "MODEL/query_stats.safetensors` (read from there by default) or name "
                           "a file with --query-stats FILE",
                       "kv");
  // The reference keeps only the first `budget` prompt entries then, and drops every generated
  // one at every compression (TRIATTENTION.md 10.3): refused as out of its specification.
  if (method.pins_prompt && prompt - request.seed_tokens >= request.compression.budget)
    throw RequestError("kv method " + std::string(method.name) +
                           " keeps the whole prompt and counts it in its budget: the budget (" +
                           std::to_string(request.compression.budget) +
                           ") must be larger than the prompt (" +
                           std::to_string(prompt - request.seed_tokens) + " tokens)",
                       "kv");

  // The slot: what admission will reserve under the cap. Seed tokens count as generated ones:
  // a compressed cache needs budget + buffer for them.
  p.max_new_tokens = std::min(request.max_new_tokens, context - prompt);
  p.cache_capacity = KvMemory::capacity_for(request.compression, prompt - request.seed_tokens,
                                            p.max_new_tokens + request.seed_tokens);
  const KvDtype engine_dtype = options_.kv_dtype.value_or(model_.default_kv_dtype());
  request.kv_dtype = request.kv_dtype.value_or(engine_dtype);
  if (model_.device() != Device::Cpu) {
    // What the device's backend cannot run is refused here, in the words --device auto uses.
    DeviceNeeds needs;
    if (request.compression.info().compresses)
      needs.compressing_methods = {std::string(method_name(request.compression.method))};
    needs.steering = request.steering.enabled();
    needs.kv_dtype = request.kv_dtype;
    const std::string refusal = device_refusal(model_.device(), needs);
    if (!refusal.empty())
      throw RequestError(refusal + ": run with --device cpu (docs/GPU.md)",
                         needs.kv_dtype == KvDtype::q8_0 ? "kv.dtype" : "kv");
  }
  if (model_.device() != Device::Cpu && *request.kv_dtype != engine_dtype)
    throw Error("on --device cuda every request of a batch uses the engine's KV dtype (" +
                std::string(kv_dtype_name(engine_dtype)) + "), not " +
                std::string(kv_dtype_name(*request.kv_dtype)));
  p.slot_bytes = KvCache::slot_bytes_for(
      KvMemory::shape_for(model_, request.compression, p.cache_capacity, *request.kv_dtype));
  const std::size_t cap = batch_->kv_memory_bytes();
  if (cap > 0 && p.slot_bytes > cap)
    throw Error("the request needs a KV cache of " + std::to_string(p.slot_bytes) + " bytes (" +
                std::to_string(p.cache_capacity) +
                " entries per head), more than the whole KV memory cap of " + std::to_string(cap) +
                " bytes: lower the budget or the tokens to generate, or raise the cap");
  p.eos_ids = vocab_->eos_ids;
  const int think_start = vocab_->think_start_id;
  p.starts_in_reasoning =
      opens_think || (think_start >= 0 && !p.prompt.empty() && p.prompt.back() == think_start);
  p.think_start_id = think_start;
  p.think_end_id = vocab.think_end_id;
  // Text the engine writes instead of sampling, as token ids.
  const auto encoded = [&](const std::string& text, const char* what) {
    if (tokenizer_ == nullptr) throw Error(std::string(what) + " needs a tokenizer");
    const auto ids = tokenizer_->encode(text, false);
    return std::vector<int>(ids.begin(), ids.end());
  };
  if (request.thinking_budget >= 0)
    p.thinking_close =
        encoded(request.thinking_budget_message + thought_close_, "a thinking budget");
  if (!request.answer_prefix.empty())
    p.answer_prefix = encoded(request.answer_prefix, "an answer prefix");
  if (request.scripted_reply) {
    p.scripted_reply = encoded(*request.scripted_reply, "a scripted reply");
    if (p.eos_ids.empty())
      throw Error("a scripted reply ends with an end-of-sequence token, and the model has none");
  }
  p.request = std::move(request);
  return p;
}

std::uint64_t Engine::submit(PreparedRequest request, RequestCallbacks callbacks) {
  auto a = std::make_unique<Active>();
  a->prepared = std::move(request);
  a->callbacks = std::move(callbacks);
  if (a->prepared.request.decode_text || !a->prepared.request.stop.empty()) {
    if (tokenizer_ == nullptr) throw Error("text output needs a tokenizer");
    a->text = std::make_unique<TextStream>(*tokenizer_, a->prepared.request.stop);
  }
  std::unique_lock lock(mutex_);
  a->id = next_id_++;
  const std::uint64_t id = a->id;
  if (stopped_) {
    // Nothing will step again: the submitter hears so at once instead of waiting forever.
    lock.unlock();
    Completion c;
    c.stop_reason = "error";
    c.error = "the engine has stopped (the server is shutting down)";
    c.prompt_tokens = static_cast<int>(a->prepared.prompt.size());
    complete(*a, std::move(c));
    return id;
  }
  inbox_.push_back(std::move(a));
  ++stats_.waiting;
  wake_.notify_all();
  return id;
}

void Engine::cancel(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  cancels_.push_back(id);
  wake_.notify_all();
}

void Engine::complete(Active& a, Completion c) {
  c.id = a.id;
  c.compression = a.prepared.request.compression;
  if (a.prepared.request.kv_dtype) c.kv_dtype = *a.prepared.request.kv_dtype;
  if (a.text) {
    const std::string tail = a.text->finish();
    if (!tail.empty() && a.callbacks.on_token) {
      try {
        a.callbacks.on_token({a.id, -1, tail});
      } catch (...) {
        // The submitter's callback failed on the last text; on_done still tells it the end.
      }
    }
    c.text = a.text->text();
    c.matched_stop = a.text->matched();
  }
  if (c.stop_reason == "eos" || c.stop_reason == "stop")
    c.finish_reason = "stop";
  else
    c.finish_reason = c.stop_reason;
  {
    std::lock_guard lock(mutex_);
    ++stats_.finished;
    if (c.stop_reason == "cancelled") ++stats_.cancelled;
    if (c.stop_reason == "error") ++stats_.failed;
    stats_.prompt_tokens += c.prompt_tokens;
    stats_.compressions += c.compressions;
    if (!a.callbacks.on_done) completions_.push_back(c);
  }
  if (a.callbacks.on_done) {
    try {
      a.callbacks.on_done(c);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[engine] request %llu: its completion callback failed: %s\n",
                   static_cast<unsigned long long>(a.id), e.what());
    } catch (...) {
      std::fprintf(stderr, "[engine] request %llu: its completion callback failed\n",
                   static_cast<unsigned long long>(a.id));
    }
  }
}

void Engine::drain_inbox() {
  std::deque<std::unique_ptr<Active>> inbox;
  std::vector<std::uint64_t> cancels;
  {
    std::lock_guard lock(mutex_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& a : inbox) {
    if (std::find(cancels.begin(), cancels.end(), a->id) != cancels.end()) {
      Completion c;
      c.stop_reason = "cancelled";
      c.prompt_tokens = static_cast<int>(a->prepared.prompt.size());
      complete(*a, std::move(c));
      continue;
    }
    Active* raw = a.get();
    SequenceHooks hooks;
    if (a->prepared.request.logprobs >= 0)
      hooks.on_logprob = [raw](const TokenLogprob& lp) { raw->last_logprob = lp; };
    hooks.on_token = [this, raw](int token) {
      {
        std::lock_guard lock(mutex_);
        ++stats_.generated_tokens;
      }
      std::string text;
      if (raw->text) text = raw->text->push(token);
      // A submitter's callback that throws ends its own request, never the step of the others.
      try {
        if (raw->callbacks.on_token) {
          const TokenLogprob* logprob = raw->last_logprob ? &*raw->last_logprob : nullptr;
          raw->callbacks.on_token({raw->id, token, text, logprob});
          raw->last_logprob.reset();
        }
      } catch (const std::exception& e) {
        raw->callback_error = std::string("the request's token callback failed: ") + e.what();
        return false;
      } catch (...) {
        raw->callback_error = "the request's token callback failed";
        return false;
      }
      return !(raw->text && raw->text->stopped());
    };
    try {
      const std::uint64_t batch_id = batch_->submit(a->prepared, std::move(hooks));
      active_[batch_id] = std::move(a);
    } catch (const std::exception& e) {
      Completion c;
      c.stop_reason = "error";
      c.error = e.what();
      complete(*a, std::move(c));
    }
  }
  for (std::uint64_t id : cancels)
    for (auto& [batch_id, a] : active_)
      if (a->id == id && !a->cancel_requested) {
        a->cancel_requested = true;
        batch_->cancel(batch_id);
      }
}

bool Engine::step() {
  drain_inbox();
  const bool more = batch_->step();
  for (BatchResult& r : batch_->take_results()) {
    auto it = active_.find(r.id);
    if (it == active_.end()) continue;
    std::unique_ptr<Active> a = std::move(it->second);
    active_.erase(it);
    Completion c;
    c.tokens = std::move(r.tokens);
    c.logprobs = std::move(r.logprobs);
    c.reasoning_tokens = r.reasoning_tokens;
    c.stop_reason = r.stop_reason == "stopped" ? "stop" : r.stop_reason;
    c.error = std::move(r.error);
    if (!a->callback_error.empty()) {
      c.stop_reason = "error";
      c.error = a->callback_error;
    }
    c.prompt_tokens = r.prompt_tokens;
    c.kv_bytes = r.kv_bytes;
    c.kv_bytes_used = r.kv_bytes_used;
    c.cache_capacity = r.cache_capacity;
    c.max_cache_entries = r.max_cache_entries;
    c.compressions = r.compressions;
    c.compression_seconds = r.compression_seconds;
    c.queued_seconds = r.queued_seconds;
    c.prefill_seconds = r.prefill_seconds;
    c.decode_seconds = r.decode_seconds;
    complete(*a, std::move(c));
  }
  std::lock_guard lock(mutex_);
  stats_.running = batch_->running();
  stats_.waiting = batch_->waiting() + static_cast<int>(inbox_.size());
  stats_.kv_bytes_in_use = batch_->kv_bytes_in_use();
  stats_.peak_kv_bytes = batch_->peak_kv_bytes();
  stats_.peak_running = batch_->peak_running();
  stats_.steps = batch_->steps();
  stats_.step_seconds = batch_->step_seconds();
  return more || !inbox_.empty() || !cancels_.empty();
}

void Engine::fail_running(const std::string& message) {
  std::fprintf(stderr, "[engine] a step failed: %s; its %zu running requests end with the error\n",
               message.c_str(), active_.size());
  std::map<std::uint64_t, std::unique_ptr<Active>> failed;
  failed.swap(active_);
  for (auto& [batch_id, a] : failed) {
    try {
      batch_->cancel(batch_id);  // its slot is freed at the next step; its result is dropped
      Completion c;
      c.stop_reason = "error";
      c.error = "the engine failed while running this request: " + message;
      c.prompt_tokens = static_cast<int>(a->prepared.prompt.size());
      complete(*a, std::move(c));
    } catch (...) {
      // A callback that fails again: this request's submitter is gone with it.
    }
  }
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

std::vector<Completion> Engine::take_completions() {
  std::lock_guard lock(mutex_);
  std::vector<Completion> out;
  out.swap(completions_);
  return out;
}

void Engine::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
    stopped_ = false;
  }
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] {
          return stopping_ || !inbox_.empty() || !cancels_.empty() || stats_.running > 0 ||
                 stats_.waiting > 0;
        });
        if (stopping_) return;
      }
      // Nothing may end this thread but stop(): a step that throws (out of memory, a callback
      // that failed) ends the requests it carried with the error, and the engine goes on.
      try {
        step();
      } catch (const std::exception& e) {
        fail_running(e.what());
      } catch (...) {
        fail_running("unknown error in an engine step");
      }
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  // Whatever is left is cancelled, so every submitter hears of its request.
  bool left = !active_.empty();
  {
    std::lock_guard lock(mutex_);
    for (const auto& a : inbox_) cancels_.push_back(a->id);
    for (const auto& [batch_id, a] : active_) cancels_.push_back(a->id);
    left = left || !inbox_.empty();
  }
  if (left) step();
  std::lock_guard lock(mutex_);
  stopped_ = true;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace rkv
