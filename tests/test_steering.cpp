// SkipKV's adaptive steering (ALGORITHMS.md 5): the default layer, thought splitting and labels,
// a_t * v added at delimiter input tokens only (per sequence, with the sequence's own N_o), the
// unsteered bits with a0 = gamma = 0, the steering-vector file and its model checks, and a
// calibration on a tiny random checkpoint whose vector generation then loads.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "batch_test_util.h"
#include "core/error.h"
#include "engine/compression_vocab.h"
#include "engine/generator.h"
#include "engine/kv_memory.h"
#include "engine/model_runner.h"
#include "engine/steering.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no rkv::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

using test::TempDir;

std::shared_ptr<SteeringVector> make_vector(int hidden, int layer, int num_layers, unsigned seed) {
  auto v = std::make_shared<SteeringVector>();
  v->layer = layer;
  v->num_layers = num_layers;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.5f);
  v->values.resize(static_cast<std::size_t>(hidden));
  for (float& x : v->values) x = g(rng);
  return v;
}

TEST(Steering, DefaultLayerScalesWithDepth) {
  EXPECT_EQ(default_steering_layer(28), 20);
  EXPECT_EQ(default_steering_layer(30), 20);
  EXPECT_EQ(default_steering_layer(32), 20);
  EXPECT_EQ(default_steering_layer(48), 35);
  EXPECT_EQ(default_steering_layer(24), 17);
  EXPECT_EQ(default_steering_layer(64), 46);
  EXPECT_EQ(default_steering_layer(4), 3);
  EXPECT_EQ(default_steering_layer(1), 0);
  EXPECT_THROW(default_steering_layer(0), Error);
}

TEST(Steering, ThoughtLabelsAndSplitting) {
  EXPECT_EQ(label_thought("Wait, that is wrong."), ThoughtLabel::reflection);
  EXPECT_EQ(label_thought("But wait."), ThoughtLabel::reflection);
  EXPECT_EQ(label_thought("Let me check the sum."), ThoughtLabel::reflection);
  EXPECT_EQ(label_thought("I double-check it."), ThoughtLabel::reflection);
  EXPECT_EQ(label_thought("To verify: 2+2=4."), ThoughtLabel::reflection);
  EXPECT_EQ(label_thought("Alternatively, use a table."), ThoughtLabel::transition);
  EXPECT_EQ(label_thought("So x = 3."), ThoughtLabel::execution);
  EXPECT_EQ(label_thought("wait and see"), ThoughtLabel::execution);  // case-sensitive

  // ids -> texts; "\n\n" as one token, as two "\n" tokens, inside ".\n\n"; a tail without a
  // delimiter is no thought; splitting stops at the stop token (</think>).
  const std::vector<std::string> texts = {"A",     "\n\n", "Wait", "\n",       "\n", "B",
                                          ".\n\n", "\n",   "C",    "</think>", "D",  "\n\n"};
  auto text = [&](int id) { return texts[static_cast<std::size_t>(id)]; };
  const std::vector<int> out = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  auto th = split_thoughts(out, text, 9);
  ASSERT_EQ(th.size(), 3u);
  EXPECT_EQ(th[0].begin, 0);
  EXPECT_EQ(th[0].delimiter, 1);
  EXPECT_EQ(th[0].text, "A\n\n");
  EXPECT_EQ(th[1].delimiter, 4);
  EXPECT_EQ(th[1].label, ThoughtLabel::reflection);
  EXPECT_EQ(th[2].text, "B.\n\n");
  EXPECT_EQ(th[2].label, ThoughtLabel::execution);
  // Without a stop token the newline after ".\n\n" does not end an empty thought, and "D\n\n"
  // counts.
  th = split_thoughts(out, text, -1);
  ASSERT_EQ(th.size(), 4u);
  EXPECT_EQ(th[3].text, "\nC</think>D\n\n");
}

// ---- a_t * v at delimiters only
// ------------------------------------------------------------------

