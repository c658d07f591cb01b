// The server's pure parts: splitting reasoning from content as text streams in, and turning
// OpenAI request bodies into engine requests (every invalid body a 400 naming the field).
#include <gtest/gtest.h>

#include <set>

#include "server/openai_api.h"
#include "server/reasoning.h"

namespace rkv::server {
namespace {

// Feeds `text` one piece of `piece` bytes at a time and joins the output.
ReasoningSplitter::Delta split(const std::string& text, bool starts_in_reasoning,
                               std::size_t piece) {
  ReasoningSplitter s(starts_in_reasoning);
  ReasoningSplitter::Delta all;
  for (std::size_t i = 0; i < text.size(); i += piece) {
    const auto d = s.push(std::string_view(text).substr(i, piece));
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  const auto d = s.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

TEST(ReasoningSplitter, SplitsAtTheMarkersWhateverThePieces) {
  for (std::size_t piece : {1u, 2u, 3u, 7u, 100u}) {
    // Qwen3: the model opens the block itself.
    auto d = split("<think>\nLet me add.\n2+2=4\n</think>\n\nThe answer is 4.", false, piece);
    EXPECT_EQ(d.reasoning, "Let me add.\n2+2=4\n") << piece;
    EXPECT_EQ(d.content, "The answer is 4.") << piece;
    // DeepSeek-R1: the template opened it in the prompt.
    d = split("First, 17*24 = 408.\n</think>\n\n**408**", true, piece);
    EXPECT_EQ(d.reasoning, "First, 17*24 = 408.\n") << piece;
    EXPECT_EQ(d.content, "**408**") << piece;
    // No reasoning block: all content, including text that merely starts like a marker.
    d = split("<thin ice> is not a marker", false, piece);
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "<thin ice> is not a marker") << piece;
    // A chain cut by the length limit is all reasoning, a partial marker included.
    d = split("still thinking </thi", true, piece);
    EXPECT_EQ(d.reasoning, "still thinking </thi") << piece;
    EXPECT_EQ(d.content, "");
  }
}

TEST(ReasoningSplitter, HoldsBackOnlyWhatMayBeAMarker) {
  ReasoningSplitter s(true);
  EXPECT_EQ(s.push("a < b").reasoning, "a < b");
  EXPECT_EQ(s.push(" so </").reasoning, " so ");  // "</" may start "</think>"
  const auto d = s.push("think>\n\nyes");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "yes");
  EXPECT_TRUE(s.finish().empty());
}

const RequestDefaults kDefaults;

ParsedRequest parse(const std::string& body, bool chat = true) {
  return parse_completion_request(body, chat, kDefaults, 1234);
}

std::optional<KvDtype> p_dtype(const std::string& body) {
  return parse(body, false).request.kv_dtype;
}

// The status and the offending field of a body that must be refused.
std::pair<int, std::string> refusal(const std::string& body, bool chat = true) {
  try {
    parse(body, chat);
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {0, "accepted"};
}

TEST(OpenAiRequest, ParsesChatBodies) {
  const ParsedRequest p = parse(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
      "max_completion_tokens": 77, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
      "seed": 9, "stop": "END", "n": 3, "stream": true, "stream_options": {"include_usage": true},
      "kv": {"method": "rkv", "budget": 256, "buffer": 32, "lambda": 0.2}})");
  EXPECT_TRUE(p.chat);
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.request.messages.size(), 2u);
  EXPECT_EQ(p.request.messages[0].role, "system");
  EXPECT_EQ(p.request.messages[1].content, "Hi there");
  EXPECT_EQ(p.request.max_new_tokens, 77);
  EXPECT_TRUE(p.max_tokens_given);
  EXPECT_TRUE(p.request.strict_length);
  EXPECT_EQ(p.request.sampling.temperature, 0.0f);
  EXPECT_EQ(p.request.sampling.top_p, 0.5f);
  EXPECT_EQ(p.request.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(p.request.sampling.min_p, 0.1f);
  EXPECT_EQ(p.request.sampling.seed, 9u);
  EXPECT_EQ(p.request.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(p.n, 3);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.request.compression.method, Method::rkv);
  EXPECT_EQ(p.request.compression.budget, 256);
  EXPECT_EQ(p.request.compression.buffer, 32);
  EXPECT_FLOAT_EQ(p.request.compression.lambda, 0.2f);
}

TEST(OpenAiRequest, ChatTemplateKwargsReachTheRequest) {
  const ParsedRequest p = parse(R"({"messages": [{"role": "user", "content": "Hi"}],
      "chat_template_kwargs": {"enable_thinking": false, "reasoning_effort": "low"}})");
  ASSERT_TRUE(p.request.chat_template_kwargs.is_object());
  EXPECT_EQ(p.request.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(p.request.chat_template_kwargs["reasoning_effort"], "low");
  EXPECT_TRUE(parse(R"({"messages": [{"role": "user", "content": "Hi"}]})")
                  .request.chat_template_kwargs.is_null());
  for (const char* bad :
       {R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": 1})",
        R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": ["x"]})"}) {
    try {
      parse(bad);
      ADD_FAILURE() << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "chat_template_kwargs");
    }
  }
  try {
    (void)parse_completion_request(R"({"prompt": "x", "chat_template_kwargs": {}})", false, {}, 1);
    ADD_FAILURE() << "completions took chat_template_kwargs";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "chat_template_kwargs");
  }
}

