// The vocabulary of a GGUF file (tokenizer.ggml.*), in llama.cpp's two common forms:
// - "llama": SentencePiece-style (scores, <0xXX> byte fallback; spm.cpp encodes it);
// - "gpt2": byte-level BPE, the form llama.cpp's converter writes for Qwen2/Qwen2.5/Qwen3,
//   DeepSeek-R1-Distill and Llama-3 models. Tokens are in GPT-2's byte-level alphabet, merges are
//   "left right" strings in rank order, control and user-defined tokens are the added tokens
//   (matched in the text before splitting). tokenizer.ggml.pre names the pre-tokenizer; each
//   supported name maps to the Hugging Face tokenizer the model was trained with, so the ids are
//   those of its tokenizer.json: "qwen2" and "deepseek-r1-qwen" split with Qwen2's pattern after
//   NFC (Qwen2's normalizer), "llama-bpe"/"llama3"/"llama-v3" with Llama-3's pattern and whole
//   words first (ignore_merges), "gpt-2" with GPT-2's. Other names are refused rather than split
//   wrongly.
// Then the special tokens: BOS (added when tokenizer.ggml.add_bos_token says so, by default
// for SentencePiece and Llama-3 vocabularies as in llama.cpp), EOS/EOT with the known end
// markers (as the tokenizer.json path and llama.cpp's end-of-generation set), the template.
#include "core/byte_level.h"
#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/json_tables.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv::tokenizer {

void GgufFail::operator()(const std::string& what) const {
  throw Error(where + ": " + what);
}

namespace {

struct BpePre {
  const char* pattern;
  bool nfc;
  bool ignore_merges;
  bool add_bos;  // llama.cpp's default when the file does not say
};

BpePre bpe_pre_tokenizer(const std::string& name, const GgufFail& fail) {
  if (name == "qwen2" || name == "deepseek-r1-qwen") return {kQwen2Pattern, true, false, false};
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3")
    return {kLlama3Pattern, false, true, true};
  if (name == "gpt-2") return {kGpt2Pattern, false, false, false};
  fail("tokenizer.ggml.pre '" + name +
       "' is not supported (supported: qwen2, deepseek-r1-qwen, llama-bpe, llama3, llama-v3, "
       "gpt-2); give a tokenizer directory with --tokenizer");
}

// Byte-level BPE ("gpt2"). Returns the default of add_bos_token.
bool load_bpe_tokens(Tokenizer::Impl& impl, const GgufFile& g,
                     const std::vector<std::string>& tokens, const std::vector<int64_t>* types,
                     const GgufFail& fail) {
  const BpePre pre = bpe_pre_tokenizer(g.get_string("tokenizer.ggml.pre").value_or("gpt-2"), fail);
  impl.vocab.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = tokens[i];
    const int64_t type = types != nullptr ? (*types)[i] : kGgufNormal;
    switch (type) {
      case kGgufNormal:
      case kGgufUnused:
      case kGgufByte:
        impl.set_token(id, text, byte_level_to_bytes(text), 0);
        break;
      case kGgufUnknown:
      case kGgufControl:
      case kGgufUserDefined:
        if (text.empty()) fail("token " + std::to_string(i) + " (an added token) is empty");
        impl.add_added_token({text, id, type != kGgufUserDefined, false, false});
        break;
      default:
        fail("token " + std::to_string(i) + " has unknown type " + std::to_string(type) +
             " in tokenizer.ggml.token_type (known: 1 to 6)");
    }
  }
  if (impl.vocab.size() != tokens.size())
    fail("tokenizer.ggml.tokens holds the same token twice (" + std::to_string(tokens.size()) +
         " tokens, " + std::to_string(impl.vocab.size()) + " distinct)");
  const auto* merges = g.get_string_array("tokenizer.ggml.merges");
  if (merges == nullptr)
    fail("metadata tokenizer.ggml.merges is missing (a gpt2 vocabulary needs its merges)");
  impl.merges.reserve(merges->size());
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const std::string& line = (*merges)[i];
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      fail("tokenizer.ggml.merges[" + std::to_string(i) +
           "] is not two tokens separated by one space: '" + line + "'");
    if (const auto missing = impl.add_merge(line.substr(0, space), line.substr(space + 1)))
      fail("tokenizer.ggml.merges[" + std::to_string(i) + "] ('" + line +
           "') refers to the token '" + *missing + "', which is not in tokenizer.ggml.tokens");
  }
  impl.ignore_merges = pre.ignore_merges;
  impl.nfc = pre.nfc;
  impl.pre_tokenizer.add_split(pre.pattern, false, SplitBehavior::kIsolated, false,
                               impl.dir.string());
  impl.index_bytes();
  return pre.add_bos;
}

}  // namespace

