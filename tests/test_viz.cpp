// Compression traces (format version 2) and the `rkv viz` page: a trace of the shipped model
// holds the sequence's tokens with their text and every compression of every (layer, KV head);
// the checker accepts it and version 1 traces and names the line of every malformed record; the
// page embeds traces so that no token text can end its <script> element. The page's behaviour in
// a browser is tested by tests/browser (Debian's chromium).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "engine/compression_trace.h"
#include "rkv/engine.h"
#include "shipped_model_test.h"
#include "test_util.h"
#include "viz/viz.h"

namespace rkv {
namespace {

using nlohmann::json;

std::vector<json> lines_of(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

class TraceTest : public test::ShippedModelTest {};

TEST_F(TraceTest, ATraceHoldsTheTokensTheirTextAndEveryCachesKeptPositions) {
  std::string text;
  CompressionTrace trace([&text](const std::string& line) { text += line + "\n"; },
                         tokenizer_.get());
  Engine engine(*model_, tokenizer_.get(), pool_);
  Request r;
  r.text = test::held_out_problems(1).at(0);
  r.max_new_tokens = 600;
  r.sampling.temperature = 0.0f;
  r.compression = CompressionParams::defaults(Method::rkv);
  r.compression.budget = 64;
  r.compression.buffer = 16;
  r.on_compression = [&trace](const CompressionEvent& e) { trace.record(e); };
  PreparedRequest p = engine.prepare(r);
  const std::vector<int> prompt = p.prompt;
  trace.begin(p, *model_);
  engine.submit(std::move(p), {.on_token =
                                   [&trace](const TokenEvent& e) {
                                     if (e.token >= 0) trace.token(e.token);
                                   },
                               .on_done = {}});
  engine.run_until_idle();
  const Completion c = engine.take_completions().at(0);
  trace.end(c);
  ASSERT_GT(c.compressions, 0);

  const std::vector<json> lines = lines_of(text);
  EXPECT_EQ(static_cast<std::int64_t>(lines.size()), trace.lines());
  const json& header = lines.front();
  EXPECT_EQ(header["type"], "header");
  EXPECT_EQ(header["format"], "rkv-trace");
  EXPECT_EQ(header["version"], 2);
  EXPECT_EQ(header["method"], "rkv");
  EXPECT_EQ(header["budget"], 64);
  EXPECT_EQ(header["buffer"], 16);
  EXPECT_EQ(header["layers"], model_->config().num_layers);
  EXPECT_EQ(header["kv_heads"], model_->config().num_kv_heads);
  EXPECT_EQ(header["prompt_tokens"], prompt.size());
  EXPECT_EQ(lines.back()["type"], "end");
  EXPECT_EQ(lines.back()["generated_tokens"], c.tokens.size());
  EXPECT_EQ(lines.back()["compressions"], c.compressions);

  std::vector<int> ids;
  std::string all_text;
  std::int64_t records = 0;
  std::map<int, int> previous_step;  // per KV head
  for (const json& l : lines) {
    if (l["type"] == "tokens") {
      ASSERT_EQ(l["start"], ids.size());
      for (std::size_t j = 0; j < l["ids"].size(); ++j) {
        ids.push_back(l["ids"][j].get<int>());
        all_text += l["text"][j].get<std::string>();
      }
    } else if (l["type"] == "compression") {
      ++records;
      const auto kept = l["kept_positions"].get<std::vector<int>>();
      // R-KV keeps exactly its budget (ALGORITHMS.md 1): a compression sees the budget plus
      // the tokens since the previous one (at most the buffer), the first one the prompt.
      const int step = l["step"].get<int>();
      if (step == static_cast<int>(prompt.size()))
        EXPECT_EQ(l["n_before"], prompt.size());
      else
        EXPECT_EQ(l["n_before"], 64 + step - previous_step[l["head"].get<int>()]);
      EXPECT_LE(l["n_before"], 64 + 16);
      if (l["layer"] == model_->config().num_layers - 1) previous_step[l["head"].get<int>()] = step;
      EXPECT_EQ(kept.size(), 64u);
      EXPECT_EQ(l["n_after"], 64);
      EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
      EXPECT_LT(kept.back(), l["step"].get<int>());
      // The window's newest tokens are never evicted.
      EXPECT_EQ(kept.back(), l["step"].get<int>() - 1);
    }
  }
  // One line per (compression, layer, KV head); the completion counts layer compressions.
  EXPECT_EQ(records, c.compressions * model_->config().num_kv_heads);
  std::vector<int> expected = prompt;
  expected.insert(expected.end(), c.tokens.begin(), c.tokens.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(all_text, tokenizer_->decode(expected));

  const viz::TraceSummary s = viz::check_trace(text);
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(s.method, "rkv");
  EXPECT_EQ(s.layers, model_->config().num_layers);
  EXPECT_EQ(s.kv_heads, model_->config().num_kv_heads);
  EXPECT_EQ(s.tokens, static_cast<std::int64_t>(expected.size()));
  EXPECT_EQ(s.records, records);
  EXPECT_EQ(s.compressions, c.compressions / model_->config().num_layers);
  EXPECT_TRUE(s.ended);
}

const std::string kHeader =
    R"({"type":"header","format":"rkv-trace","version":2,"method":"rkv","budget":2,"buffer":1,"window":1,"layers":1,"kv_heads":2,"prompt_tokens":2,"model":"m"})";
const std::string kTokens =
    R"({"type":"tokens","start":0,"ids":[5,6,7,8],"text":["a","b","c","d"]})";
const std::string kComp0 =
    R"({"type":"compression","step":3,"layer":0,"head":0,"n_before":3,"n_after":2,"kept_positions":[0,2]})";
const std::string kComp1 =
    R"({"type":"compression","step":3,"layer":0,"head":1,"n_before":3,"n_after":2,"kept_positions":[1,2]})";

TEST(TraceCheck, AWellFormedTraceAndAVersionOneTrace) {
  const viz::TraceSummary s = viz::check_trace(kHeader + "\n" + kTokens + "\n" + kComp0 + "\n" +
                                               kComp1 + "\n" + R"({"type":"end"})" + "\n");
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.records, 2);
  EXPECT_EQ(s.compressions, 1);
  EXPECT_TRUE(s.ended);
  // Version 1: compression lines without "type" or header; the shape comes from the records.
  const viz::TraceSummary v1 = viz::check_trace(
      R"({"step":3,"layer":2,"head":1,"method":"snapkv","n_before":3,"n_after":1,"kept_positions":[2]})"
      "\n");
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v1.method, "snapkv");
  EXPECT_EQ(v1.layers, 3);
  EXPECT_EQ(v1.kv_heads, 2);
  EXPECT_EQ(v1.tokens, 0);
  EXPECT_FALSE(v1.ended);
}

TEST(TraceCheck, MalformedTracesNameTheLineAndTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "the trace is empty"},
      {"{\"type\":\"header\"", "line 1: not JSON"},
      {"[1,2]", "line 1: a record must be a JSON object"},
      {R"({"type":"sample"})", "line 1: unknown record type \"sample\""},
      {kTokens + "\n" + kHeader, "line 2: the header must be the first line"},
      {R"({"type":"header","format":"other","version":2,"layers":1,"kv_heads":1})",
       "not an rkv trace"},
      // Found by fuzz/viz_trace.cpp: a format of another type threw past the checker.
      {R"({"type":"header","format":7,"version":2,"layers":1,"kv_heads":1})", "not an rkv trace"},
      {R"({"type":"header","format":"rkv-trace","version":3,"layers":1,"kv_heads":1})",
       "line 1: trace version 3 is newer than this rkv reads (2)"},
      {R"({"type":"header","format":"rkv-trace","version":2,"layers":70000,"kv_heads":1})",
       "\"layers\" is 70000, outside [1, 65536]"},
      {R"({"type":"header","format":"rkv-trace","version":2,"layers":1024,"kv_heads":1024})",
       "too many caches to draw"},
      {R"({"type":"tokens","start":1,"ids":[1]})", "tokens start at position 1, expected 0"},
      {R"({"type":"tokens","start":0,"ids":[1,2],"text":["a"]})",
       "\"text\" must be a list as long as \"ids\""},
      {R"({"type":"tokens","start":0,"ids":[-1]})", "\"ids\" must hold token ids"},
      {R"({"type":"compression","step":3,"layer":0,"head":0,"kept_positions":[2,1]})",
       "\"kept_positions\" must be ascending positions before the step (3)"},
      {R"({"type":"compression","step":3,"layer":0,"head":0,"kept_positions":[1,3]})",
       "must be ascending positions before the step"},
      {R"({"type":"compression","step":3,"layer":0,"head":0,"n_after":3,"kept_positions":[1]})",
       "\"n_after\" is not the number of kept positions"},
      {R"({"type":"compression","layer":0,"head":0,"kept_positions":[]})",
       "\"step\" must be an integer"},
      {kHeader + "\n" +
           R"({"type":"compression","step":3,"layer":1,"head":0,"kept_positions":[1]})",
       "line 2: \"layer\" is 1, outside [0, 0]"},
      {R"({"type":"compression","step":3,"layer":0,"head":0,"kept_positions":"1,2"})",
       "\"kept_positions\" must be a list"},
  };
  for (const auto& [text, message] : cases) {
    try {
      viz::check_trace(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << "for: " << text << "\ngot: " << e.what() << "\nexpected: " << message;
    }
  }
}

TEST(VizPage, TracesAreEmbeddedSoNoTokenTextCanCloseTheScript) {
  const std::string tokens =
      R"({"type":"tokens","start":0,"ids":[1,2],"text":["</script><b>x</b>","<!--"]})";
  const std::string trace = kHeader + "\n" + tokens + "\n";
  viz::check_trace(trace);
  const std::string page = viz::render_page({{"a \"<quoted>\" & label", trace}, {"b", trace}});
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  // One <script> block per trace, plus the page's own script.
  std::size_t blocks = 0;
  for (std::size_t at = page.find("class=\"rkv-trace\""); at != std::string::npos;
       at = page.find("class=\"rkv-trace\"", at + 1))
    ++blocks;
  EXPECT_EQ(blocks, 2u);
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_EQ(page.find("<!--\""), std::string::npos);
  EXPECT_NE(page.find("data-label=\"a &quot;&lt;quoted&gt;&quot; &amp; label\""),
            std::string::npos);
  // The embedded text is the trace with '<' written as \u003c, which JSON reads back as '<'.
  const std::size_t begin = page.find('>', page.find("class=\"rkv-trace\"")) + 2;
  const std::string embedded = page.substr(begin, page.find("</script>", begin) - begin);
  EXPECT_EQ(embedded.find('<'), std::string::npos);
  EXPECT_EQ(json::parse(lines_of(embedded).at(1).dump()), json::parse(tokens));
  // No network: nothing in the page refers to another resource.
  for (const char* fetch : {"src=", "href=", "http://", "https://", "fetch(", "import "})
    EXPECT_EQ(page.find(fetch), std::string::npos) << fetch;
}

}  // namespace
}  // namespace rkv