CompressionVocab word_vocab() {
  CompressionVocab v;
  // 0: "\n", 1: "\n\n", 2: "Wait", 3: "Alternatively", 4: "ok"
  v.token_text = [](int id) -> std::string {
    static const char* t[] = {"\n", "\n\n", "Wait", "Alternatively", "ok"};
    return id >= 0 && id < 5 ? t[id] : "?";
  };
  return v;
}

TEST(Steering, AddedAtDelimitersOnlyWithTheSequencesOwnStrength) {
  const int hidden = 4;
  auto vec = make_vector(hidden, 1, 3, 5);
  SteeringParams steering{vec, 0.5f, 0.25f};
  KvMemory a(CompressionParams::defaults(Method::fullkv), word_vocab(), steering);
  KvMemory b(CompressionParams::defaults(Method::fullkv), word_vocab(), steering);
  a.allocate(KvCacheShape{3, 1, 1, 4, 32, 0});
  b.allocate(KvCacheShape{3, 1, 1, 4, 32, 0});

  // Sequence a: Wait ok \n | ok \n\n | Alternatively \n | ok ; sequence b: only "ok" and "\n".
  // Expected a_t at a's delimiters: N_o = 1, 1, 2 -> 0.75, 0.75, 1.0; b's N_o stays 0 -> 0.5.
  const std::vector<int> tokens_a = {2, 4, 0, 4, 1, 3, 0, 4};
  const std::vector<float> expect_a = {0, 0, 0.75f, 0, 0.75f, 0, 1.0f, 0};
  const std::vector<int> tokens_b = {4, 0, 4, 0, 4, 4, 4, 0};
  const std::vector<float> expect_b = {0, 0.5f, 0, 0.5f, 0, 0, 0, 0.5f};
  const int prompt = 6;
  for (std::size_t s = 0; s < tokens_a.size(); ++s) {
    const int pos = prompt + static_cast<int>(s);
    a.begin_decode_step(tokens_a[s], pos);
    b.begin_decode_step(tokens_b[s], pos);
    // One pass, as the model runner steers it: a prompt row of a (never steered), a's decode
    // row, b's decode row.
    const std::vector<std::pair<KvMemory*, int>> rows = {{&a, 1}, {&a, pos}, {&b, pos}};
    for (int layer = 0; layer < 3; ++layer) {
      std::vector<float> h(3 * hidden, 1.0f);
      for (std::size_t r = 0; r < rows.size(); ++r)
        rows[r].first->steer(layer, rows[r].second, h.data() + r * hidden, hidden);
      for (int i = 0; i < hidden; ++i) {
        const float v = vec->values[static_cast<std::size_t>(i)];
        const float ea = layer == 1 ? expect_a[s] : 0.0f;
        const float eb = layer == 1 ? expect_b[s] : 0.0f;
        EXPECT_EQ(h[static_cast<std::size_t>(i)], 1.0f) << "prompt row, step " << s;
        EXPECT_EQ(h[static_cast<std::size_t>(hidden + i)], ea == 0 ? 1.0f : 1.0f + ea * v)
            << "sequence a, step " << s << ", layer " << layer;
        EXPECT_EQ(h[static_cast<std::size_t>(2 * hidden + i)], eb == 0 ? 1.0f : 1.0f + eb * v)
            << "sequence b, step " << s << ", layer " << layer;
      }
    }
  }
  EXPECT_EQ(a.sentences()->non_execution_count(), 2);
  EXPECT_EQ(b.sentences()->non_execution_count(), 0);

  // Validation (Engine::prepare calls it): a0 and gamma finite.
  SteeringParams bad{vec, std::nanf(""), 0.0f};
  expect_error([&] { bad.validate(); }, "a0");
}

// ---- on a golden checkpoint: bits and strength through the real forward pass --------------------

