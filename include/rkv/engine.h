// The engine as a library (DESIGN.md property 7): load a model once, submit requests (text, chat
// messages or token ids; sampling; stop strings; a KV compression method and its settings),
// receive their tokens and text as they are generated and a final result, cancel them. The CLI's
// `generate` and `eval` and the HTTP server (`rkv serve`) are front ends of this one API.
//
//   rkv::Engine engine(model, &tokenizer, pool, {.kv_memory_bytes = 1 << 30});
//   rkv::Request r;
//   r.messages = {{"user", "What is 17*24?"}};
//   r.max_new_tokens = 4096;
//   r.compression = rkv::CompressionParams::defaults("rkv");
//   engine.submit(engine.prepare(r), {.on_token = [](const rkv::TokenEvent& e) {
//     std::fwrite(e.text.data(), 1, e.text.size(), stdout); }, .on_done = {}});
//   engine.run_until_idle();                       // or engine.start(): a thread of its own
//   rkv::Completion c = engine.take_completions().at(0);
//
// Threads: prepare(), submit(), cancel() and stats() may be called from any thread. step() and
// run_until_idle() run the batch on the calling thread; start() gives the engine a thread of its
// own (one engine thread owns the batch), and then nothing else may step. Callbacks run on the
// thread that steps, between forward passes: keep them short.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rkv/chat_template.h"
#include "rkv/compression.h"
#include "rkv/kv_dtype.h"
#include "rkv/sampling.h"
#include "rkv/steering.h"

namespace rkv {

class Model;
class Tokenizer;
class ThreadPool;
class BatchEngine;
struct CompressionEvent;
struct QueryStats;

struct EngineOptions {
  std::size_t kv_memory_bytes = 0;  // cap on all running sequences' KV slots (0: none)
  int max_batch = 0;                // most sequences running at once (0: as the cap allows)
  int prefill_chunk = 256;          // prompt tokens per step, over all prefilling sequences
  int context_size = 0;             // 0: the model's max_position_embeddings
  // The template `messages` are rendered with (include/rkv/chat_template.h): "" or "auto", the
  // model's own Jinja template, or chat_template_text when given; or a built-in's name ("raw",
  // "chatml", ...).
  std::string chat_template;
  // A Jinja chat template instead of the model's (--chat-template-file), and where it came from
  // (a file name) for its error messages. A syntax error makes the constructor throw.
  std::optional<std::string> chat_template_text;
  std::string chat_template_origin;
  // The KV cache dtype of requests that name none (none here: bf16 for a bf16 or f16
  // checkpoint, f32 for an f32 one).
  std::optional<KvDtype> kv_dtype;
  // The model's TriAttention statistics (load_query_stats in src/engine/query_stats.h; `rkv
  // calibrate` writes them). Null: none, and a request for a method that needs them is refused.
  std::shared_ptr<const QueryStats> query_stats;
};

struct Request {
  // The prompt: exactly one of text (encoded with the tokenizer, BOS as the tokenizer adds it),
  // chat messages (rendered with the engine's chat template, ending with the opening of the
  // assistant's turn) or token ids.
  std::string text;
  std::vector<ChatMessage> messages;
  std::vector<int> prompt_ids;
  // With messages: more variables for a Jinja chat template (null or a JSON object), bound last
  // as apply_chat_template's **kwargs, e.g. {"enable_thinking": false}.
  nlohmann::ordered_json chat_template_kwargs;
  // With messages: the tools offered (null or a JSON array of OpenAI function schemas), bound as
  // the Jinja template's `tools`.
  nlohmann::ordered_json tools;
  // Text the engine writes, instead of sampling, where the answer begins: right after the prompt,
  // or, when a thought is open (the prompt opened <think>, or the output did), right after its
  // </think>. The server puts a tool call's opening here when tool_choice makes a call compulsory.
  std::string answer_prefix;
  // A test seam, never set from a request: where the engine would sample, it writes this text's
  // tokens in order instead, then an end-of-sequence token (`rkv serve --scripted-replies`, for
  // client tests on checkpoints that cannot write tool calls). Tokens the engine forces (a thinking
  // budget's close, answer_prefix) are written as usual and take nothing from the script.
  std::optional<std::string> scripted_reply;
  // A replay (`rkv generate --replay-ids`, `rkv eval --replay`: G-KV post-training's masks for a
  // sequence sampled elsewhere): where the engine would sample, it writes these token ids in
  // order instead, all of them whatever max_new_tokens says (prepare() sets it to their count
  // plus one, the step that computes the last one's logits; the context still bounds it); an
  // end-of-sequence id among them ends the sequence there ("eos"), and the sequence ends
  // ("length") once all are written. Compression, traces and logits go on as in any generation.
  // Excludes scripted_reply.
  std::vector<int> replay_ids;
  // Called on the engine's thread with the model's logits ([vocab size], before any sampling
  // adjustment) wherever the engine picks a next token: after the prompt's last position, then
  // after each decode step; `position` is the position whose logits they are.
  std::function<void(int position, std::span<const float> logits)> on_logits;

