// The HTTP server in-process on the shipped tiny model, through a real HTTP client (cpp-httplib)
// on loopback: 503 while loading, completions identical to the engine's alone whatever runs
// beside them, SSE framing, a client that goes away mid-stream cancels its request and frees
// its slot, a full queue answers 429, and invalid requests get OpenAI error objects. The
// ThreadSanitizer configuration runs these (scripts/test.sh).
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "core/thread_pool.h"
#include "engine/query_stats.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "server/server.h"
#include "shipped_model_test.h"
#include "test_util.h"
#include "viz/viz.h"

namespace rkv::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A server on a free loopback port, serving on a thread of its own.
class Running {
 public:
  explicit Running(ServerOptions o) : server_(std::move(o)) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.serve(); });
  }
  ~Running() {
    server_.stop();
    thread_.join();
  }
  Server& server() { return server_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    return c;
  }

 private:
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

class ServerTest : public test::ShippedModelTest {
 protected:
  static json body(const std::string& question, const std::string& method, int budget,
                   bool stream) {
    json b = {{"prompt", question}, {"max_tokens", 600}, {"temperature", 0}, {"stream", stream}};
    if (method != "fullkv")
      b["kv"] = {{"method", method}, {"budget", budget}, {"buffer", 16}};
    else
      b["kv"] = {{"method", "fullkv"}};
    return b;
  }

  // A server on a free port serving `engine` (started here), which must outlive it.
  static std::unique_ptr<Running> serve(Engine& engine) {
    ServerOptions o;
    o.port = 0;
    auto r = std::make_unique<Running>(o);
    engine.start();
    r->server().set_engine(&engine, "tiny", {});
    return r;
  }

  // What `request` gives on an engine of its own over the shipped model.
  Completion alone(const Request& request, EngineOptions options = {}) {
    Engine solo(*model_, tokenizer_.get(), pool_, std::move(options));
    solo.submit(solo.prepare(request));
    solo.run_until_idle();
    return solo.take_completions().at(0);
  }
};

// The events of an SSE body; fails the test on anything but `data: ...` events and comments.
std::vector<std::string> sse_events(const std::string& text) {
  std::vector<std::string> events;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t end = text.find("\n\n", i);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << text.substr(i);
    if (end == std::string::npos) break;
    const std::string event = text.substr(i, end - i);
    if (event.rfind(": ", 0) != 0) {
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      EXPECT_EQ(event.find('\n'), std::string::npos) << event;
      events.push_back(event.substr(6));
    }
    i = end + 2;
  }
  return events;
}

