// What every compression method generates, pinned: on the two shipped tiny models
// (models/rkv-tiny-reasoner, models/rkv-tiny-redundant), greedy, each method at three budgets
// that compress during the chain of thought (fullkv once per problem), the token ids must equal
// those recorded in tests/data/method_outputs.json by `rkv generate` at commit efda74c, and
// again at 9b68e4d when triattention was added: every earlier entry came out the same
// (scripts/record_method_outputs.py, which also re-records them). Each entry is run alone
// through the public Engine, all of a model's entries together in one engine (continuous
// batching must give each request the tokens it gets alone), and a few through `rkv generate`;
// under the sanitizers each entry runs one of the two Engine ways. A missing model or data file
// fails: both models are in the repository.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "core/thread_pool.h"
#include "engine/query_stats.h"
#include "engine/steering.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRecorded = fs::path("tests/data/method_outputs.json");

struct Entry {
  std::string name;
  std::string model;    // relative to the repository
  std::string dataset;  // relative to the repository
  std::string problem_id;
  std::vector<int> prompt_ids;
  std::string method;
  std::vector<std::pair<std::string, std::string>> params;  // CompressionParams::set names
  std::optional<std::string> kv_dtype;
  std::optional<std::string> steering;  // steering vector file, relative to the repository
  int max_new_tokens = 0;
  double temperature = 0.0;      // greedy: 0 in every entry
  std::vector<std::string> cli;  // `rkv generate` flags beyond -m and --prompt-ids
  std::string stop_reason;
  std::int64_t compressions = 0;
  std::vector<int> ids;
};

std::vector<Entry> load_entries() {
  const fs::path path = test::source_dir() / kRecorded;
  const json doc = test::read_json(path);
  std::vector<Entry> out;
  for (const json& j : doc.at("entries")) {
    Entry e;
    e.name = j.at("name").get<std::string>();
    e.model = j.at("model").get<std::string>();
    e.dataset = j.at("dataset").get<std::string>();
    e.problem_id = j.at("problem_id").get<std::string>();
    e.prompt_ids = j.at("prompt_ids").get<std::vector<int>>();
    e.method = j.at("method").get<std::string>();
    for (const auto& [k, v] : j.at("params").items())
      e.params.emplace_back(k, v.get<std::string>());
    if (!j.at("kv_dtype").is_null()) e.kv_dtype = j.at("kv_dtype").get<std::string>();
    if (!j.at("steering").is_null()) e.steering = j.at("steering").get<std::string>();
    e.max_new_tokens = j.at("max_new_tokens").get<int>();
    e.temperature = j.at("temperature").get<double>();
    e.cli = j.at("cli").get<std::vector<std::string>>();
    e.stop_reason = j.at("stop_reason").get<std::string>();
    e.compressions = j.at("compressions").get<std::int64_t>();
    e.ids = j.at("ids").get<std::vector<int>>();
    out.push_back(std::move(e));
  }
  return out;
}

// Where two id lists first differ, for a failure message that does not print 500 ids.
std::string first_difference(const std::vector<int>& got, const std::vector<int>& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::ostringstream s;
  s << "generated " << got.size() << " ids, recorded " << want.size() << "; first difference at "
    << i << ": got " << (i < got.size() ? std::to_string(got[i]) : "(end)") << ", recorded "
    << (i < want.size() ? std::to_string(want[i]) : "(end)");
  return s.str();
}

// Under the sanitizers (several times slower) every entry still runs once: the entries of
// each model's first problem alone, the others batched. Otherwise every entry runs both ways.
#ifdef RKV_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

class MethodOutputs : public ::testing::Test {
 protected:
  struct Loaded {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::shared_ptr<const QueryStats>
        query_stats;  // triattention: the shipped file, as rkv reads it
  };