  int max_new_tokens = 256;
  // false: generation stops when the context is full (the CLI); true: a prompt plus
  // max_new_tokens beyond the context is an error (the server, as OpenAI's API does).
  bool strict_length = false;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings: the text ends before the first one found
  bool ignore_eos = false;
  bool decode_text = true;  // stream text (needs a tokenizer); false: token ids only
  // -1: none; 0-20: each generated token's log-probability (Completion::logprobs) and that many
  // most likely alternatives.
  int logprobs = -1;
  // -1: none. N >= 0: once the chain of thought (after the prompt opened <think>, or after a
  // generated <think>) has N tokens, the engine writes thinking_budget_message then the chat
  // template's close of a thought (thought_close: "\n</think>\n\n" for Qwen3 and DeepSeek-R1)
  // instead of sampling, and the answer follows. max_new_tokens still bounds everything
  // generated. Needs a </think> token.
  int thinking_budget = -1;
  std::string thinking_budget_message;
  CompressionParams compression = CompressionParams::none();
  SteeringParams steering;  // SkipKV adaptive steering (default: none)
  // The KV cache's dtype (default: the engine's). prepare() fills it in.
  std::optional<KvDtype> kv_dtype;
  // The last seed_tokens of the prompt stand for tokens already generated (rkv bench
  // --steady-state starts sequences at staggered depths this way). They are prefilled like the
  // prompt, but a compressing method takes them in chunks of at most its buffer, compressing
  // after each (as after a prompt, ALGORITHMS.md 1), so the cache needs only budget + buffer
  // entries, as it would after generating them. 0: none; at most the prompt's length less one.
  int seed_tokens = 0;
  std::function<void(const CompressionEvent&)> on_compression;  // traces, case dumps
};

// A request that passed validation, with its prompt as token ids and its KV slot sized: what
// submit() takes, and the only request type past prepare() (the batch engine's sequences hold
// it as it is).
struct PreparedRequest {
  Request request;
  std::vector<int> prompt;           // the token ids the model will see
  std::vector<int> eos_ids;          // the model's and the tokenizer's end-of-sequence ids
  int max_new_tokens = 0;            // clipped to the context
  bool starts_in_reasoning = false;  // the prompt leaves a <think> block open (DeepSeek-R1, QwQ)
  // Request::thinking_budget: the tokens that close a thought (message, then "\n</think>\n\n"),
  // and the ids of <think> and </think> (-1 when the tokenizer has none).
  std::vector<int> thinking_close;
  int think_start_id = -1, think_end_id = -1;
  std::vector<int> answer_prefix;   // Request::answer_prefix, encoded
  std::vector<int> scripted_reply;  // Request::scripted_reply, encoded
  std::size_t slot_bytes = 0;       // its KV slot (cache at capacity)
  int cache_capacity = 0;           // entries per (layer, KV head)
};

struct TokenEvent {
  std::uint64_t id = 0;
  int token = -1;         // -1: text released when generation ended, with no new token
  std::string_view text;  // the text this token completes (held back near stop strings)
  const TokenLogprob* logprob = nullptr;  // Request::logprobs >= 0: this token's
};

struct Completion {
  std::uint64_t id = 0;
  std::vector<int> tokens;  // generated ids (eos excluded)
  // With Request::logprobs >= 0: one per generated token (tokens[i]'s is logprobs[i]).
  std::vector<TokenLogprob> logprobs;
  std::string text;           // generated text, cut before a stop string (empty without text)
  std::string finish_reason;  // OpenAI's: "stop" (eos or a stop string), "length", "cancelled",
                              // "error"
  std::string stop_reason;    // finer: "eos", "stop", "length", "cancelled", "error"
  std::string matched_stop;   // the stop string that ended it
  std::string error;          // for "error"
  int prompt_tokens = 0;
  int reasoning_tokens = 0;  // generated tokens up to and including </think>
  CompressionParams compression;
  KvDtype kv_dtype = KvDtype::f32;  // what the cache stored keys and values in
  std::size_t kv_bytes = 0;         // the slot
  std::size_t kv_bytes_used = 0;    // entries held at the end
  int cache_capacity = 0;
  int max_cache_entries = 0;
  std::int64_t compressions = 0;
  double compression_seconds = 0.0;
  double queued_seconds = 0.0, prefill_seconds = 0.0, decode_seconds = 0.0;
};

// Both run on the engine thread. A callback that throws ends only its own request: on_token's
// exception stops it with stop reason "error" and the message; on_done's is logged.
struct RequestCallbacks {
  std::function<void(const TokenEvent&)> on_token;
  // Called once, last. Without it the completion is kept for take_completions().
  std::function<void(const Completion&)> on_done;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;  // submitted and not yet running (including those not yet seen by a step)
  std::size_t kv_bytes_in_use = 0;
  std::size_t kv_bytes_cap = 0;
  std::size_t peak_kv_bytes = 0;
  int peak_running = 0;
  std::int64_t prompt_tokens = 0;     // of finished requests
  std::int64_t generated_tokens = 0;  // every generated token so far
  std::int64_t compressions = 0;      // of finished requests
  std::int64_t steps = 0;             // forward passes
  double step_seconds = 0.0;          // their total wall time
  std::int64_t finished = 0, cancelled = 0, failed = 0;
};

class Engine {
 public:
  // The model, tokenizer (may be null: token ids only) and pool must outlive the engine.
  Engine(const Model& model, const Tokenizer* tokenizer, ThreadPool& pool,
         EngineOptions options = {});
  ~Engine();  // stops the engine thread; unfinished requests are cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const { return model_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  const EngineOptions& options() const { return options_; }
  int context_size() const;

