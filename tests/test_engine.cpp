// The public Engine (include/rkv/engine.h) on the shipped tiny model: a request through it gives
// the batch engine's tokens; stop strings cut the text; invalid requests are refused by
// prepare() alone; cancellation frees a slot at once, from another thread too; and the engine's
// own thread serves many submitters with results identical to serving each alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "batch_test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/batch_engine.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/error.h"
#include "rkv/tokenizer.h"
#include "shipped_model_test.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

class EngineTest : public test::ShippedModelTest {
 protected:
  static Request greedy(const std::string& text, const std::string& method, int budget) {
    Request r;
    r.text = text;
    r.max_new_tokens = 600;
    r.sampling.temperature = 0.0f;
    r.compression = CompressionParams::defaults(parse_method(method));
    if (method != "fullkv") {
      r.compression.budget = budget;
      r.compression.buffer = 16;
    }
    return r;
  }
};

TEST_F(EngineTest, MatchesTheBatchEngineAndDecodesTheText) {
  const std::string q = test::held_out_problems(1).at(0);
  Engine engine(*model_, tokenizer_.get(), pool_);
  std::string streamed;
  engine.submit(engine.prepare(greedy(q, "rkv", 160)),
                {.on_token = [&](const TokenEvent& e) { streamed.append(e.text); }, .on_done = {}});
  engine.run_until_idle();
  const auto done = engine.take_completions();
  ASSERT_EQ(done.size(), 1u);
  const Completion& c = done[0];

  // The same request straight into the batch engine (the reference the engine wraps).
  BatchEngine batch(*model_, pool_, {});
  Request b;
  const auto ids = tokenizer_->encode(q, true);
  b.prompt_ids.assign(ids.begin(), ids.end());
  b.decode_text = false;
  b.max_new_tokens = 600;
  b.sampling.temperature = 0.0f;
  b.compression = greedy(q, "rkv", 160).compression;
  batch.submit(test::prepared_request(*model_, b));
  batch.run();
  const BatchResult ref = batch.take_results().at(0);

  EXPECT_EQ(c.tokens, ref.tokens);
  EXPECT_EQ(c.stop_reason, ref.stop_reason);
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_GT(c.compressions, 0);
  EXPECT_EQ(c.kv_bytes, ref.kv_bytes);
  EXPECT_EQ(streamed, c.text);
  EXPECT_EQ(c.text, tokenizer_->decode(std::vector<int32_t>(c.tokens.begin(), c.tokens.end())));
  EXPECT_NE(c.text.find("Final answer: \\boxed{"), std::string::npos) << c.text;
}

TEST_F(EngineTest, StopStringsCutTheTextAndEndTheRequest) {
  const std::string q = test::held_out_problems(1).at(0);
  Engine engine(*model_, tokenizer_.get(), pool_);
  Request full = greedy(q, "fullkv", 0);
  engine.submit(engine.prepare(full));
  engine.run_until_idle();
  const Completion whole = engine.take_completions().at(0);
  const std::size_t cut = whole.text.find("verify");
  ASSERT_NE(cut, std::string::npos) << whole.text;

  Request stopped = full;
  stopped.stop = {"verify"};
  std::string streamed;
  engine.submit(engine.prepare(stopped),
                {.on_token = [&](const TokenEvent& e) { streamed.append(e.text); }, .on_done = {}});
  engine.run_until_idle();
  const Completion c = engine.take_completions().at(0);
  EXPECT_EQ(c.text, whole.text.substr(0, cut));
  EXPECT_EQ(streamed, c.text);
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(c.stop_reason, "stop");
  EXPECT_EQ(c.matched_stop, "verify");
  EXPECT_LT(c.tokens.size(), whole.tokens.size());
}