TEST(OpenAiRequest, DefaultsFillWhatTheBodyLeavesOut) {
  const ParsedRequest p = parse(R"({"prompt": [1, 2, 3]})", false);
  EXPECT_EQ(p.request.prompt_ids, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(p.request.max_new_tokens, kDefaults.max_tokens);
  EXPECT_FALSE(p.max_tokens_given);
  EXPECT_EQ(p.request.sampling.seed, 1234u);  // unseeded server: the random seed given
  EXPECT_EQ(p.request.compression.method, Method::fullkv);
  EXPECT_EQ(p.n, 1);
  EXPECT_FALSE(p.stream);
  EXPECT_TRUE(p.request.stop.empty());
  RequestDefaults with_stop;
  with_stop.stop = {"\n\n"};
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x"})", false, with_stop, 1).request.stop,
            with_stop.stop);
  EXPECT_EQ(
      parse_completion_request(R"({"prompt": "x", "stop": "y"})", false, with_stop, 1).request.stop,
      std::vector<std::string>{"y"});
  // Another method starts from its own preset (gkv: window 16, lambda 0.5).
  const ParsedRequest g = parse(R"({"prompt": "x", "kv": {"method": "gkv", "budget": 64}})", false);
  EXPECT_EQ(g.request.compression.window, 16);
  EXPECT_FLOAT_EQ(g.request.compression.lambda, 0.5f);
  const ParsedRequest lists = parse(
      R"({"prompt": "x", "kv": {"method": "skipkv", "budget": 64, "keywords": ["wait", "a,b"], "ratio": null, "think_only": true}})",
      false);
  EXPECT_EQ(lists.request.compression.keywords, (std::vector<std::string>{"wait", "a,b"}));
  EXPECT_TRUE(lists.request.compression.think_only);
  // kv.dtype picks the cache's element type; without it the server's default applies.
  EXPECT_FALSE(p_dtype(R"({"prompt": "x", "kv": {"method": "rkv", "budget": 64}})").has_value());
  EXPECT_EQ(p_dtype(R"({"prompt": "x", "kv": {"dtype": "q8_0"}})"), KvDtype::q8_0);
  EXPECT_EQ(p_dtype(R"({"prompt": "x", "kv": {"dtype": "bf16", "method": "rkv"}})"), KvDtype::bf16);
  EXPECT_EQ(parse(R"({"prompt": "x", "kv": {"dtype": "f16", "method": "rkv"}})", false)
                .request.compression.method,
            Method::rkv);
}

TEST(OpenAiResponse, KvReportNamesTheDtype) {
  Completion c;
  c.kv_dtype = KvDtype::bf16;
  c.kv_bytes = 1000;
  const auto kv = kv_report({c, c});
  EXPECT_EQ(kv["dtype"], "bf16");
  EXPECT_EQ(kv["kv_bytes"], 2000);
}

