// Tokenizer tests: the Qwen3 golden cases (vocab.json + merges.txt format), a hand-worked
// tokenizer.json (Llama-3 style digit groups, BOS), streaming decoding, long inputs, invalid
// UTF-8 and the errors a user can cause.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "rkv/chat_template.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TokenizerTempDir {
 public:
  TokenizerTempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("rkv-tok-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TokenizerTempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no rkv::Error thrown)";
}

// ---- Qwen3 goldens -----------------------------------------------------------------------------

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path shared = test::shared_dir();
    if (shared.empty()) return;
    dir_ = shared / "golden" / "tokenizer" / "qwen3_0.6b";
    const auto start = std::chrono::steady_clock::now();
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(dir_));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ info ] loaded the Qwen3 tokenizer (151k tokens, 151k merges) in %.1f ms\n", ms);
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  void SetUp() override {
    if (!tokenizer_) {
      GTEST_SKIP() << "../shared (the golden files) is not beside the repository; set "
                      "RKV_SHARED_DIR to run this test";
    }
  }
  static const Tokenizer& tok() { return *tokenizer_; }
  static inline fs::path dir_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(QwenTokenizer, GoldenCasesMatchExactly) {
  const json golden = test::read_json(dir_ / "golden_tokenizer.json");
  ASSERT_EQ(golden["cases"].size(), 66u);
  int index = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE("case " + std::to_string(index++) + ": " + c["text"].dump());
    const std::vector<int32_t> ids = tok().encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok().decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(tok().decode(ids, true), c["decoded_skip_special"].get<std::string>());
    const auto tokens = c["tokens"].get<std::vector<std::string>>();
    ASSERT_EQ(tokens.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok().token_string(ids[i]), tokens[i]);
  }
}

TEST_F(QwenTokenizer, VocabularyFacts) {
  EXPECT_EQ(tok().vocab_size(), 151669);
  EXPECT_EQ(tok().bos_id(), -1);
  EXPECT_FALSE(tok().adds_bos());
  EXPECT_EQ(tok().eos_ids(), (std::vector<int32_t>{151643, 151645}));
  EXPECT_TRUE(tok().is_eos(151645));
  EXPECT_EQ(tok().token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok().token_id("Ġworld"), 1879);
  EXPECT_EQ(tok().token_id("no such token"), -1);
  EXPECT_TRUE(tok().is_special(151644));
  EXPECT_FALSE(tok().is_special(151667));  // <think> is added but not special
  EXPECT_TRUE(tok().is_added(151667));
  EXPECT_FALSE(tok().is_added(1879));
  EXPECT_EQ(tok().token_text(1879), " world");
  EXPECT_FALSE(tok().chat_template_text().empty());
  EXPECT_EQ(tok().encode("Hello world", false), (std::vector<int32_t>{9707, 1879}));
}

TEST_F(QwenTokenizer, OutOfRangeIdsAreErrors) {
  EXPECT_THROW(tok().decode({9707, 151669}), Error);
  EXPECT_THROW(tok().decode({-1}), Error);
  EXPECT_THROW(tok().token_text(1 << 30), Error);
  EXPECT_THROW(tok().is_special(-5), Error);
  EXPECT_NE(error_message([&] { tok().decode({200000}); }).find("200000"), std::string::npos);
}

TEST_F(QwenTokenizer, LongRunsAreFastAndRoundTrip) {
  const std::vector<std::string> texts = {std::string(10000, '7'), std::string(20000, 'a'),
                                          std::string(100000, ' '), std::string(50000, '\n'),
                                          std::string(30000, '!')};
  for (const std::string& text : texts) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok().encode(text);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(ms, 2000.0) << text.size() << " bytes of '" << text[0] << "'";
    EXPECT_EQ(tok().decode(ids), text);
  }
  EXPECT_EQ(tok().encode(std::string(10000, '7')).size(), 10000u);  // one digit per token
}

TEST_F(QwenTokenizer, InvalidUtf8IsReplacedNotFatal) {
  const std::string bad = "ok\xff\xfe mid\xe4\xbd tail\xc0\xaf end\xf0\x9f";
  const std::vector<int32_t> ids = tok().encode(bad);
  EXPECT_EQ(tok().decode(ids),
            "ok\xEF\xBF\xBD\xEF\xBF\xBD mid\xEF\xBF\xBD tail\xEF\xBF\xBD\xEF\xBF\xBD "
            "end\xEF\xBF\xBD");
}