// Request::logprobs: each generated token's log-probability and the most likely alternatives,
// against the log-softmax (in double) of the logits one forward pass over the prompt and the
// output gives for every position: an independent computation of the same distributions.
TEST_F(EngineTest, LogprobsAreTheLogSoftmaxOfTheModelsLogits) {
  Engine engine(*model_, tokenizer_.get(), pool_);
  Request r;
  r.prompt_ids = {5, 6, 7, 8};
  r.max_new_tokens = 12;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 5;
  r.sampling.frequency_penalty = 1.0f;  // adjusts the sampling, not the reported probabilities
  r.ignore_eos = true;
  r.logprobs = 3;
  engine.submit(engine.prepare(r));
  engine.run_until_idle();
  const Completion c = engine.take_completions().at(0);
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  ASSERT_EQ(c.tokens.size(), 12u);
  std::vector<int> ids = r.prompt_ids;
  ids.insert(ids.end(), c.tokens.begin(), c.tokens.end() - 1);
  const int V = model_->config().vocab_size, n = static_cast<int>(c.tokens.size());
  KvCache cache(model_->cache_shape(static_cast<int>(ids.size()), 0, KvDtype::f32));
  std::vector<ForwardRow> rows;
  for (std::size_t i = 0; i < ids.size(); ++i)
    rows.push_back({&cache, ids[i], static_cast<int>(i), i + n >= ids.size()});
  ForwardScratch scratch;
  std::vector<float> logits(static_cast<std::size_t>(n) * V);
  model_->forward(rows, scratch, pool_, logits.data());
  for (int t = 0; t < n; ++t) {
    const float* l = logits.data() + static_cast<std::size_t>(t) * V;
    double m = l[0], sum = 0.0;
    for (int i = 0; i < V; ++i) m = std::max(m, static_cast<double>(l[i]));
    for (int i = 0; i < V; ++i) sum += std::exp(l[i] - m);
    const auto lp = [&](int id) { return l[id] - m - std::log(sum); };
    const TokenLogprob& got = c.logprobs[static_cast<std::size_t>(t)];
    EXPECT_EQ(got.token, c.tokens[static_cast<std::size_t>(t)]);
    EXPECT_NEAR(got.logprob, lp(got.token), 1e-3) << "token " << t;
    ASSERT_EQ(got.top.size(), 3u);
    std::vector<int> order(static_cast<std::size_t>(V));
    for (int i = 0; i < V; ++i) order[static_cast<std::size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](int a, int b) { return l[a] > l[b]; });
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(got.top[static_cast<std::size_t>(k)].first, order[static_cast<std::size_t>(k)]);
      EXPECT_NEAR(got.top[static_cast<std::size_t>(k)].second,
                  lp(order[static_cast<std::size_t>(k)]), 1e-3);
    }
  }
  r.logprobs = 21;
  EXPECT_THROW(engine.prepare(r), Error);
}