// Steers by hand (the test's own reading of ALGORITHMS.md 5), after every layer of a pass.
class ManualSteering {
 public:
  ManualSteering(const SteeringVector& v, float a0, float gamma) : v_(v), a0_(a0), gamma_(gamma) {}
  // The decode step's input token text.
  void next_token(std::int32_t position, const std::string& text) {
    const bool delim = text == "\n";
    if (sentence_open_ && last_delim_ && !delim) sentence_has_wait_ = false;
    if (!sentence_has_wait_ && text.find("Wait") != std::string::npos) {
      sentence_has_wait_ = true;
      ++n_o_;
    }
    sentence_open_ = true;
    last_delim_ = delim;
    position_ = position;
  }
  void after_layer(int layer, std::span<const ForwardRow> rows, float* hidden) const {
    if (layer != v_.layer || !last_delim_) return;
    const float a = a0_ + gamma_ * static_cast<float>(n_o_);
    const auto H = static_cast<std::size_t>(v_.hidden_size());
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (rows[r].position == position_)
        for (std::size_t i = 0; i < H; ++i) hidden[r * H + i] += a * v_.values[i];
  }

 private:
  const SteeringVector& v_;
  float a0_, gamma_;
  bool sentence_open_ = false, last_delim_ = false, sentence_has_wait_ = false;
  int n_o_ = 0;
  std::int32_t position_ = -1;
};

class SteeringGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::self_made_model());
    for (int i = 0; i < 12; ++i) prompt_.push_back(3 + (i * 37) % 500);
    vocab_.token_text = [](int id) -> std::string {
      if (id % 3 == 0) return "\n";
      if (id % 7 == 0) return "Wait";
      return "x";
    };
    vector_ = make_vector(model_->config().hidden_size, 1, model_->config().num_layers, 11);
  }

  // Greedy decoding by hand; returns the logits of every step. mode: 0 none, 1 the engine's
  // steering (KvMemory through the model runner), 2 ManualSteering on the bare forward pass.
  std::vector<std::vector<float>> run(int mode, float a0, float gamma, int steps = 24) {
    ThreadPool pool(1);
    const ModelConfig& c = model_->config();
    SteeringParams steering;
    if (mode == 1) steering = {vector_, a0, gamma};
    KvMemory memory(CompressionParams::defaults(Method::fullkv), vocab_, steering);
    memory.allocate(model_->cache_shape(static_cast<int>(prompt_.size()) + steps + 1, 0));
    KvCache& cache = *memory.cache_for_appends();
    KvMemory* const memories[] = {&memory};
    ModelRunner runner(*model_, pool);
    ManualSteering manual(*vector_, a0, gamma);
    ForwardScratch scratch;
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    prefill(*model_, cache, prompt_, 0, 64, scratch, pool, logits.data());
    std::vector<std::vector<float>> all;
    int pos = static_cast<int>(prompt_.size());
    for (int s = 0; s < steps; ++s) {
      const int token =
          static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      memory.begin_decode_step(token, pos);
      manual.next_token(pos, vocab_.token_text(token));
      const ForwardRow row{&cache, token, pos++, true};
      if (mode == 2) {
        const std::unique_ptr<ForwardOps> ops = model_->ops(scratch, pool);
        ForwardPass pass(c, *ops, {&row, 1});
        for (int l = 0; l < c.num_layers; ++l) {
          pass.append_kv(l);
          pass.attend(l);
          manual.after_layer(l, {&row, 1}, pass.hidden());
        }
        pass.finish(logits.data());
      } else {
        runner.run({&row, 1}, memories, logits.data());
      }
      all.push_back(logits);
    }
    return all;
  }

  std::unique_ptr<Model> model_;
  std::vector<int> prompt_;
  CompressionVocab vocab_;
  std::shared_ptr<SteeringVector> vector_;
};