  static void SetUpTestSuite() {
    try {
      entries_ = load_entries();
      for (const Entry& e : entries_) {
        first_problem_.emplace(e.model, e.problem_id);  // keeps the first
        if (models_.count(e.model)) continue;
        const fs::path dir = test::source_dir() / e.model;
        // Loaded once here; a missing model fails every test (SetUp), it is not skipped.
        if (!fs::exists(dir / "model.safetensors") || !fs::exists(dir / "tokenizer.json")) continue;
        Loaded l;
        l.model = Model::load(dir);
        l.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(dir));
        l.query_stats = load_query_stats(default_query_stats_path(dir.string()), *l.model);
        models_.emplace(e.model, std::move(l));
      }
    } catch (const std::exception& ex) {
      setup_error_ = ex.what();
    }
  }
  static void TearDownTestSuite() {
    models_.clear();
    first_problem_.clear();
    entries_.clear();
  }

  void SetUp() override {
    ASSERT_EQ(setup_error_, "");
    ASSERT_FALSE(entries_.empty()) << kRecorded;
    for (const Entry& e : entries_)
      ASSERT_TRUE(models_.count(e.model))
          << "the shipped model " << e.model << " is missing (model.safetensors, tokenizer.json)";
  }

  // The request an entry records, as `rkv generate --prompt-ids ... --print-ids` makes it.
  static Request request_for(const Entry& e) {
    const Loaded& l = models_.at(e.model);
    Request r;
    r.prompt_ids = e.prompt_ids;
    r.max_new_tokens = e.max_new_tokens;
    r.sampling.temperature = 0.0f;
    r.decode_text = false;
    r.compression = CompressionParams::defaults(parse_method(e.method));
    for (const auto& [name, value] : e.params) r.compression.set(name, value);
    r.compression.validate();
    if (e.kv_dtype) r.kv_dtype = parse_kv_dtype(*e.kv_dtype);
    if (e.steering)
      r.steering.vector = load_steering_vector_for(test::source_dir() / *e.steering, *l.model);
    return r;
  }

  // Whether this build runs the entry alone (kSanitized: only each model's first problem).
  static bool runs_alone(const Entry& e) {
    return !kSanitized || first_problem_.at(e.model) == e.problem_id;
  }
  static bool runs_batched(const Entry& e) { return !kSanitized || !runs_alone(e); }

  static EngineOptions engine_options(const Loaded& l) {
    EngineOptions o;
    o.prefill_chunk = 512;  // rkv generate's
    o.query_stats = l.query_stats;
    return o;
  }

  // Checks one completion against its entry.
  static void check(const Entry& e, const Completion& c) {
    EXPECT_TRUE(c.tokens == e.ids) << e.name << ": " << first_difference(c.tokens, e.ids);
    EXPECT_EQ(c.stop_reason, e.stop_reason) << e.name;
    // Every compressing entry still compresses (the budgets were chosen so that they do).
    if (e.method == "fullkv") {
      EXPECT_EQ(c.compressions, 0) << e.name;
    } else {
      EXPECT_GT(c.compressions, 0) << e.name;
    }
  }

  static inline std::vector<Entry> entries_;
  static inline std::string setup_error_;
  static inline std::map<std::string, Loaded> models_;
  static inline std::map<std::string, std::string> first_problem_;  // model -> problem id
  ThreadPool pool_{2};
};

// The recorded set is what it claims to be: both models, every method, three budgets per
// compressing method and problem, every compressing entry compressed when it was recorded.
TEST_F(MethodOutputs, RecordedSetCoversEveryMethodAtThreeBudgets) {
  // model -> problem -> method -> budgets of the plain entries (no bf16 cache, no steering)
  std::map<std::string, std::map<std::string, std::map<std::string, std::set<std::string>>>> seen;
  for (const Entry& e : entries_) {
    std::string budget = "-";
    for (const auto& [k, v] : e.params)
      if (k == "budget") budget = v;
    if (!e.kv_dtype && !e.steering) seen[e.model][e.problem_id][e.method].insert(budget);
    if (e.method != "fullkv") {
      EXPECT_GT(e.compressions, 0) << e.name;
    }
    EXPECT_FALSE(e.ids.empty()) << e.name;
    EXPECT_EQ(e.temperature, 0.0) << e.name;
  }
  EXPECT_EQ(seen.size(), 2u);
  for (const auto& [model, problems] : seen) {
    EXPECT_GE(problems.size(), 2u) << model;
    for (auto [problem, methods] : problems) {
      for (const MethodInfo& info : method_table()) {
        // A method added since: add it to scripts/record_method_outputs.py and record.
        EXPECT_EQ(methods[std::string(info.name)].size(), info.method == Method::fullkv ? 1u : 3u)
            << model << " " << problem << " " << info.name;
      }
    }
  }
}