// Request::thinking_budget on a checkpoint with DeepSeek-R1's template (the prompt opens
// <think>; random weights, which rarely write </think> themselves): after N tokens of thought
// the engine writes the message and "\n</think>\n\n", then samples the answer. What is real: the
// template, the tokenizer and the engine; what is random: the weights, so the test checks where
// the closing tokens land, not what the model says.
TEST(ThinkingBudget, ClosesTheThoughtAfterNTokensAndTheAnswerFollows) {
  const test::R1Checkpoint r1("thinking-budget");
  const Tokenizer& tokenizer = r1.tokenizer;
  ThreadPool pool(2);
  Engine engine(*r1.model, &tokenizer, pool);
  const int think_end = tokenizer.token_id("</think>");
  ASSERT_GE(think_end, 0);
  for (const std::string& message : {std::string(), std::string(" Time to answer.")}) {
    SCOPED_TRACE(message);
    Request r;
    r.messages = {{"user", "What is 2+2?"}};
    r.max_new_tokens = 24;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    r.thinking_budget = 5;
    r.thinking_budget_message = message;
    const PreparedRequest p = engine.prepare(r);
    ASSERT_TRUE(p.starts_in_reasoning);
    const auto close_ids = tokenizer.encode(message + "\n</think>\n\n", false);
    const std::vector<int> close(close_ids.begin(), close_ids.end());
    ASSERT_NE(std::find(close.begin(), close.end(), think_end), close.end());
    engine.submit(p);
    engine.run_until_idle();
    const Completion c = engine.take_completions().at(0);
    ASSERT_EQ(c.tokens.size(), 24u);
    // Five sampled thought tokens (none of them </think>), then the closing tokens.
    for (int i = 0; i < 5; ++i) EXPECT_NE(c.tokens[static_cast<std::size_t>(i)], think_end);
    EXPECT_EQ(std::vector<int>(c.tokens.begin() + 5, c.tokens.begin() + 5 + close.size()), close);
    // The thought ends at </think>: five tokens and the close up to it count as reasoning.
    const auto end_at = std::find(close.begin(), close.end(), think_end) - close.begin();
    EXPECT_EQ(c.reasoning_tokens, 5 + static_cast<int>(end_at) + 1);
    // The text: the thought, the message, </think>, and an answer after it.
    const std::size_t closed = c.text.find(message + "\n</think>\n\n");
    ASSERT_NE(closed, std::string::npos) << c.text;
    EXPECT_GT(c.text.size(), closed + message.size() + 11) << "no answer followed";
  }
  // Budget 0: the thought is closed at once.
  Request r;
  r.messages = {{"user", "Hi"}};
  r.max_new_tokens = 6;
  r.sampling.temperature = 0.0f;
  r.thinking_budget = 0;
  r.ignore_eos = true;
  engine.submit(engine.prepare(r));
  engine.run_until_idle();
  const Completion c = engine.take_completions().at(0);
  EXPECT_EQ(c.text.rfind("\n</think>\n\n", 0), 0u) << c.text;
  // A tokenizer without </think> cannot close a thought: refused, naming the field.
  auto shipped = Model::load(test::shipped_model_dir());
  const Tokenizer plain = Tokenizer::load(test::shipped_model_dir());
  Engine other(*shipped, &plain, pool);
  r.messages = {{"user", "1:a"}};
  ASSERT_LT(plain.token_id("</think>"), 0);
  try {
    other.prepare(r);
    FAIL() << "accepted without a </think> token";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field(), "thinking_budget");
  }
}

// Request::scripted_reply (the server's --scripted-replies test seam) and Request::answer_prefix
// (tool_choice's forced call opening) on the DeepSeek-R1 template, whose prompt opens <think>:
// the script's tokens are written where the engine would sample, then an end-of-sequence token;
// the prefix is written right after the thought's </think>, and takes nothing from the script.
TEST(ScriptedReply, WritesTheScriptThenEndsAndTheAnswerPrefixFollowsTheThought) {
  const test::R1Checkpoint r1("scripted-reply");
  ThreadPool pool(2);
  Engine engine(*r1.model, &r1.tokenizer, pool);
  Request r;
  r.messages = {{"user", "What is 2+2?"}};
  r.max_new_tokens = 200;
  r.scripted_reply = "Two and two.\n</think>\n\nfour";
  engine.submit(engine.prepare(r));
  engine.run_until_idle();
  Completion c = engine.take_completions().at(0);
  EXPECT_EQ(c.text, *r.scripted_reply);
  EXPECT_EQ(c.stop_reason, "eos");
  r.answer_prefix = "The answer:";
  engine.submit(engine.prepare(r));
  engine.run_until_idle();
  c = engine.take_completions().at(0);
  EXPECT_EQ(c.text, "Two and two.\n</think>The answer:\n\nfour");
  // A prompt that opens no thought: the prefix comes first.
  Request plain;
  plain.text = "2+2=";
  plain.max_new_tokens = 50;
  plain.scripted_reply = "4";
  plain.answer_prefix = "A:";
  engine.submit(engine.prepare(plain));
  engine.run_until_idle();
  EXPECT_EQ(engine.take_completions().at(0).text, "A:4");
}