TEST_F(ServerTest, LoadingThenServingLikeTheEngineAlone) {
  ServerOptions o;
  o.port = 0;
  // The engine outlives the server (here and below): the server's handler threads, which prepare
  // requests with the engine, are joined before the engine goes.
  EngineOptions eo;
  Engine engine(*model_, tokenizer_.get(), pool_, eo);
  Running r(o);
  auto client = r.client();
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  auto early = client.Post("/v1/completions", R"({"prompt": "1:a"})", "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_EQ(json::parse(early->body)["error"]["code"], "loading");

  engine.start();
  r.server().set_engine(&engine, "tiny", {});
  EXPECT_EQ(client.Get("/health")->status, 200);
  EXPECT_EQ(json::parse(client.Get("/v1/models")->body)["data"][0]["id"], "tiny");

  const auto qs = test::held_out_problems(6);
  const std::vector<std::pair<std::string, int>> methods = {
      {"fullkv", 0}, {"rkv", 96}, {"snapkv", 64}, {"gkv", 160}, {"h2o", 96}, {"streamingllm", 64}};
  // What each request gives on the engine alone.
  std::vector<std::string> alone;
  {
    Engine solo(*model_, tokenizer_.get(), pool_);
    for (std::size_t i = 0; i < qs.size(); ++i) {
      Request q;
      q.text = qs[i];
      q.max_new_tokens = 600;
      q.sampling.temperature = 0;
      q.compression = parse_kv_object(body(qs[i], methods[i].first, methods[i].second, false)["kv"],
                                      CompressionParams::defaults(Method::fullkv));
      solo.submit(solo.prepare(q));
      solo.run_until_idle();
      alone.push_back(solo.take_completions().at(0).text);
    }
  }
  // All at once over HTTP, half streaming.
  std::vector<std::string> got(qs.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < qs.size(); ++i) {
    threads.emplace_back([&, i] {
      const bool stream = i % 2 == 1;
      auto c = r.client();
      auto res =
          c.Post("/v1/completions", body(qs[i], methods[i].first, methods[i].second, stream).dump(),
                 "application/json");
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      if (!stream) {
        const json j = json::parse(res->body);
        got[i] = j["choices"][0]["text"];
        EXPECT_EQ(j["kv"]["method"], methods[i].first);
        EXPECT_EQ(
            j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(),
            j["usage"]["total_tokens"].get<int>());
        return;
      }
      EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
      const auto events = sse_events(res->body);
      ASSERT_FALSE(events.empty());
      EXPECT_EQ(events.back(), "[DONE]");
      for (std::size_t e = 0; e + 1 < events.size(); ++e) {
        const json chunk = json::parse(events[e]);
        EXPECT_EQ(chunk["object"], "text_completion");
        got[i] += chunk["choices"][0]["text"].get<std::string>();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(got[i], alone[i]) << methods[i].first;
  engine.stop();
}

TEST_F(ServerTest, ADisconnectedStreamIsCancelledAndItsSlotFreed) {
  ServerOptions o;
  o.port = 0;
  Engine engine(*model_, tokenizer_.get(), pool_);
  Running r(o);
  engine.start();
  r.server().set_engine(&engine, "tiny", {});
  json b = body(test::held_out_problems(1)[0], "rkv", 96, true);
  b["ignore_eos"] = true;
  b["max_tokens"] = 1900;
  int chunks = 0;
  auto c = r.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = b.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) {
    return ++chunks < 3;  // then the client hangs up
  };
  auto res = c.send(req);
  EXPECT_FALSE(res);  // the client cancelled the transfer
  // The server notices at its next write and cancels: the slot is free well before 1900 tokens.
  for (int i = 0; i < 1000 && engine.stats().cancelled == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.kv_bytes_in_use, 0u);
  EXPECT_LT(s.generated_tokens, 1900);
  const std::string metrics = r.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("rkv_requests_cancelled_total 1\n"), std::string::npos) << metrics;
  engine.stop();
}

TEST_F(ServerTest, AFullQueueAnswers429AndBadRequestsGetErrorObjects) {
  ServerOptions o;
  o.port = 0;
  o.queue_limit = 1;
  // The engine outlives the server: the server's handler threads (which prepare requests with the
  // engine) are joined before the engine goes.
  Engine engine(*model_, tokenizer_.get(), pool_);
  Running r(o);
  r.server().set_engine(&engine, "tiny", {});  // not started yet: submissions stay queued
  const json first = body(test::held_out_problems(1)[0], "fullkv", 0, false);
  std::thread waiting([&] {
    auto res = r.client().Post("/v1/completions", first.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  });
  for (int i = 0; i < 1000 && engine.stats().waiting == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(engine.stats().waiting, 1);
  auto busy = r.client().Post("/v1/completions", first.dump(), "application/json");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 429);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(busy->body)["error"]["code"], "queue_full");
  engine.start();
  waiting.join();

  auto client = r.client();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/v1/chat/completions", "{not json"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "kv": {"method": "rkv", "budget": 2}})"},
      {"/v1/completions", json{{"prompt", std::string(30000, '7')}}.dump()},
      {"/v1/completions", R"({"prompt": "1:a", "max_tokens": 2048})"},
      {"/v1/completions", R"({"prompt": [1, 99999]})"},
      {"/tokenize", R"({"content": 5})"},
      {"/detokenize", R"({"tokens": [-1]})"},
  };
  for (const auto& [path, text] : bad) {
    auto res = client.Post(path, text, "application/json");
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 400) << path << " " << text.substr(0, 80) << " -> " << res->body;
    const json err = json::parse(res->body)["error"];
    EXPECT_TRUE(err["message"].is_string() && !err["message"].get<std::string>().empty());
    EXPECT_EQ(err["type"], "invalid_request_error");
    // Settings that parse but mean nothing together are refused by Engine::prepare, the one
    // place a request is validated, which names the field.
    if (text.find("\"budget\": 2") != std::string::npos) {
      EXPECT_EQ(err["param"], "kv") << res->body;
    }
    if (text.find("99999") != std::string::npos) {
      EXPECT_EQ(err["param"], "prompt") << res->body;
    }
  }
  // Browsers' preflight requests are answered, and every response allows other origins.
  auto preflight = client.Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  auto missing = client.Get("/v1/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
  // The server still serves after all that.
  auto ok = client.Post("/tokenize", R"({"content": "2:a\n"})", "application/json");
  ASSERT_EQ(ok->status, 200);
  const json ids = json::parse(ok->body)["tokens"];
  auto back = client.Post("/detokenize", json{{"tokens", ids}}.dump(), "application/json");
  EXPECT_EQ(json::parse(back->body)["content"], "2:a\n");
  engine.stop();
}

// Issue 31's inputs at the level of requests: invalid UTF-8 in any field is a 400 naming the
// field (it used to abort the process), switches must be JSON booleans, and a prompt far longer
// than the context is refused before it is tokenized.
TEST_F(ServerTest, HostileRequestsGetA400NamingTheFieldAndTheServerGoesOn) {
  ServerOptions o;
  o.port = 0;
  EngineOptions eo;
  eo.context_size = 512;
  Engine engine(*model_, tokenizer_.get(), pool_, eo);
  Running r(o);
  engine.start();
  r.server().set_engine(&engine, "tiny", {});
  auto client = r.client();
  const std::string ff = "\xff";
  struct Case {
    std::string path, body, param;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", R"({"prompt": "1:a)" + ff + R"("})", "prompt"},
      {"/v1/completions", R"({"prompt": "1:a", "stop": ["x", "y)" + ff + R"("]})", "stop[1]"},
      {"/v1/completions", R"({"prompt": "1:a", "model": ")" + ff + R"("})", "model"},
      {"/v1/completions", R"({"prompt": "1:a", "kv": {"method": "r)" + ff + R"(kv"}})",
       "kv.method"},
      {"/v1/completions", R"({"prompt": "1:a", "x)" + ff + R"(": 1})", "x\ufffd (a key)"},
      {"/v1/chat/completions", R"({"messages": [{"role": "us)" + ff + R"(er", "content": "a"}]})",
       "messages[0].role"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "text", "text": ")" +
           std::string("\xc3(") + R"("}]}]})",
       "messages[0].content[0].text"},
      {"/tokenize", R"({"content": ")" + ff + R"("})", "content"},
      {"/v1/completions", R"({"prompt": "1:a", "kv": {"method": "rkv", "think_only": "yes"}})",
       "kv.think_only"},
      {"/v1/completions", R"({"prompt": "1:a", "logit_bias": {"99999999": 5}})", "logit_bias"},
  };
  for (const Case& c : cases) {
    auto res = client.Post(c.path, c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, 400) << c.body << " -> " << res->body;
    const json err = json::parse(res->body)["error"];
    if (c.param.find("(a key)") != std::string::npos)
      EXPECT_NE(err["param"].get<std::string>().find("(a key)"), std::string::npos) << res->body;
    else
      EXPECT_EQ(err["param"], c.param) << res->body;
  }
  // A 4 MiB prompt with a context of 512 is refused without tokenizing it.
  const auto t0 = std::chrono::steady_clock::now();
  auto big = client.Post("/v1/completions", json{{"prompt", std::string(4u << 20, 'a')}}.dump(),
                         "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_NE(big->body.find("at least"), std::string::npos) << big->body;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  // The path of a request that is not UTF-8.
  auto path = client.Get("/%ff");
  ASSERT_TRUE(path);
  EXPECT_EQ(path->status, 400);
  // After all of it the server still answers, with the output of a clean run.
  auto ok =
      client.Post("/v1/completions", R"({"prompt": "2:a", "max_tokens": 4, "temperature": 0})",
                  "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  engine.stop();
}

// TriAttention per request: the server uses the statistics its engine loaded (the shipped model's
// query_stats.safetensors); an engine without them answers 400 with param kv naming the command
// that computes them, and a prompt the budget cannot hold whole is a 400 too.
TEST_F(ServerTest, TriAttentionUsesTheEnginesQueryStats) {
  Engine bare(*model_, tokenizer_.get(), pool_);
  EngineOptions eo;
  eo.query_stats =
      load_query_stats(default_query_stats_path(test::shipped_model_dir().string()), *model_);
  Engine engine(*model_, tokenizer_.get(), pool_, eo);
  const std::string question = test::held_out_problems(1).at(0);
  json b = {{"prompt", question}, {"max_tokens", 300}, {"temperature", 0}};
  b["kv"] = {{"method", "triattention"}, {"budget", 128}, {"buffer", 16}, {"selection", "union"}};
  {
    const auto r = serve(bare);
    auto res = r->client().Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    const json err = json::parse(res->body)["error"];
    EXPECT_EQ(err["param"], "kv");
    EXPECT_NE(err["message"].get<std::string>().find("rkv calibrate"), std::string::npos);
    bare.stop();
  }
  const auto r = serve(engine);
  auto client = r->client();
  auto res = client.Post("/v1/completions", b.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json out = json::parse(res->body);
  EXPECT_EQ(out["kv"]["method"], "triattention");
  EXPECT_GT(out["kv"]["compressions"].get<int>(), 0) << out["kv"].dump();
  // The same request on the engine alone.
  Request q;
  q.text = question;
  q.max_new_tokens = 300;
  q.sampling.temperature = 0;
  q.compression = parse_kv_object(b["kv"], CompressionParams::defaults(Method::fullkv));
  EXPECT_EQ(q.compression.selection, TriSelection::union_all);
  EXPECT_EQ(out["choices"][0]["text"], alone(q, eo).text);
  b["kv"]["budget"] = 8;  // the prompt is longer
  auto small = client.Post("/v1/completions", b.dump(), "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 400) << small->body;
  EXPECT_EQ(json::parse(small->body)["error"]["param"], "kv");
  engine.stop();
}

// logit_bias through the engine: +100 on one token makes greedy decoding repeat it, -100 on the
// token greedy decoding picks first makes it pick another.
TEST_F(ServerTest, LogitBiasReachesTheSampler) {
  Engine engine(*model_, tokenizer_.get(), pool_);
  const auto r = serve(engine);
  auto client = r->client();
  const auto complete = [&](const json& bias) {
    json b = {{"prompt", {5, 6, 7}}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}};
    if (!bias.is_null()) b["logit_bias"] = bias;
    auto res = client.Post("/v1/completions", b.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    return res ? json::parse(res->body)["choices"][0]["text"].get<std::string>() : std::string();
  };
  const int forced = 42;
  EXPECT_EQ(complete({{std::to_string(forced), 100}}),
            tokenizer_->decode(std::vector<std::int32_t>{forced, forced, forced}, true));
  const std::string plain = complete(nullptr);
  Request q;
  q.prompt_ids = {5, 6, 7};
  q.max_new_tokens = 1;
  q.sampling.temperature = 0;
  q.ignore_eos = true;
  const int first = alone(q).tokens.at(0);
  const std::string banned = complete({{std::to_string(first), -100}});
  EXPECT_NE(banned, plain);
  EXPECT_NE(banned.rfind(tokenizer_->decode(std::vector<std::int32_t>{first}, true), 0), 0u)
      << "the banned first token still came first";
  engine.stop();
}

// logprobs in OpenAI's two shapes: chat's content list and completions' legacy object, whole and
// streamed. Greedy, so each chosen token is the most likely one; the tokens' texts join into the
// text; a stream carries the same entries, chunk by chunk.
TEST_F(ServerTest, LogprobsInBothShapes) {
  Engine engine(*model_, tokenizer_.get(), pool_);
  const auto r = serve(engine);
  auto client = r->client();
  const std::string question = test::held_out_problems(1).at(0);
  json chat = {{"messages", {{{"role", "user"}, {"content", question}}}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"logprobs", true},
               {"top_logprobs", 2}};
  auto res = client.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json out = json::parse(res->body);
  const json content = out["choices"][0]["logprobs"]["content"];  // a copy: out is reused
  ASSERT_EQ(content.size(), out["usage"]["completion_tokens"].get<std::size_t>());
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["token"], t["top_logprobs"][0]["token"]);
    EXPECT_EQ(t["logprob"], t["top_logprobs"][0]["logprob"]);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    std::string bytes;
    for (const json& b : t["bytes"]) bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(bytes, t["token"].get<std::string>());  // the tiny model's tokens are ASCII
  }
  json completion = {{"prompt", question}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}};
  res = client.Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  out = json::parse(res->body);
  const json lp = out["choices"][0]["logprobs"];
  std::string joined;
  for (std::size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<std::size_t>(), joined.size());
    joined += lp["tokens"][i].get<std::string>();
    ASSERT_EQ(lp["top_logprobs"][i].size(), 1u);
    EXPECT_EQ(lp["top_logprobs"][i].begin().value(), lp["token_logprobs"][i]);
  }
  EXPECT_EQ(joined, out["choices"][0]["text"]);
  // Without logprobs the field is null, as OpenAI's.
  completion.erase("logprobs");
  res = client.Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_TRUE(json::parse(res->body)["choices"][0]["logprobs"].is_null());
  // Streamed: each token's entry rides on a chunk, the same entries as without streaming.
  chat["stream"] = true;
  res = client.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json streamed_content = json::array();
  for (const std::string& e : sse_events(res->body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    const json& choice = chunk["choices"][0];
    if (choice.contains("logprobs") && !choice["logprobs"].is_null())
      for (const json& t : choice["logprobs"]["content"]) streamed_content.push_back(t);
  }
  EXPECT_EQ(streamed_content, content);
  completion["stream"] = true;
  completion["logprobs"] = 1;
  res = client.Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json tokens = json::array(), offsets = json::array();
  for (const std::string& e : sse_events(res->body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    const json& choice = chunk["choices"][0];
    if (!choice["logprobs"].is_null()) {
      for (const json& t : choice["logprobs"]["tokens"]) tokens.push_back(t);
      for (const json& at : choice["logprobs"]["text_offset"]) offsets.push_back(at);
    }
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  engine.stop();
}

TEST_F(ServerTest, AnApiKeyGuardsEveryEndpointButHealth) {
  ServerOptions o;
  o.port = 0;
  o.api_key = "sesame";
  Engine engine(*model_, tokenizer_.get(), pool_);
  Running r(o);
  engine.start();
  r.server().set_engine(&engine, "tiny", {});
  auto client = r.client();
  EXPECT_EQ(client.Get("/health")->status, 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    auto res = client.Get(path);
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "invalid_api_key");
  }
  const std::string body = R"({"prompt": "1:a\n", "max_tokens": 4, "temperature": 0})";
  EXPECT_EQ(client.Post("/v1/completions", body, "application/json")->status, 401);
  client.set_bearer_token_auth("wrong");
  EXPECT_EQ(client.Post("/v1/completions", body, "application/json")->status, 401);
  client.set_bearer_token_auth("sesame");
  EXPECT_EQ(client.Post("/v1/completions", body, "application/json")->status, 200);
  EXPECT_EQ(client.Get("/v1/models")->status, 200);
  engine.stop();
}

TEST_F(ServerTest, VizKeepsTheTracesOfTheLastRequests) {
  ServerOptions off;
  off.port = 0;
  Running plain(off);
  Engine engine(*model_, tokenizer_.get(), pool_);
  engine.start();
  plain.server().set_engine(&engine, "tiny", {});
  auto res = plain.client().Get("/viz/trace?id=cmpl-1");
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "viz_disabled");

  ServerOptions o;
  o.port = 0;
  o.viz_traces = 2;
  Running r(o);
  r.server().set_engine(&engine, "tiny", {});
  auto client = r.client();
  std::vector<std::string> ids;
  std::vector<int> generated;
  for (const char* method : {"snapkv", "rkv", "gkv"}) {
    auto done = client.Post("/v1/completions",
                            body(test::held_out_problems(1).at(0), method, 64, false).dump(),
                            "application/json");
    ASSERT_EQ(done->status, 200) << done->body;
    const json b = json::parse(done->body);
    ids.push_back(b["id"]);
    generated.push_back(b["usage"]["completion_tokens"]);
  }
  // Only the last two requests are kept.
  res = client.Get("/viz/trace?id=" + ids[0]);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "trace_not_found");
  for (int i = 1; i < 3; ++i) {
    res = client.Get("/viz/trace?id=" + ids[i]);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/x-ndjson");
    const viz::TraceSummary s = viz::check_trace(res->body);
    EXPECT_EQ(s.method, i == 1 ? "rkv" : "gkv");
    EXPECT_TRUE(s.ended);
    EXPECT_GT(s.compressions, 0);
    EXPECT_EQ(s.tokens,
              static_cast<std::int64_t>(
                  tokenizer_->encode(test::held_out_problems(1).at(0)).size() + generated[i]));
    res = client.Get("/viz?id=" + ids[i]);
    ASSERT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("class=\"rkv-trace\""), std::string::npos);
  }
  res = client.Get("/viz");
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->body.find(ids[0] + "<"), std::string::npos);
  EXPECT_NE(res->body.find("href=\"/viz?id=" + ids[2] + "\""), std::string::npos);
  EXPECT_EQ(client.Get("/viz?id=" + ids[2] + "&choice=x")->status, 400);
  EXPECT_EQ(client.Get("/viz?id=" + ids[2] + "&choice=1")->status, 404);
  engine.stop();
}