TEST(OpenAiRequest, EveryInvalidBodyIsA400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [{"role": "user", "content": "x"}])", ""},  // cut JSON
      {R"([1, 2])", ""},
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 17})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 1.5})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ""})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})",
       "stream_options"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
       "top_logprobs"},

      {R"({"messages": [{"role": "user", "content": "x"}], "kv": "rkv"})", "kv"},
      {R"({"messages": [{"role": "user", "content": "x"}], "kv": {"method": "magic"}})", "kv"},
      {R"({"messages": [{"role": "user", "content": "x"}], "kv": {"budgett": 5}})", "kv.budgett"},
      {R"({"messages": [{"role": "user", "content": "x"}], "kv": {"budget": {"a": 1}}})",
       "kv.budget"},
      {R"({"messages": [{"role": "user", "content": "x"}], "kv": {"dtype": "q4"}})", "kv.dtype"},
      {R"({"messages": [{"role": "user", "content": "x"}], "kv": {"dtype": 16}})", "kv.dtype"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": "xml"})",
       "reasoning_format"},
      // Sampling controls outside their ranges, or not in OpenAI's form.
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}})",
       "logit_bias.5"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"five": 1}})",
       "logit_bias.five"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-3": 1}})",
       "logit_bias.-3"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": [5, 100]})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 2.5})",
       "presence_penalty"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": "1"})",
       "frequency_penalty"},
      {R"({"messages": [{"role": "user", "content": "x"}], "repetition_penalty": 0})",
       "repetition_penalty"},
  };
  for (const auto& [body, param] : cases) {
    const auto [status, got] = refusal(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(got, param) << body;
  }
  EXPECT_EQ(parse(R"({"prompt": "x", "thinking_budget": 64})", false).request.thinking_budget, 64);
  EXPECT_EQ(
      parse(R"({"prompt": "x", "thinking_token_budget": 8, "thinking_budget_message": "Done."})",
            false)
          .request.thinking_budget,
      8);
  EXPECT_EQ(parse(R"({"prompt": "x"})", false).request.thinking_budget, -1);
  EXPECT_EQ(refusal(R"({"prompt": "x", "thinking_budget": -2})", false).second, "thinking_budget");
  EXPECT_EQ(
      refusal(R"({"prompt": "x", "thinking_budget": 1, "thinking_token_budget": 1})", false).second,
      "thinking_budget");
  EXPECT_EQ(refusal(R"({"prompt": "x", "thinking_budget_message": 3})", false).second,
            "thinking_budget_message");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 6})", false).second, "logprobs");
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 2})", false).request.logprobs, 2);
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
      "top_logprobs": 4})")
                .request.logprobs,
            4);
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})")
                .request.logprobs,
            -1);
  // The neutral values clients send by default ask for none.
  EXPECT_EQ(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 0})").request.logprobs,
      -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": false})", false).request.logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": null})", false).request.logprobs, -1);
  EXPECT_EQ(refusal(R"({"prompt": "x", "echo": true})", false).second, "echo");
  EXPECT_EQ(refusal(R"({"prompt": "x", "suffix": "y"})", false).second, "suffix");
  EXPECT_EQ(refusal(R"({"prompt": "x", "best_of": 2})", false).second, "best_of");
  // Their neutral values are accepted (clients send them by default).
  EXPECT_NO_THROW(parse(R"({"prompt": "x", "echo": false, "suffix": null, "best_of": 1,
      "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}})",
                        false));
  // The sampling controls, as the engine's SamplingParams (rkv/sampling.h) take them.
  const auto sampled = parse(R"({"prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -1,
      "repetition_penalty": 1.3, "logit_bias": {"5": 100, "17": -100, "3": 0.25}})",
                             false);
  const SamplingParams& s = sampled.request.sampling;
  EXPECT_EQ(s.presence_penalty, 0.5f);
  EXPECT_EQ(s.frequency_penalty, -1.0f);
  EXPECT_EQ(s.repetition_penalty, 1.3f);
  using Bias = std::set<std::pair<int, float>>;
  const Bias bias = {{5, 100.0f}, {17, -100.0f}, {3, 0.25f}};
  EXPECT_EQ(Bias(s.logit_bias.begin(), s.logit_bias.end()), bias);
  EXPECT_EQ(refusal(R"({"prompt": ""})", false).second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": ["a", "b"]})", false).second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, -2]})", false).second, "prompt");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}]})", false).second, "prompt");
}

}  // namespace
}  // namespace rkv::server