// A replay writes the given ids instead of sampling, compressing as a generation would: replaying
// a compressed greedy run's own output gives back its tokens, its compressions and, position by
// position, its logits bit for bit (on_logits: the prompt's last position, then every step).
TEST_F(EngineTest, AReplayOfAGreedyRunGivesItsLogitsAndCompressions) {
  const std::string q = test::held_out_problems(1).at(0);
  Engine engine(*model_, tokenizer_.get(), pool_);
  struct Seen {
    std::vector<int> positions;
    std::vector<std::vector<float>> logits;
    std::vector<std::pair<std::int64_t, std::int64_t>> compressions;  // (step, first_reader)
  };
  const auto run = [&](Request r, Seen& seen) {
    r.on_logits = [&seen](int position, std::span<const float> logits) {
      seen.positions.push_back(position);
      seen.logits.emplace_back(logits.begin(), logits.end());
    };
    r.on_compression = [&seen](const CompressionEvent& e) {
      if (e.layer == 0) seen.compressions.emplace_back(e.step, e.first_reader);
    };
    engine.submit(engine.prepare(std::move(r)));
    engine.run_until_idle();
    return engine.take_completions().at(0);
  };
  Seen greedy_seen, replay_seen;
  const Completion g = run(greedy(q, "gkv", 96), greedy_seen);
  ASSERT_EQ(g.stop_reason, "eos");
  ASSERT_GT(greedy_seen.compressions.size(), 10u);
  Request replay = greedy(q, "gkv", 96);
  replay.sampling.temperature = 1.0f;  // never consulted
  replay.replay_ids = g.tokens;
  replay.replay_ids.push_back(model_->config().eos_token_ids.front());
  const Completion r = run(replay, replay_seen);
  EXPECT_EQ(r.tokens, g.tokens);
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_EQ(replay_seen.compressions, greedy_seen.compressions);
  ASSERT_EQ(replay_seen.positions, greedy_seen.positions);
  ASSERT_EQ(greedy_seen.positions.size(), g.tokens.size() + 1);  // every token, then the eos
  EXPECT_EQ(greedy_seen.positions.front(), g.prompt_tokens - 1);
  for (std::size_t i = 0; i < greedy_seen.logits.size(); ++i)
    ASSERT_EQ(replay_seen.logits[i], greedy_seen.logits[i])
        << "position " << greedy_seen.positions[i];
  // Decode-step compressions are read first by the compressing step's own token; the prompt's
  // (when it outgrows the budget) by the first token after it.
  for (const auto& [step, first] : greedy_seen.compressions)
    EXPECT_EQ(first, step > g.prompt_tokens ? step - 1 : step);
  // A replay's ids must be in the vocabulary; one ending early stops at its end ("length"), one
  // step past its last token.
  Request bad = greedy(q, "fullkv", 0);
  bad.replay_ids = {1, model_->config().vocab_size};
  try {
    engine.prepare(bad);
    ADD_FAILURE() << "a replay id outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  Request partial = greedy(q, "fullkv", 0);
  partial.replay_ids = {g.tokens.begin(), g.tokens.begin() + 5};
  partial.max_new_tokens = 2;  // a replay runs to its end whatever this says
  Seen partial_seen;
  const Completion p = run(partial, partial_seen);
  EXPECT_EQ(p.tokens, partial.replay_ids);
  EXPECT_EQ(p.stop_reason, "length");
  EXPECT_EQ(partial_seen.positions.size(), 6u);
}

TEST_F(EngineTest, PrepareRefusesInvalidRequests) {
  EngineOptions o;
  o.kv_memory_bytes = 100000;
  Engine engine(*model_, tokenizer_.get(), pool_, o);
  auto expect_error = [&](Request r, const std::string& words) {
    try {
      engine.prepare(std::move(r));
      ADD_FAILURE() << "accepted; expected an error with: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Request none;
  expect_error(none, "the prompt is empty");
  Request two = greedy("1:a", "fullkv", 0);
  two.prompt_ids = {1, 2};
  expect_error(two, "exactly one prompt");
  Request outside;
  outside.prompt_ids = {1, 999999};
  expect_error(outside, "outside the vocabulary");
  Request too_long;
  too_long.prompt_ids.assign(static_cast<std::size_t>(engine.context_size()), 5);
  expect_error(too_long, "does not fit the context");
  Request strict = greedy("1:a", "rkv", 64);
  strict.strict_length = true;
  strict.max_new_tokens = engine.context_size();
  expect_error(strict, "were requested");
  Request small_budget = greedy("1:a", "rkv", 4);
  expect_error(small_budget, "larger than the window");
  Request big_slot = greedy("1:a", "fullkv", 0);
  big_slot.max_new_tokens = 2000;
  expect_error(big_slot, "more than the whole KV memory cap");
  Request bad_sampling = greedy("1:a", "fullkv", 0);
  bad_sampling.sampling.top_p = 0.0f;
  expect_error(bad_sampling, "top");
  // Without a tokenizer only token ids in and out work.
  Engine ids_only(*model_, nullptr, pool_);
  expect_error(greedy("1:a", "fullkv", 0), "");
  Request ids;
  ids.prompt_ids = {1, 2, 3};
  ids.decode_text = false;
  EXPECT_NO_THROW(ids_only.prepare(ids));
  ids.decode_text = true;
  EXPECT_THROW(ids_only.prepare(ids), Error);
}

TEST_F(EngineTest, CancellingFreesTheSlotAtOnce) {
  const auto qs = test::held_out_problems(2);
  Request r = greedy(qs[0], "rkv", 96);
  r.ignore_eos = true;
  EngineOptions o;
  Engine probe(*model_, tokenizer_.get(), pool_);
  // A cap with room for exactly one such slot: the second request waits for the first.
  o.kv_memory_bytes = probe.prepare(r).slot_bytes + 1000;
  Engine engine(*model_, tokenizer_.get(), pool_, o);
  int first_tokens = 0;
  const std::uint64_t first = engine.submit(
      engine.prepare(r), {.on_token = [&](const TokenEvent&) { ++first_tokens; }, .on_done = {}});
  const std::uint64_t second = engine.submit(engine.prepare(greedy(qs[1], "rkv", 96)));
  for (int i = 0; i < 20; ++i) engine.step();
  EXPECT_EQ(engine.stats().running, 1);
  EXPECT_EQ(engine.stats().waiting, 1);
  engine.cancel(first);
  engine.step();  // the cancel lands and the waiting request is admitted in the same step
  auto done = engine.take_completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, first);
  EXPECT_EQ(done[0].finish_reason, "cancelled");
  EXPECT_EQ(static_cast<int>(done[0].tokens.size()), first_tokens);
  engine.step();
  EXPECT_EQ(engine.stats().running, 1);
  EXPECT_EQ(engine.stats().waiting, 0);
  engine.run_until_idle();
  done = engine.take_completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, second);
  EXPECT_EQ(done[0].finish_reason, "stop");
  EXPECT_EQ(engine.stats().kv_bytes_in_use, 0u);
  EXPECT_LE(engine.stats().peak_kv_bytes, o.kv_memory_bytes);
  EXPECT_EQ(engine.stats().cancelled, 1);
}

TEST_F(EngineTest, ItsOwnThreadServesManySubmittersLikeEachAlone) {
  const auto qs = test::held_out_problems(6);
  const std::vector<std::pair<std::string, int>> methods = {
      {"fullkv", 0}, {"rkv", 64}, {"snapkv", 96}, {"gkv", 96}, {"h2o", 64}, {"streamingllm", 48}};
  // Each request alone first.
  std::vector<Completion> alone;
  {
    Engine engine(*model_, tokenizer_.get(), pool_);
    for (std::size_t i = 0; i < qs.size(); ++i) {
      engine.submit(engine.prepare(greedy(qs[i], methods[i].first, methods[i].second)));
      engine.run_until_idle();
      alone.push_back(engine.take_completions().at(0));
    }
  }
  EngineOptions o;
  o.kv_memory_bytes = 3 * alone[0].kv_bytes;  // some wait for a slot
  Engine engine(*model_, tokenizer_.get(), pool_, o);
  engine.start();
  std::vector<Completion> together(qs.size());
  std::vector<std::thread> clients;
  std::uint64_t cancelled_id = 0;
  std::mutex m;
  std::condition_variable cv;
  int finished = 0;
  for (std::size_t i = 0; i < qs.size(); ++i) {
    clients.emplace_back([&, i] {
      const auto p = engine.prepare(greedy(qs[i], methods[i].first, methods[i].second));
      engine.submit(p, {.on_token = {}, .on_done = [&, i](const Completion& c) {
                          std::lock_guard lock(m);
                          together[i] = c;
                          ++finished;
                          cv.notify_all();
                        }});
    });
  }
  // One more that a client abandons at once.
  {
    Request r = greedy(qs[0], "rkv", 64);
    r.ignore_eos = true;
    r.max_new_tokens = 1500;
    cancelled_id = engine.submit(engine.prepare(r), {.on_token = {}, .on_done = [&](auto&) {
                                                       std::lock_guard lock(m);
                                                       ++finished;
                                                       cv.notify_all();
                                                     }});
    engine.cancel(cancelled_id);
  }
  for (auto& t : clients) t.join();
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120),
                            [&] { return finished == static_cast<int>(qs.size()) + 1; }));
  }
  engine.stop();
  for (std::size_t i = 0; i < qs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << methods[i].first;
    EXPECT_EQ(together[i].text, alone[i].text) << methods[i].first;
  }
  const EngineStats s = engine.stats();
  EXPECT_LE(s.peak_kv_bytes, o.kv_memory_bytes);
  EXPECT_EQ(s.kv_bytes_in_use, 0u);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.finished, static_cast<std::int64_t>(qs.size()) + 1);
}

