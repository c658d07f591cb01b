// The eval runner: one record per (problem, sample, method, budget), an interrupted run resumes
// where it stopped and ends with the same records, and the summary's arithmetic.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/runner.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv::eval {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A fresh directory holding a random tiny checkpoint (`model`) and the first `problems` of three
// arithmetic problems (`data.jsonl`).
fs::path write_fixture(const std::string& tag, DType dtype, int problems) {
  const fs::path dir =
      fs::temp_directory_path() / ("rkv-eval-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandomCheckpointOptions ck;
  ck.shape = "tiny";
  ck.dtype = dtype;
  write_random_checkpoint(dir / "model", ck);
  const char* lines[] = {R"({"problem": "What is 1+1?", "answer": "2", "unique_id": "a"})",
                         R"({"problem": "What is 2+3?", "answer": "5", "unique_id": "b"})",
                         R"({"problem": "What is 10-4?", "answer": "6", "unique_id": "c"})"};
  std::ofstream data(dir / "data.jsonl");
  for (int i = 0; i < problems; ++i) data << lines[i] << "\n";
  return dir;
}

TEST(EvalRunner, ResumesAnInterruptedRunToTheSameRecords) {
  const fs::path dir = write_fixture("resume", RandomCheckpointOptions{}.dtype, 3);
  auto model = Model::load(dir / "model");
  const Tokenizer tokenizer = Tokenizer::load(dir / "model");
  const Dataset dataset = load_dataset(dir / "data.jsonl", {});
  ThreadPool pool(2);
  RunnerOptions o;
  o.methods = {"fullkv", "rkv"};
  o.budgets = parse_budget_specs("24,75%");
  o.kv_settings = {{"buffer", "8"}};
  o.samples = 2;
  o.max_new_tokens = 40;
  o.progress = nullptr;
  o.out_dir = dir / "run1";
  const RunSummary first = run_eval(*model, tokenizer, dataset, o, pool);
  EXPECT_EQ(first.generated_now, 3u * 2u * 3u);  // 3 problems x 2 samples x (fullkv + 2 budgets)
  EXPECT_EQ(first.resumed, 0u);
  const auto records = lines_of(o.out_dir / "samples.jsonl");
  ASSERT_EQ(records.size(), 18u);

  // Interrupt: the run lost its last 4 records and wrote half of a fifth.
  o.out_dir = dir / "run2";
  fs::create_directories(o.out_dir);
  {
    std::ofstream partial(o.out_dir / "samples.jsonl");
    for (std::size_t i = 0; i + 4 < records.size(); ++i) partial << records[i] << "\n";
    partial << records.back().substr(0, 40);
  }
  const RunSummary second = run_eval(*model, tokenizer, dataset, o, pool);
  EXPECT_EQ(second.resumed, 14u);
  EXPECT_EQ(second.generated_now, 4u);
  // Same seeds per (problem, sample): the resumed run ends with the same outputs and summary.
  ASSERT_EQ(second.results.size(), first.results.size());
  for (std::size_t i = 0; i < first.results.size(); ++i) {
    EXPECT_EQ(second.results[i].method, first.results[i].method);
    EXPECT_EQ(second.results[i].budget, first.results[i].budget);
    EXPECT_EQ(second.results[i].mean_generated_tokens, first.results[i].mean_generated_tokens);
    EXPECT_EQ(second.results[i].samples, 6u);
  }
  const auto summary = test::read_json(o.out_dir / "summary.json");
  ASSERT_EQ(summary["results"].size(), 3u);
  for (const auto& r : summary["results"])
    for (const char* key : {"method", "budget", "pass_at_1", "relative_to_fullkv",
                            "mean_generated_tokens", "samples"})
      EXPECT_TRUE(r.contains(key)) << key;
  EXPECT_TRUE(fs::exists(o.out_dir / "accuracy.svg"));
  fs::remove_all(dir);
}

// One sample's trace file (engine/compression_trace.h), as these tests read it.
struct TraceFile {
  std::size_t lines = 0;
  std::string first_type;  // the first line's "type"
  nlohmann::json header;
  std::vector<int> ids;  // the prompt's, then the generated ones
  std::vector<nlohmann::json> compressions;
  std::vector<int> generated() const {
    return {ids.begin() + header.at("prompt_tokens").get<int>(), ids.end()};
  }
};

TraceFile read_trace(const fs::path& path) {
  TraceFile t;
  for (const std::string& l : lines_of(path)) {
    auto r = nlohmann::json::parse(l);
    if (t.lines++ == 0) t.first_type = r.at("type");
    if (r.at("type") == "header") t.header = r;
    if (r.at("type") == "tokens")
      for (const auto& id : r.at("ids")) t.ids.push_back(id.get<int>());
    if (r.at("type") == "compression") t.compressions.push_back(std::move(r));
  }
  return t;
}

// --trace-dir: every sample's trace is on disk and named by its record; its tokens are the
// prompt and the generated ids, and each compression says which position first read it (the one
// whose decode step compressed, or the first after the prompt).
TEST(EvalRunner, TracesEverySampleAndNamesItInTheRecord) {
  const fs::path dir = write_fixture("trace", RandomCheckpointOptions{}.dtype, 2);
  auto model = Model::load(dir / "model");
  const Tokenizer tokenizer = Tokenizer::load(dir / "model");
  const Dataset dataset = load_dataset(dir / "data.jsonl", {});
  ThreadPool pool(2);
  RunnerOptions o;
  o.methods = {"rkv"};
  o.budgets = parse_budget_specs("12");
  o.kv_settings = {{"buffer", "4"}, {"window", "4"}};
  o.samples = 2;
  o.max_new_tokens = 30;
  o.progress = nullptr;
  o.out_dir = dir / "run";
  o.trace_dir = dir / "traces";
  run_eval(*model, tokenizer, dataset, o, pool);
  const auto records = lines_of(o.out_dir / "samples.jsonl");
  ASSERT_EQ(records.size(), 4u);
  for (const std::string& line : records) {
    const auto rec = nlohmann::json::parse(line);
    const std::string name = rec.at("trace");
    EXPECT_EQ(name, "rkv-12/" + rec.at("example_id").get<std::string>() + "-s" +
                        std::to_string(rec.at("sample").get<int>()) + ".jsonl");
    const TraceFile trace = read_trace(o.trace_dir / name);
    ASSERT_GE(trace.lines, 3u) << name;
    ASSERT_EQ(trace.first_type, "header") << name;
    EXPECT_EQ(trace.header.at("method"), "rkv");
    EXPECT_EQ(trace.header.at("budget"), 12);
    const int prompt = trace.header.at("prompt_tokens");
    EXPECT_EQ(prompt, rec.at("prompt_tokens").get<int>());
    for (const auto& r : trace.compressions) {
      const std::int64_t step = r.at("step"), first = r.at("first_reader");
      EXPECT_EQ(first, step > prompt ? step - 1 : step) << r.dump();
      for (const auto& k : r.at("kept_positions"))
        EXPECT_LT(k.get<std::int64_t>(), step) << r.dump();
      EXPECT_LE(r.at("n_after").get<int>(), 12) << r.dump();
    }
    EXPECT_EQ(trace.ids.size(),
              static_cast<std::size_t>(prompt) + rec.at("generated_tokens").get<std::size_t>());
    EXPECT_GT(trace.compressions.size(), 0u) << name;
    EXPECT_FALSE(fs::exists(o.trace_dir / (name + ".tmp")));
  }
  fs::remove_all(dir);
}

// RunnerOptions::replay (`rkv eval --replay`): every (problem, sample) writes the given ids
// instead of sampling, under the run's method: replaying a full-cache run's outputs under rkv
// gives back the same outputs (their ids in the traces), compressed; a job without ids is an error.
TEST(EvalRunner, ReplaysGivenOutputsUnderAnotherMethod) {
  const fs::path dir = write_fixture("replay", RandomCheckpointOptions{}.dtype, 2);
  auto model = Model::load(dir / "model");
  const Tokenizer tokenizer = Tokenizer::load(dir / "model");
  const Dataset dataset = load_dataset(dir / "data.jsonl", {});
  ThreadPool pool(2);
  RunnerOptions o;
  o.methods = {"fullkv"};
  o.samples = 2;
  o.max_new_tokens = 30;
  o.temperature = 1.0f;
  o.progress = nullptr;
  o.out_dir = dir / "full";
  o.trace_dir = dir / "full-traces";
  run_eval(*model, tokenizer, dataset, o, pool);
  std::map<std::pair<std::string, int>, std::string> outputs;
  for (const std::string& line : lines_of(o.out_dir / "samples.jsonl")) {
    const auto rec = nlohmann::json::parse(line);
    const std::pair<std::string, int> key{rec.at("example_id"), rec.at("sample")};
    o.replay[key] = read_trace(o.trace_dir / rec.at("trace").get<std::string>()).generated();
    outputs[key] = rec.at("output");
  }
  ASSERT_EQ(o.replay.size(), 4u);
  o.methods = {"rkv"};
  o.budgets = parse_budget_specs("12");
  o.kv_settings = {{"buffer", "4"}, {"window", "4"}};
  o.out_dir = dir / "replayed";
  o.trace_dir = dir / "replayed-traces";
  run_eval(*model, tokenizer, dataset, o, pool);
  std::size_t compressed = 0;
  for (const std::string& line : lines_of(o.out_dir / "samples.jsonl")) {
    const auto rec = nlohmann::json::parse(line);
    const std::pair<std::string, int> key{rec.at("example_id"), rec.at("sample")};
    EXPECT_EQ(rec.at("output"), outputs.at(key));
    const TraceFile trace = read_trace(o.trace_dir / rec.at("trace").get<std::string>());
    EXPECT_EQ(trace.generated(), o.replay.at(key));
    compressed += trace.compressions.size();
  }
  EXPECT_GT(compressed, 0u);
  o.replay.erase(o.replay.begin());
  o.out_dir = dir / "missing";
  EXPECT_THROW(run_eval(*model, tokenizer, dataset, o, pool), Error);
  fs::remove_all(dir);
}

// A directory resumes only under the settings its samples were made with (run.json): methods
// and budgets may be added; another temperature, cache dtype or method setting is refused, and
// the samples are left as they were.
TEST(EvalRunner, RefusesToResumeUnderOtherSettings) {
  const fs::path dir = write_fixture("settings", DType::F32, 1);
  auto model = Model::load(dir / "model");
  const Tokenizer tokenizer = Tokenizer::load(dir / "model");
  const Dataset dataset = load_dataset(dir / "data.jsonl", {});
  ThreadPool pool(2);
  RunnerOptions o;
  o.methods = {"fullkv", "rkv"};
  o.budgets = parse_budget_specs("24");
  o.kv_settings = {{"buffer", "8"}};
  o.max_new_tokens = 16;
  o.temperature = 0.0f;
  o.progress = nullptr;
  o.out_dir = dir / "run";
  EXPECT_EQ(run_eval(*model, tokenizer, dataset, o, pool).generated_now, 2u);
  const auto settings = test::read_json(o.out_dir / "run.json");
  EXPECT_EQ(settings["temperature"], 0.0);
  EXPECT_EQ(settings["kv_dtype"], "f32");
  EXPECT_EQ(settings["kv"]["rkv"]["buffer"], 8);

  auto refused = [&](RunnerOptions changed, const std::string& what) {
    SCOPED_TRACE(what);
    const std::size_t before = lines_of(o.out_dir / "samples.jsonl").size();
    try {
      run_eval(*model, tokenizer, dataset, changed, pool);
      ADD_FAILURE() << "resumed under another " << what;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("other settings"), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
    EXPECT_EQ(lines_of(o.out_dir / "samples.jsonl").size(), before);
  };
  RunnerOptions hot = o;
  hot.temperature = 0.6f;
  refused(hot, "temperature");
  RunnerOptions bf16 = o;
  bf16.kv_dtype = KvDtype::bf16;
  refused(bf16, "kv_dtype");
  RunnerOptions smaller_buffer = o;
  smaller_buffer.kv_settings = {{"buffer", "4"}};
  refused(smaller_buffer, "rkv settings");
  RunnerOptions longer = o;
  longer.max_new_tokens = 32;
  refused(longer, "max_new_tokens");
  EXPECT_EQ(settings["attention_precision"], "exact");
  model->set_attention_precision(kernels::AttentionPrecision::LlamaCpp);
  refused(o, "attention_precision");
  model->set_attention_precision(kernels::AttentionPrecision::Exact);
  // A run.json from before these two settings were recorded resumes under their default, exact.
  {
    auto older = test::read_json(o.out_dir / "run.json");
    older.erase("matmul_precision");
    older.erase("attention_precision");
    std::ofstream(o.out_dir / "run.json") << older.dump();
    EXPECT_EQ(run_eval(*model, tokenizer, dataset, o, pool).generated_now, 0u);
    model->set_matmul_precision(kernels::MatmulPrecision::Rounded);
    refused(o, "matmul_precision");
    model->set_matmul_precision(kernels::MatmulPrecision::Exact);
  }

  // The same settings, spelled out (rkv's default window given explicitly), with a method and
  // a budget added: the two samples resume and only the new ones are generated.
  RunnerOptions more = o;
  more.methods = {"fullkv", "rkv", "h2o"};
  more.budgets = parse_budget_specs("24,32");
  more.kv_settings = {{"buffer", "8"},
                      {"window", std::to_string(CompressionParams::defaults(Method::rkv).window)}};
  const RunSummary grown = run_eval(*model, tokenizer, dataset, more, pool);
  EXPECT_EQ(grown.resumed, 2u);
  EXPECT_EQ(grown.generated_now, 3u);  // rkv at 32, h2o at 24 and 32
  // The record now holds h2o's settings too, so a later run with other h2o settings is refused.
  EXPECT_TRUE(test::read_json(o.out_dir / "run.json")["kv"].contains("h2o"));
  RunnerOptions h2o_window = more;
  h2o_window.kv_settings.push_back({"window", "2"});
  refused(h2o_window, "h2o settings");
  fs::remove_all(dir);
}

TEST(EvalRunner, SummaryArithmetic) {
  const fs::path path =
      fs::temp_directory_path() / ("rkv-summary-" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(path);
    // fullkv: 3 of 4 correct; rkv 64: 1 of 2; rkv 32: 0 of 2.
    auto rec = [&](const char* id, const char* method, int budget, const char* label, bool correct,
                   int tokens) {
      out << nlohmann::json{{"example_id", id},           {"sample", 0},
                            {"method", method},           {"budget", budget},
                            {"budget_label", label},      {"correct", correct},
                            {"generated_tokens", tokens}, {"kv_bytes", 1000}}
                 .dump()
          << "\n";
    };
    rec("p1", "fullkv", 0, "-", true, 100);
    rec("p2", "fullkv", 0, "-", true, 200);
    rec("p3", "fullkv", 0, "-", false, 300);
    rec("p4", "fullkv", 0, "-", true, 400);
    rec("p1", "rkv", 64, "64", true, 50);
    rec("p2", "rkv", 64, "64", false, 70);
    rec("p1", "rkv", 32, "32", false, 10);
    rec("p2", "rkv", 32, "32", false, 20);
    // The same sample recorded twice (two runs into one directory) counts once.
    rec("p2", "rkv", 32, "32", true, 999);
    // A line cut short by a kill is not a sample.
    out << R"({"example_id": "p3", "sample": 0, "method": "rkv", "budget": 32, "budg)";
  }
  const auto rows = summarize(path);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].method, "fullkv");
  EXPECT_DOUBLE_EQ(rows[0].pass_at_1, 0.75);
  EXPECT_DOUBLE_EQ(rows[0].relative_to_fullkv, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].mean_generated_tokens, 250.0);
  EXPECT_EQ(rows[1].budget, 32);  // budgets ascending within a method
  EXPECT_DOUBLE_EQ(rows[1].pass_at_1, 0.0);
  EXPECT_EQ(rows[2].budget, 64);
  EXPECT_DOUBLE_EQ(rows[2].pass_at_1, 0.5);
  EXPECT_DOUBLE_EQ(rows[2].relative_to_fullkv, 0.5 / 0.75);
  EXPECT_DOUBLE_EQ(rows[2].mean_generated_tokens, 60.0);
  fs::remove(path);
}