  // The one place a request is validated: prompt source, tokens in the vocabulary, lengths
  // against the context, sampling, compression settings and the token ids their triggers need,
  // steering, a slot that can fit under the cap. Throws rkv::Error with a message for the user.
  PreparedRequest prepare(Request request) const;

  // Queues a prepared request; returns its id. Thread-safe.
  std::uint64_t submit(PreparedRequest request, RequestCallbacks callbacks = {});
  // Cancels a request (waiting or running): it finishes with "cancelled" at the next step and
  // its slot is free for the step after. Thread-safe; unknown or finished ids are ignored.
  void cancel(std::uint64_t id);

  // One step on the calling thread; false when nothing is running or waiting.
  bool step();
  void run_until_idle();
  // Completions of requests submitted without on_done, in finishing order (moved out).
  std::vector<Completion> take_completions();

  // A thread of the engine's own steps whenever there is work (and sleeps otherwise).
  void start();
  // Stops the thread and cancels every unfinished request (each hears of it through its
  // callbacks). Requests submitted afterwards complete at once with an error, until start().
  void stop();

  EngineStats stats() const;

 private:
  struct Active;
  void drain_inbox();
  void complete(Active& a, Completion c);
  // After a step threw: every running request ends with the error; the engine goes on.
  void fail_running(const std::string& message);

  const Model& model_;
  const Tokenizer* tokenizer_;
  ThreadPool& pool_;
  EngineOptions options_;
  ChatTemplate chat_template_;
  std::string thought_close_;  // thought_close(chat_template_)
  struct Vocab;
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<BatchEngine> batch_;
  std::map<std::uint64_t, std::unique_ptr<Active>> active_;  // by batch id (engine thread)

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Active>> inbox_;
  std::vector<std::uint64_t> cancels_;
  std::vector<Completion> completions_;
  std::uint64_t next_id_ = 1;
  EngineStats stats_;
  bool stopping_ = false;
  bool stopped_ = false;  // stop() has run: submissions complete at once with an error
  std::thread thread_;
};

}  // namespace rkv