// A submitter's callback that throws ends only its own request: the engine thread survives and
// the request beside it finishes exactly as alone.
TEST_F(EngineTest, ACallbackThatThrowsEndsOnlyItsOwnRequest) {
  const auto qs = test::held_out_problems(2);
  auto request = [&](const std::string& text) {
    Request q;
    q.text = text;
    q.max_new_tokens = 64;
    q.sampling.temperature = 0;
    return q;
  };
  std::string alone;
  {
    Engine solo(*model_, tokenizer_.get(), pool_);
    solo.submit(solo.prepare(request(qs[1])));
    solo.run_until_idle();
    alone = solo.take_completions().at(0).text;
  }
  Engine engine(*model_, tokenizer_.get(), pool_);
  engine.start();
  std::mutex m;
  std::condition_variable cv;
  std::vector<Completion> done(2);
  int finished = 0;
  for (int i = 0; i < 2; ++i) {
    RequestCallbacks cb;
    if (i == 0)
      cb.on_token = [](const TokenEvent& e) {
        if (e.token >= 0) throw std::runtime_error("the client's buffer is full");
      };
    cb.on_done = [&, i](const Completion& c) {
      std::lock_guard lock(m);
      done[static_cast<std::size_t>(i)] = c;
      ++finished;
      cv.notify_all();
      if (i == 0) throw std::runtime_error("and so is on_done");
    };
    engine.submit(engine.prepare(request(qs[static_cast<std::size_t>(i)])), cb);
  }
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished == 2; }));
  }
  EXPECT_EQ(done[0].stop_reason, "error");
  EXPECT_NE(done[0].error.find("the client's buffer is full"), std::string::npos) << done[0].error;
  EXPECT_LE(done[0].tokens.size(), 1u);
  EXPECT_NE(done[1].stop_reason, "error");
  EXPECT_EQ(done[1].text, alone);
  // And it goes on serving.
  Request again = request(qs[1]);
  std::promise<std::string> text;
  RequestCallbacks cb;
  cb.on_done = [&](const Completion& c) { text.set_value(c.text); };
  engine.submit(engine.prepare(again), cb);
  auto f = text.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(f.get(), alone);
  engine.stop();
}

}  // namespace
}  // namespace rkv