TEST_F(QwenTokenizer, StreamingDecoderHoldsBackSplitCharacters) {
  const std::string text = "A 🦩 and 😀👍🏽 with 你好 𝔘.";
  const std::vector<int32_t> ids = tok().encode(text);
  StreamingDecoder stream(tok());
  std::string joined;
  bool saw_hold = false;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    saw_hold = saw_hold || stream.pending_bytes() > 0;
    // Every piece is complete UTF-8 on its own.
    EXPECT_EQ(tok().decode(tok().encode(piece, false)), piece);
    joined += piece;
  }
  joined += stream.flush();
  EXPECT_TRUE(saw_hold) << "expected at least one character split across tokens";
  EXPECT_EQ(joined, text);
}

TEST_F(QwenTokenizer, StreamingSkipsSpecialTokensWhenAsked) {
  const std::vector<int32_t> ids = tok().encode("<|im_start|>hi<think><|im_end|>");
  StreamingDecoder stream(tok(), true);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  EXPECT_EQ(out + stream.flush(), "hi<think>");
}

// ---- a hand-made tokenizer.json ----------------------------------------------------------------

// GPT-2's bytes_to_unicode, written out independently of the library.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Ids 0-255 are the bytes (id = byte value); 256.. are merges; 264.. added tokens.
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},  {"he", "ll"}, {"hell", "o"},
      {"1", "2"}, {"12", "3"}, {"4", "5"},   {"Ġ", "w"}};
  json merge_list = json::array();
  int id = 256;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    vocab[a + b] = id++;
    // Both forms of a merge: "a b" and ["a", "b"].
    if (i % 2 == 0) {
      merge_list.push_back(a + " " + b);
    } else {
      merge_list.push_back(json::array({a, b}));
    }
  }
  json added = json::array();
  added.push_back({{"id", 264}, {"content", "<|begin_of_text|>"}, {"special", true}});
  added.push_back({{"id", 265}, {"content", "<|eot_id|>"}, {"special", true}});
  added.push_back({{"id", 266}, {"content", "<think>"}, {"special", false}});
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kLlama3Regex}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", false},
                                        {"trim_offsets", true},
                                        {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens",
         {{"<|begin_of_text|>",
           {{"id", "<|begin_of_text|>"}, {"ids", {264}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}}};
}

TEST(TokenizerJson, HandWorkedEncodings) {
  TokenizerTempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("tokenizer_config.json",
            R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"})");
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.vocab_size(), 267);
  EXPECT_EQ(tok.bos_id(), 264);
  EXPECT_TRUE(tok.adds_bos());
  EXPECT_EQ(tok.eos_ids(), std::vector<int32_t>{265});

  // "hello" merges to one token; " " is its own word before digits; digits group by three.
  EXPECT_EQ(tok.encode("hello 12345"), (std::vector<int32_t>{264, 259, 32, 261, 262}));
  EXPECT_EQ(tok.encode("hello 12345", false), (std::vector<int32_t>{259, 32, 261, 262}));
  EXPECT_EQ(tok.encode("1234567", false), (std::vector<int32_t>{261, 262, 54, 55}));
  EXPECT_EQ(tok.encode("hello world", false), (std::vector<int32_t>{259, 263, 111, 114, 108, 100}));
  // No second BOS when the text already starts with it.
  EXPECT_EQ(tok.encode("<|begin_of_text|>hi"), (std::vector<int32_t>{264, 104, 105}));
  EXPECT_EQ(tok.encode("<think>hello<|eot_id|>"), (std::vector<int32_t>{264, 266, 259, 265}));
  EXPECT_EQ(tok.decode({264, 266, 259, 265}), "<|begin_of_text|><think>hello<|eot_id|>");
  EXPECT_EQ(tok.decode({264, 266, 259, 265}, true), "<think>hello");
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{264});
  EXPECT_EQ(tok.token_string(32), "Ġ");
  EXPECT_EQ(tok.token_text(32), " ");
  EXPECT_EQ(tok.token_string(259), "hello");
  EXPECT_EQ(tok.token_id("Ġw"), 263);
  EXPECT_EQ(tok.chat_template_text(),
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}");
  EXPECT_EQ(tok.bos_token(), std::optional<std::string>("<|begin_of_text|>"));
  EXPECT_EQ(tok.eos_token(), std::optional<std::string>("<|eot_id|>"));
  // The template writes the BOS itself: the prompt is encoded without the post-processor's, and
  // encoding it with add_special would not double it either. The special tokens it prints are
  // their single ids.
  const ChatTemplate t = resolve_chat_template(tok);
  ASSERT_EQ(t.kind, ChatTemplateKind::kJinja);
  EXPECT_FALSE(t.add_special_tokens());
  const std::string prompt = render_chat(t, {{"user", "hi"}}, true);
  EXPECT_EQ(prompt, "<|begin_of_text|>hi<|eot_id|>");
  EXPECT_EQ(tok.encode(prompt, false), (std::vector<int32_t>{264, 104, 105, 265}));
  EXPECT_EQ(tok.encode(prompt, true), (std::vector<int32_t>{264, 104, 105, 265}));
}