// The accuracy plot draws each method's points in the order summarize() returns them: budgets
// must ascend within every method whatever order the samples were written in (runs resumed,
// methods interleaved), and methods keep the order they first appear in.
TEST(EvalRunner, SummaryOrdersEachMethodsBudgetsWhateverTheSampleOrder) {
  const fs::path path = fs::temp_directory_path() / "rkv_summary_order.jsonl";
  {
    std::ofstream out(path);
    const std::vector<std::pair<std::string, int>> order = {
        {"streamingllm", 96}, {"h2o", 24},           {"h2o", 48}, {"rkv", 224},  {"h2o", 160},
        {"rkv", 24},          {"streamingllm", 24},  {"h2o", 96}, {"fullkv", 0}, {"h2o", 224},
        {"rkv", 96},          {"streamingllm", 224}, {"rkv", 48}, {"h2o", 8}};
    for (const auto& [method, budget] : order)
      out << nlohmann::json{{"example_id", "p1"},
                            {"sample", 0},
                            {"method", method},
                            {"budget", budget},
                            {"budget_label", method == "fullkv" ? "-" : std::to_string(budget)},
                            {"correct", true},
                            {"generated_tokens", 10},
                            {"kv_bytes", 1}}
                 .dump()
          << "\n";
  }
  std::vector<std::pair<std::string, int>> got;
  for (const auto& r : summarize(path)) got.emplace_back(r.method, r.budget);
  const std::vector<std::pair<std::string, int>> expected = {
      {"fullkv", 0}, {"streamingllm", 24}, {"streamingllm", 96}, {"streamingllm", 224},
      {"h2o", 8},    {"h2o", 24},          {"h2o", 48},          {"h2o", 96},
      {"h2o", 160},  {"h2o", 224},         {"rkv", 24},          {"rkv", 48},
      {"rkv", 96},   {"rkv", 224}};
  EXPECT_EQ(got, expected);
  fs::remove(path);
}

TEST(EvalRunner, BudgetSpecs) {
  const auto specs = parse_budget_specs("256,10%,1024");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].tokens, 256);
  EXPECT_DOUBLE_EQ(specs[1].ratio, 0.1);
  EXPECT_EQ(specs[2].tokens, 1024);
  EXPECT_THROW(parse_budget_specs("abc"), Error);
  EXPECT_THROW(parse_budget_specs("0"), Error);
  EXPECT_THROW(parse_budget_specs("150%"), Error);
}

}  // namespace
}  // namespace rkv::eval
