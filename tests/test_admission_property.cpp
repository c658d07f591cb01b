// A property test of admission under a KV memory cap, on the shipped tiny model: random mixes of
// methods, budgets, prompt and generation lengths, arrival times and cancellations, stepped one
// engine step at a time. After every step the KV bytes in use are within the cap; every request
// finishes within a bound on steps (none starves behind others); and every request that was not
// cancelled gives exactly the tokens it gives when served alone.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

struct Planned {
  Request request;
  int arrival_step = 0;
  int cancel_step = -1;  // -1: never cancelled
};

// One random request: a held-out program cut at a random line, a random method and budget, a
// random length; some ignore the end-of-sequence token so that they run to their length.
Request random_request(std::mt19937_64& rng, const std::vector<std::string>& problems) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  std::string prompt = problems[static_cast<std::size_t>(pick(static_cast<int>(problems.size())))];
  std::size_t cut = prompt.size();
  for (int lines = 4 + pick(20); lines > 0 && cut != std::string::npos; --lines)
    cut = prompt.find('\n', cut == prompt.size() ? 0 : cut + 1);
  if (cut != std::string::npos) prompt.resize(cut + 1);
  static const std::vector<std::string> methods = {"fullkv", "streamingllm", "h2o",
                                                   "snapkv", "rkv",          "gkv"};
  const std::string& method = methods[static_cast<std::size_t>(pick(6))];
  Request r;
  r.text = prompt;
  r.max_new_tokens = 1 + pick(160);
  r.sampling.temperature = 0.0f;
  r.ignore_eos = pick(3) == 0;
  r.decode_text = false;
  r.compression = CompressionParams::defaults(parse_method(method));
  if (method != "fullkv") {
    r.compression.window = 8;
    r.compression.budget = 24 + pick(100);
    r.compression.buffer = 4 + pick(32);
  }
  return r;
}

TEST(AdmissionProperty, CapHeldNoStarvationAndOutputsAsAlone) {
  const auto model = Model::load(test::shipped_model_dir());
  const Tokenizer tokenizer = Tokenizer::load(test::shipped_model_dir());
  const auto problems = test::held_out_problems(40);
  ThreadPool pool(2);
  for (std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::vector<Planned> plan;
    std::size_t largest_slot = 0;
    Engine probe(*model, &tokenizer, pool);
    for (int i = 0; i < 20; ++i) {
      Planned p;
      p.request = random_request(rng, problems);
      p.arrival_step = static_cast<int>(rng() % 120);
      if (rng() % 5 == 0) p.cancel_step = p.arrival_step + static_cast<int>(rng() % 60);
      largest_slot = std::max(largest_slot, probe.prepare(p.request).slot_bytes);
      plan.push_back(std::move(p));
    }
    // What each request gives alone.
    std::vector<std::vector<int>> alone;
    for (const Planned& p : plan) {
      Engine solo(*model, &tokenizer, pool);
      solo.submit(solo.prepare(p.request));
      solo.run_until_idle();
      alone.push_back(solo.take_completions().at(0).tokens);
    }
    // A cap between one and three of the largest slots: requests wait, some for a long time.
    EngineOptions o;
    o.kv_memory_bytes = largest_slot + rng() % (2 * largest_slot);
    Engine engine(*model, &tokenizer, pool, o);
    std::map<std::uint64_t, std::size_t> index_of;
    std::map<std::size_t, std::uint64_t> id_of;
    std::map<std::size_t, Completion> done;
    // Every request needs at most its prompt in prefill steps plus its length in decode steps;
    // serving them one after another bounds the total.
    int bound = 0;
    for (const Planned& p : plan)
      bound += 1 + static_cast<int>(probe.prepare(p.request).prompt.size()) +
               p.request.max_new_tokens + p.arrival_step;
    int step = 0, most_waiting = 0;
    while (done.size() < plan.size()) {
      ASSERT_LT(step, bound) << "a request starved: " << done.size() << " of " << plan.size()
                             << " finished";
      for (std::size_t i = 0; i < plan.size(); ++i) {
        if (plan[i].arrival_step == step) {
          const std::uint64_t id = engine.submit(engine.prepare(plan[i].request));
          index_of[id] = i;
          id_of[i] = id;
        }
        if (plan[i].cancel_step == step && id_of.count(i)) engine.cancel(id_of[i]);
      }
      engine.step();
      const EngineStats s = engine.stats();
      ASSERT_LE(s.kv_bytes_in_use, o.kv_memory_bytes) << "step " << step;
      most_waiting = std::max(most_waiting, s.waiting);
      for (Completion& c : engine.take_completions()) done[index_of.at(c.id)] = std::move(c);
      ++step;
    }
    int cancelled = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const Completion& c = done.at(i);
      if (c.finish_reason == "cancelled") {
        ++cancelled;
        EXPECT_GE(plan[i].cancel_step, 0) << "request " << i << " cancelled unasked";
        // What it generated before the cancellation is a prefix of its output alone.
        ASSERT_LE(c.tokens.size(), alone[i].size());
        EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), alone[i].begin())) << i;
        continue;
      }
      EXPECT_EQ(c.tokens, alone[i])
          << "request " << i << " (" << method_name(plan[i].request.compression.method) << ")";
    }
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.kv_bytes_in_use, 0u);
    EXPECT_LE(s.peak_kv_bytes, o.kv_memory_bytes);
    EXPECT_EQ(s.cancelled, cancelled);
    EXPECT_GT(s.peak_running, 1) << "the cap should let requests run together";
    EXPECT_GT(most_waiting, 0) << "the cap should make requests wait";
  }
}

}  // namespace
}  // namespace rkv