TEST(TokenizerJson, StreamingEmojiSplitAcrossByteTokens) {
  TokenizerTempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  const Tokenizer tok = Tokenizer::load(dir.path());
  const std::vector<int32_t> ids = tok.encode("😀!", false);
  ASSERT_EQ(ids, (std::vector<int32_t>{0xF0, 0x9F, 0x98, 0x80, '!'}));
  StreamingDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.pending_bytes(), 3u);
  EXPECT_EQ(stream.push(ids[3]), "😀");
  EXPECT_EQ(stream.push(ids[4]), "!");
  EXPECT_EQ(stream.flush(), "");
  // An incomplete character left at the end comes out as U+FFFD; an invalid byte at once.
  EXPECT_EQ(stream.push(0xF0), "");
  EXPECT_EQ(stream.push(0x9F), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push('a'),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(stream.push(0xFF), "\xEF\xBF\xBD");
}

TEST(TokenizerJson, IgnoreMergesUsesWholeWords) {
  json j = tiny_tokenizer_json();
  j["model"]["vocab"]["abc"] = 267;  // reachable only as a whole word
  j["model"]["ignore_merges"] = true;
  TokenizerTempDir dir;
  dir.write("tokenizer.json", j.dump());
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.encode("abc abd", false), (std::vector<int32_t>{267, 32, 97, 98, 100}));
}

TEST(TokenizerJson, Gpt2ByteLevelWithRegexAndNoBos) {
  json j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["normalizer"] = {{"type", "NFC"}};
  TokenizerTempDir dir;
  dir.write("tokenizer.json", j.dump());
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_FALSE(tok.adds_bos());
  // GPT-2's pattern keeps digit runs whole (" ?\p{N}+") and the space attached.
  EXPECT_EQ(tok.encode("hello 12345"), (std::vector<int32_t>{259, 32, 261, 262}));
  // NFC: "e" + U+0301 becomes U+00E9 (bytes C3 A9).
  EXPECT_EQ(tok.encode("e\xCC\x81"), (std::vector<int32_t>{0xC3, 0xA9}));
}

// ---- errors ------------------------------------------------------------------------------------

TEST(TokenizerErrors, MissingDirectory) {
  const std::string message =
      error_message([] { Tokenizer::load("/nonexistent/rkv-tokenizer-dir"); });
  EXPECT_NE(message.find("/nonexistent/rkv-tokenizer-dir"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
}

TEST(TokenizerErrors, DirectoryWithoutTokenizerFiles) {
  TokenizerTempDir dir;
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("merges.txt"), std::string::npos) << message;
}

TEST(TokenizerErrors, MalformedJson) {
  TokenizerTempDir dir;
  dir.write("tokenizer.json", "{\"model\": {\"vocab\": ");
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
  json j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("hello zzz");
  TokenizerTempDir dir;
  dir.write("tokenizer.json", j.dump());
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("\"zzz\""), std::string::npos) << message;
  EXPECT_NE(message.find("not in model.vocab"), std::string::npos) << message;
}

TEST(TokenizerErrors, UnsupportedModelType) {
  json j = tiny_tokenizer_json();
  j["model"]["type"] = "Unigram";
  TokenizerTempDir dir;
  dir.write("tokenizer.json", j.dump());
  EXPECT_NE(error_message([&] { Tokenizer::load(dir.path()); }).find("Unigram"), std::string::npos);
}