// The prompts are the held-out problems as `rkv eval --preset chains|redundant` builds them:
// the problem text as the user turn, through the model's chat template and tokenizer.
TEST_F(MethodOutputs, PromptsAreTheHeldOutProblems) {
  std::map<std::string, std::vector<int>> prompt_of;  // model + dataset + id -> prompt ids
  for (const Entry& e : entries_) {
    const std::string key = e.model + "#" + e.dataset + "#" + e.problem_id;
    if (!prompt_of.count(key)) {
      std::ifstream in(test::source_dir() / e.dataset);
      ASSERT_TRUE(in) << e.dataset;
      std::optional<std::string> text;
      for (std::string line; !text && std::getline(in, line);) {
        const json j = json::parse(line);
        if (j.at("id") == e.problem_id) text = j.at("problem").get<std::string>();
      }
      ASSERT_TRUE(text) << e.problem_id << " is not in " << e.dataset;
      const Loaded& l = models_.at(e.model);
      Engine engine(*l.model, l.tokenizer.get(), pool_);
      Request r;
      r.messages = {{"user", *text}};
      prompt_of[key] = engine.prepare(std::move(r)).prompt;
    }
    EXPECT_EQ(prompt_of[key], e.prompt_ids) << e.name;
  }
}

// Each entry alone, as `rkv generate` runs it.
TEST_F(MethodOutputs, EachRequestAloneGivesItsRecordedIds) {
  const auto start = std::chrono::steady_clock::now();
  std::size_t runs = 0;
  for (const Entry& e : entries_) {
    if (!runs_alone(e)) continue;
    ++runs;
    const Loaded& l = models_.at(e.model);
    Engine engine(*l.model, l.tokenizer.get(), pool_, engine_options(l));
    engine.submit(engine.prepare(request_for(e)));
    engine.run_until_idle();
    const auto done = engine.take_completions();
    ASSERT_EQ(done.size(), 1u) << e.name;
    check(e, done[0]);
  }
  std::printf("%zu entries alone in %.1f s\n", runs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// All of a model's entries (every method and budget, fullkv, steering, a bf16 cache) submitted
// at once to one engine: continuous batching mixes their prefill chunks and decode rows in the
// same forward passes, and each must still get the tokens it gets alone.
TEST_F(MethodOutputs, AllMethodsBatchedInOneEngineGiveTheirRecordedIds) {
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<const Entry*>> by_model;
  std::size_t runs = 0;
  for (const Entry& e : entries_) {
    if (runs_batched(e)) {
      by_model[e.model].push_back(&e);
      ++runs;
    }
  }
  EXPECT_EQ(by_model.size(), 2u);
  for (const auto& [model, entries] : by_model) {
    SCOPED_TRACE(model);
    const Loaded& l = models_.at(model);
    EngineOptions o;  // the default prefill chunk (256 tokens over all prefilling sequences)
    o.query_stats = l.query_stats;
    Engine engine(*l.model, l.tokenizer.get(), pool_, o);
    std::map<std::uint64_t, const Entry*> entry_of;
    for (const Entry* e : entries) entry_of[engine.submit(engine.prepare(request_for(*e)))] = e;
    engine.run_until_idle();
    const auto done = engine.take_completions();
    ASSERT_EQ(done.size(), entries.size());
    for (const Completion& c : done) check(*entry_of.at(c.id), c);
    EXPECT_GT(engine.stats().peak_running, 1);
  }
  std::printf("%zu entries batched in %.1f s\n", runs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// A few entries through the program itself, with the flags they were recorded with: the
// steering and bf16-cache variants, and each method at one budget of the second model.
TEST_F(MethodOutputs, RkvGenerateGivesTheRecordedIds) {
  std::set<std::string> methods_done;
  int runs = 0;
  for (const Entry& e : entries_) {
    const bool variant = e.kv_dtype || e.steering;
    const bool pick = e.model == "models/rkv-tiny-redundant" && e.problem_id == "redundant-7-1" &&
                      !methods_done.count(e.method);
    if (!variant && !pick) continue;
    if (pick) methods_done.insert(e.method);
    std::string ids;
    for (int id : e.prompt_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::string cmd = "cd '" + test::source_dir().string() +
                      "' && env $(env | grep -o '^RKV_ARG_[A-Z_]*' | sed 's/^/-u /') '" +
                      test::rkv_binary() + "' generate -m " + e.model + " --prompt-ids " + ids;
    for (const std::string& a : e.cli) cmd += " '" + a + "'";
    cmd += " 2>/dev/null";
    std::string out;
    ASSERT_EQ(test::run_command(cmd, out), 0) << e.name << ": " << cmd;
    const auto last = out.find_last_of('[');
    ASSERT_NE(last, std::string::npos) << e.name << ": " << out;
    const auto got = json::parse(out.substr(last)).get<std::vector<int>>();
    EXPECT_TRUE(got == e.ids) << e.name << ": " << first_difference(got, e.ids);
    ++runs;
  }
  EXPECT_EQ(runs, 12);  // 3 variants, fullkv and the 8 compressing methods
}

}  // namespace
}  // namespace rkv