TEST(ServerReasoning, TheChainOfThoughtGoesToReasoningContent) {
  // A model with DeepSeek-R1's template: the prompt opens <think>, so its output is reasoning
  // until </think>; random weights rarely write </think>, and the split follows either way.
  const test::R1Checkpoint r1("r1");
  ThreadPool pool(2);
  Engine engine(*r1.model, &r1.tokenizer, pool);
  engine.start();
  ServerOptions o;
  o.port = 0;
  Running r(o);
  r.server().set_engine(&engine, "r1", {});
  json body = {{"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
               {"max_tokens", 40},
               {"temperature", 0},
               {"ignore_eos", true}};
  auto client = r.client();
  body["reasoning_format"] = "none";
  auto inline_res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(inline_res->status, 200) << inline_res->body;
  const json inline_json = json::parse(inline_res->body);
  const std::string raw = inline_json["choices"][0]["message"]["content"];
  EXPECT_FALSE(inline_json["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(inline_json["choices"][0]["message"].contains("reasoning"));

  body["reasoning_format"] = "parsed";
  auto parsed_res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(parsed_res->status, 200) << parsed_res->body;
  const json parsed = json::parse(parsed_res->body);
  const json message = parsed["choices"][0]["message"];
  const std::size_t close = raw.find("</think>");
  std::string expected_reasoning = raw.substr(0, close);
  expected_reasoning.erase(0, expected_reasoning.find_first_not_of("\r\n"));
  EXPECT_EQ(message.value("reasoning_content", std::string()), expected_reasoning);
  EXPECT_EQ(message.value("reasoning", std::string()), expected_reasoning);  // vLLM's name
  const int completion = parsed["usage"]["completion_tokens"];
  const int reasoning = parsed["usage"]["completion_tokens_details"]["reasoning_tokens"];
  EXPECT_EQ(completion, 40);
  if (close == std::string::npos) {
    EXPECT_EQ(message["content"], "");
    EXPECT_EQ(reasoning, completion);
  } else {
    EXPECT_LT(reasoning, completion);
  }

  // Streamed, the reasoning arrives as reasoning_content deltas and adds up to the same text.
  body["stream"] = true;
  auto streamed = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(streamed->status, 200);
  std::string reasoning_text, content_text;
  for (const std::string& e : sse_events(streamed->body)) {
    if (e == "[DONE]") continue;
    const json delta = json::parse(e)["choices"][0]["delta"];
    EXPECT_EQ(delta.value("reasoning", std::string()),
              delta.value("reasoning_content", std::string()));
    reasoning_text += delta.value("reasoning_content", std::string());
    content_text += delta.value("content", std::string());
  }
  EXPECT_EQ(reasoning_text, message.value("reasoning_content", std::string()));
  EXPECT_EQ(content_text, message["content"].get<std::string>());

  // A thinking budget of 6 (vLLM's field name): the thought is closed after six tokens and the
  // rest of the 40 is the answer, in content.
  body["stream"] = false;
  body["thinking_token_budget"] = 6;
  auto budgeted = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(budgeted->status, 200) << budgeted->body;
  const json b = json::parse(budgeted->body);
  const json& bm = b["choices"][0]["message"];
  EXPECT_FALSE(bm.value("reasoning_content", std::string()).empty());
  EXPECT_FALSE(bm["content"].get<std::string>().empty()) << budgeted->body;
  EXPECT_EQ(b["usage"]["completion_tokens"], 40);
  EXPECT_LT(b["usage"]["completion_tokens_details"]["reasoning_tokens"].get<int>(), 15);
  engine.stop();
}

}  // namespace
}  // namespace rkv::server