namespace rkv {
namespace {

int run_rkv(const std::string& args, const std::filesystem::path& log, std::string* output) {
  const int status =
      std::system((test::rkv_binary() + " " + args + " > '" + log.string() + "' 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *output = ss.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(VizCommand, WritesAPageOrSaysWhichLineOfWhichTraceIsWrong) {
  test::TempDir dir;
  const auto good = dir.path() / "good.jsonl";
  const auto bad = dir.path() / "bad.jsonl";
  std::ofstream(good) << kHeader << "\n" << kTokens << "\n" << kComp0 << "\n";
  std::ofstream(bad) << kHeader << "\n"
                     << R"({"type":"tokens","start":3,"ids":[1]})"
                     << "\n";
  const auto page = dir.path() / "page.html";
  const auto log = dir.path() / "log.txt";
  std::string out;
  EXPECT_EQ(
      run_rkv("viz " + good.string() + " " + good.string() + " -o " + page.string(), log, &out), 0)
      << out;
  EXPECT_NE(out.find("trace version 2, rkv, 1 layers x 2 KV heads, 4 tokens, 1 compressions"),
            std::string::npos)
      << out;
  EXPECT_TRUE(std::filesystem::exists(page));
  EXPECT_EQ(run_rkv("viz " + bad.string() + " -o " + (dir.path() / "bad.html").string(), log, &out),
            1);
  EXPECT_NE(out.find("bad.jsonl: line 2: tokens start at position 3, expected 0"),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "bad.html"));
  EXPECT_EQ(run_rkv("viz " + good.string() + " " + good.string() + " " + good.string() + " -o " +
                        page.string(),
                    log, &out),
            1);
  EXPECT_NE(out.find("give one trace, or two"), std::string::npos) << out;
}

}  // namespace
}  // namespace rkv