void load_gguf_vocab(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  const GgufFile g(path, MappedFile::Mode::Map);
  const GgufFail fail{path.string()};
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model)
    fail(
        "no vocabulary in this GGUF file (metadata tokenizer.ggml.model is missing); give a "
        "tokenizer with --tokenizer");
  if (*model != "llama" && *model != "gpt2")
    fail("tokenizer.ggml.model '" + *model +
         "' is not supported (supported: llama, the SentencePiece-style vocabulary, and gpt2, "
         "byte-level BPE); give a tokenizer directory with --tokenizer");
  const auto* tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty())
    fail("metadata tokenizer.ggml.tokens is missing or empty");
  if (static_cast<int64_t>(tokens->size()) > kMaxTokenId + 1)
    fail("tokenizer.ggml.tokens has " + std::to_string(tokens->size()) + " tokens, more than the " +
         std::to_string(kMaxTokenId + 1) + " supported");
  const std::size_t n = tokens->size();
  const auto* types = g.get_int_array("tokenizer.ggml.token_type");
  if (types != nullptr && types->size() != n)
    fail("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
         std::to_string(n) + " tokens");

  bool add_bos_default = true;  // SentencePiece vocabularies add the BOS
  if (*model == "llama") {
    const auto* scores = g.get_real_array("tokenizer.ggml.scores");
    if (scores != nullptr && scores->size() != n)
      fail("tokenizer.ggml.scores has " + std::to_string(scores->size()) + " entries for " +
           std::to_string(n) + " tokens");
    load_spm_tokens(impl, *tokens, scores, types, fail);
    impl.spm_add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  } else {
    add_bos_default = load_bpe_tokens(impl, g, *tokens, types, fail);
  }

  auto token_id = [&](const char* key) -> int32_t {
    const auto v = g.get_uint(key);
    if (!v) return -1;
    if (*v >= n) return -1;  // llama.cpp writes 4294967295 for "none"
    return static_cast<int32_t>(*v);
  };
  impl.bos = token_id("tokenizer.ggml.bos_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const int32_t id = token_id(key); id >= 0) impl.eos.push_back(id);
  // As llama.cpp's end-of-generation set: the known end markers end generation too.
  add_end_markers(impl);
  if (g.get_bool("tokenizer.ggml.add_bos_token").value_or(add_bos_default) && impl.bos >= 0)
    impl.prefix_ids.push_back(impl.bos);
  const int32_t eos = token_id("tokenizer.ggml.eos_token_id");
  if (g.get_bool("tokenizer.ggml.add_eos_token").value_or(false) && eos >= 0)
    impl.suffix_ids.push_back(eos);
  if (const auto tmpl = g.get_string("tokenizer.chat_template")) impl.chat_template = *tmpl;
  // A chat template's bos_token and eos_token: the tokens' texts, as llama.cpp binds them.
  auto text_of = [&](int32_t id) -> std::optional<std::string> {
    if (id < 0 || static_cast<std::size_t>(id) >= impl.id_to_token.size()) return std::nullopt;
    return impl.id_to_token[static_cast<std::size_t>(id)];
  };
  impl.bos_token = text_of(impl.bos);
  impl.eos_token = text_of(eos);
}

}  // namespace rkv::tokenizer