bool same_bits(const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i].size() != y[i].size() ||
        std::memcmp(x[i].data(), y[i].data(), x[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

TEST_F(SteeringGolden, ZeroStrengthIsBitIdenticalAndStrengthMatchesTheDefinition) {
  const auto plain = run(0, 0, 0);
  EXPECT_TRUE(same_bits(run(1, 0.0f, 0.0f), plain));
  const auto steered = run(1, 1.0f, 0.5f);
  EXPECT_FALSE(same_bits(steered, plain));  // delimiters were input, so the vector acted
  EXPECT_TRUE(same_bits(steered, run(2, 1.0f, 0.5f)));
}

TEST_F(SteeringGolden, TheBatchEngineTakesTheVector) {
  ThreadPool pool(1);
  Request options;
  options.prompt_ids = prompt_;
  options.max_new_tokens = 20;
  options.sampling.temperature = 0.0f;
  options.ignore_eos = true;
  auto generate = [&] {
    return test::run_alone(*model_, pool, test::prepared_request(*model_, options), vocab_).tokens;
  };
  const auto plain = generate();
  options.steering = {vector_, 0.0f, 0.0f};
  EXPECT_EQ(generate(), plain);
  // With skipkv too (sentence tracking and steering share the tracker).
  options.compression = CompressionParams::defaults(Method::skipkv);
  options.compression.budget = 16;
  options.compression.buffer = 4;
  options.compression.window = 2;
  EXPECT_EQ(generate().size(), 20u);
}

TEST(SteeringPrepare, TheEngineChecksTheVectorAgainstTheModel) {
  auto model = Model::load(test::shipped_model_dir());
  const Tokenizer tok = Tokenizer::load(test::shipped_model_dir());
  ThreadPool pool(1);
  const Engine engine(*model, &tok, pool);
  Request r;
  r.text = "x";
  r.steering = {make_vector(32, 1, 2, 1), 1.0f, 0.0f};
  expect_error([&] { engine.prepare(r); }, "hidden size 32");
  r.steering = {make_vector(model->config().hidden_size, model->config().num_layers + 1,
                            model->config().num_layers + 4, 1),
                1.0f, 0.0f};
  expect_error([&] { engine.prepare(r); }, "layer");
  r.steering = {make_vector(model->config().hidden_size, 1, 2, 1), std::nanf(""), 0.0f};
  expect_error([&] { engine.prepare(r); }, "a0");
  // Steering reads the tokens' text: an engine without a tokenizer refuses it.
  const Engine no_tokenizer(*model, nullptr, pool);
  r.text.clear();
  r.prompt_ids = {1, 2};
  r.decode_text = false;
  r.steering = {make_vector(model->config().hidden_size, 1, 2, 1), 1.0f, 0.0f};
  expect_error([&] { no_tokenizer.prepare(r); }, "needs a tokenizer");
}

// ---- the file
// -------------------------------------------------------------------------------------

TEST(SteeringFile, RoundTripAndErrors) {
  TempDir dir;
  auto v = make_vector(16, 3, 4, 2);
  v->model = "m";
  v->fingerprint = "0123456789abcdef";
  v->architecture = "Qwen2ForCausalLM";
  v->extra["execution_thoughts"] = "5";
  const fs::path path = dir.path() / "v.safetensors";
  save_steering_vector(path, *v);
  const SteeringVector back = load_steering_vector(path);
  EXPECT_EQ(back.values, v->values);
  EXPECT_EQ(back.layer, 3);
  EXPECT_EQ(back.num_layers, 4);
  EXPECT_EQ(back.model, "m");
  EXPECT_EQ(back.fingerprint, v->fingerprint);
  EXPECT_EQ(back.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(back.extra.at("execution_thoughts"), "5");

  ModelConfig c;
  c.hidden_size = 16;
  c.num_layers = 4;
  EXPECT_NO_THROW(check_steering_vector(back, c, v->fingerprint, "v"));
  EXPECT_NO_THROW(check_steering_vector(back, c, "", "v"));  // fingerprint unknown: not checked
  expect_error([&] { check_steering_vector(back, c, "fedcba9876543210", "v"); }, "does not belong");
  c.hidden_size = 32;
  expect_error([&] { check_steering_vector(back, c, v->fingerprint, "v"); }, "hidden size 16");
  c.hidden_size = 16;
  c.num_layers = 2;
  expect_error([&] { check_steering_vector(back, c, v->fingerprint, "v"); }, "layer 3");

  expect_error([&] { load_steering_vector(dir.path() / "missing.safetensors"); }, "not found");
  write_safetensors(
      dir.path() / "other.safetensors",
      {{"x", DType::F32, {4}, [](std::uint8_t* b, std::size_t n) { std::memset(b, 0, n); }}});
  expect_error([&] { load_steering_vector(dir.path() / "other.safetensors"); },
               "not an rkv steering vector");
  v->values[2] = std::nanf("");
  save_steering_vector(path, *v);
  expect_error([&] { load_steering_vector(path); }, "not finite");
  v->values[2] = 0.0f;
  v->layer = 4;
  save_steering_vector(path, *v);
  expect_error([&] { load_steering_vector(path); }, "not a layer");
}

// ---- calibration on a tiny random checkpoint, then generation with the vector -------------------

// Collects one layer's residual stream, for every row of every pass (prefill's after_layer).
class LayerStates {
 public:
  LayerStates(int layer, int hidden) : layer_(layer), hidden_(hidden) {}
  void after_layer(int layer, std::span<const ForwardRow> rows, const float* hidden) {
    if (layer != layer_) return;
    states.insert(states.end(), hidden, hidden + rows.size() * static_cast<std::size_t>(hidden_));
  }
  std::vector<float> states;  // [rows seen][hidden]

 private:
  int layer_, hidden_;
};

// Runs `cmd` with stdout and stderr going to `log`; returns the exit status and the output.
int run_command(const std::string& cmd, const fs::path& log, std::string* output) {
  const int status = std::system((cmd + " > '" + log.string() + "' 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *output = ss.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SteeringCalibration, VectorFromLabelledThoughtsLoadsForItsModelOnly) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.shape = "tiny";
  options.seed = 1;
  write_random_checkpoint(dir.path() / "m1", options);
  options.seed = 2;
  write_random_checkpoint(dir.path() / "m2", options);
  auto model = Model::load(dir.path() / "m1");
  const Tokenizer tok = Tokenizer::load(dir.path() / "m1");
  const CompressionVocab vocab = compression_vocab(tok);
  ASSERT_GE(vocab.think_end_id, 0);
  const int layer = default_steering_layer(model->config().num_layers);
  EXPECT_EQ(layer, 3);

  const auto p = tok.encode("What is 2+2?", true);
  const auto o = tok.encode(
      "Let me add.\n\nWait, is that right?\n\nSo it is 4.\n\nAlternatively, "
      "count.\n\n</think>\n\n4.\n\n",
      false);
  const std::vector<int> prompt(p.begin(), p.end()), output(o.begin(), o.end());
  ThreadPool pool(2);
  SteeringCalibration cal(*model, layer, model_fingerprint(model->dir(), model->config()));
  const auto thoughts = cal.add_sample(prompt, output, vocab.token_text, vocab.think_end_id, pool);
  ASSERT_EQ(thoughts.size(), 4u);
  EXPECT_EQ(thoughts[0].text, "Let me add.\n\n");
  EXPECT_EQ(thoughts[1].label, ThoughtLabel::reflection);
  EXPECT_EQ(thoughts[2].label, ThoughtLabel::execution);
  EXPECT_EQ(thoughts[3].label, ThoughtLabel::transition);
  EXPECT_EQ(cal.execution_count(), 2);
  EXPECT_EQ(cal.non_execution_count(), 2);

  // The definition, from layer-k states captured independently (one pass over everything).
  const int H = model->config().hidden_size;
  std::vector<int> all(prompt);
  all.insert(all.end(), output.begin(), output.end());
  LayerStates states(layer, H);
  KvCache cache(model->cache_shape(static_cast<int>(all.size()), 0));
  ForwardScratch scratch;
  prefill(*model, cache, all, 0, 1024, scratch, pool, nullptr,
          [&states](int l, std::span<const ForwardRow> rows, const float* hidden) {
            states.after_layer(l, rows, hidden);
          });
  auto state = [&](const Thought& t, int i) {
    return states.states[(prompt.size() + static_cast<std::size_t>(t.delimiter)) *
                             static_cast<std::size_t>(H) +
                         static_cast<std::size_t>(i)];
  };
  const SteeringVector v = cal.finish();
  ASSERT_EQ(v.hidden_size(), H);
  for (int i = 0; i < H; ++i) {
    const double expect = (state(thoughts[0], i) + state(thoughts[2], i)) / 2.0 -
                          (state(thoughts[1], i) + state(thoughts[3], i)) / 2.0;
    EXPECT_NEAR(v.values[static_cast<std::size_t>(i)], expect, 1e-4 * (1.0 + std::fabs(expect)))
        << i;
  }
  EXPECT_EQ(v.layer, layer);
  EXPECT_EQ(v.model, "m1");

  // Save, load for the same model, generate with it; another model (same shape, other weights)
  // refuses it.
  const fs::path path = dir.path() / "steer.safetensors";
  save_steering_vector(path, v);
  auto loaded = load_steering_vector_for(path, *model);
  EXPECT_EQ(loaded->values, v.values);
  auto other = Model::load(dir.path() / "m2");
  expect_error([&] { load_steering_vector_for(path, *other); }, "does not belong to this model");

  Request g;
  g.prompt_ids = prompt;
  g.decode_text = false;
  g.max_new_tokens = 16;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  g.steering = {loaded, 1.0f, 0.02f};
  EXPECT_EQ(generate_alone(*model, pool, g, {}, &tok).tokens.size(), 16u);

  // The same through the command line.
  const std::string rkv = test::rkv_binary();
  const fs::path log = dir.path() / "log.txt";
  std::string out;
  EXPECT_EQ(
      run_command(rkv + " generate -m " + (dir.path() / "m1").string() +
                      " -p 'Hi' -n 24 --temp 0 --ignore-eos --kv-method skipkv --kv-budget 12 "
                      "--kv-buffer 4 --kv-window 2 --steering " +
                      path.string() + " --steer-a0 2 --steer-gamma 0.1",
                  log, &out),
      0)
      << out;
  EXPECT_NE(run_command(rkv + " generate -m " + (dir.path() / "m2").string() +
                            " -p 'Hi' -n 4 --steering " + path.string(),
                        log, &out),
            0);
  EXPECT_NE(out.find("does not belong to this model"), std::string::npos) << out;

  // steer-calibrate runs end to end; a random model rarely writes "Wait", so either it finds
  // both kinds of thought and writes a loadable vector, or it says that it did not.
  {
    std::ofstream ds(dir.path() / "cal.jsonl");
    ds << "{\"problem\": \"What is 1+1?\"}\n{\"question\": \"Name a prime.\"}\n";
  }
  const fs::path cal_out = dir.path() / "cal.safetensors";
  const int rc =
      run_command(rkv + " steer-calibrate -m " + (dir.path() / "m1").string() + " --dataset " +
                      (dir.path() / "cal.jsonl").string() + " -n 24 --out " + cal_out.string() +
                      " --thoughts " + (dir.path() / "thoughts.jsonl").string(),
                  log, &out);
  if (rc == 0) {
    EXPECT_NO_THROW(load_steering_vector_for(cal_out, *model));
  } else {
    EXPECT_NE(out.find("non-execution thoughts"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("prompt 2/2"), std::string::npos) << out;
  std::ofstream(dir.path() / "bad.jsonl") << "{\"text\": 1}\n";
  EXPECT_NE(
      run_command(rkv + " steer-calibrate -m " + (dir.path() / "m1").string() + " --dataset " +
                      (dir.path() / "bad.jsonl").string() + " --out " + cal_out.string(),
                  log, &out),
      0);
  EXPECT_NE(out.find("\"problem\" or \"question\""), std::string::npos) << out;
}

}  // namespace
}  // namespace rkv