TEST(TokenizerErrors, SlowFormatBadMergesLine) {
  TokenizerTempDir dir;
  dir.write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  dir.write("merges.txt", "#version: 0.2\na b\na c\n");
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("merges.txt:3"), std::string::npos) << message;
  EXPECT_NE(message.find("\"c\""), std::string::npos) << message;
}

TEST(TokenizerErrors, SlowFormatMalformedVocab) {
  TokenizerTempDir dir;
  dir.write("vocab.json", R"({"a": "zero"})");
  dir.write("merges.txt", "#version: 0.2\n");
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("vocab.json"), std::string::npos) << message;
}

// Token ids are bounded (kMaxTokenId): the tables are sized by the largest id, so one huge id in
// a tiny file made the loader allocate gigabytes (found by fuzz/vocab_merges.cpp).
TEST(TokenizerErrors, HugeTokenIdsAreRejected) {
  {
    TokenizerTempDir dir;
    dir.write("vocab.json", R"({"a": 0, "b": 111111111})");
    dir.write("merges.txt", "#version: 0.2\n");
    const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
    EXPECT_NE(message.find("has id 111111111"), std::string::npos) << message;
  }
  {
    TokenizerTempDir dir;
    dir.write("vocab.json", R"({"a": 0, "b": 1})");
    dir.write("merges.txt", "#version: 0.2\n");
    dir.write("tokenizer_config.json",
              R"({"added_tokens_decoder": {"3000000": {"content": "<x>", "special": true}}})");
    const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
    EXPECT_NE(message.find("\"3000000\" is not a token id"), std::string::npos) << message;
  }
  {
    json j = tiny_tokenizer_json();
    // 2^32 + 5: read as int32 it used to wrap to id 5.
    j["added_tokens"] = json::array({{{"id", 4294967301LL}, {"content", "<x>"}}});
    TokenizerTempDir dir;
    dir.write("tokenizer.json", j.dump());
    const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
    EXPECT_NE(message.find("added_tokens: bad id"), std::string::npos) << message;
  }
}

TEST(TokenizerErrors, UnknownEosTokenInConfig) {
  TokenizerTempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  const std::string message = error_message([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("<|nope|>"), std::string::npos) << message;
}

TEST(TokenizerErrors, OutOfRangeIdInSmallVocabulary) {
  TokenizerTempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_THROW(tok.decode({267}), Error);
  EXPECT_THROW(tok.token_string(-1), Error);
  StreamingDecoder stream(tok);
  EXPECT_THROW(stream.push(1000), Error);
}

// `rkv tokenize --jsonl`: one line of ids per text line (a JSON string or an object's "text";
// blank lines skipped), each the library's encoding, and a bad line an error naming it.
TEST(TokenizeCli, JsonlGivesOneLineOfIdsPerText) {
  const std::filesystem::path dir = test::shipped_model_dir();
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("rkv_tokenize_" + std::to_string(::getpid()));
  const std::vector<std::string> texts = {"Hello world", "a  b\n\nc", "2 + 2 = 4"};
  {
    std::ofstream f(file);
    f << nlohmann::json(texts[0]).dump() << "\n\n"
      << nlohmann::json{{"text", texts[1]}}.dump() << "\n"
      << nlohmann::json(texts[2]).dump() << "\n";
  }
  const std::string base =
      test::rkv_binary() + " tokenize --tokenizer " + dir.string() + " --jsonl " + file.string();
  std::string out;
  ASSERT_EQ(test::run_command(base, out), 0) << out;
  std::vector<std::vector<int32_t>> lines;
  std::size_t at = 0;
  for (std::size_t nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(nlohmann::json::parse(out.substr(at, nl - at)).get<std::vector<int32_t>>());
  ASSERT_EQ(lines.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_FALSE(lines[i].empty());
    EXPECT_EQ(lines[i], tokenizer.encode(texts[i], true)) << texts[i];
  }
  {
    std::ofstream f(file);
    f << "\"fine\"\n[1, 2]\n";
  }
  EXPECT_EQ(test::run_command(base + " 2>&1", out), 1);
  EXPECT_NE(out.find("line 2"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + " --text x 2>&1", out), 1);
  EXPECT_NE(out.find("--jsonl alone"), std::string::npos) << out;
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace rkv
