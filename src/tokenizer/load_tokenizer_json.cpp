// Loads a Hugging Face fast-tokenizer file (tokenizer.json) with a byte-level BPE model:
// model (vocab, merges in "a b" or ["a","b"] form, ignore_merges), added_tokens, normalizer
// (NFC or none), pre_tokenizer (Split / ByteLevel / Sequence of them) and post_processor
// (TemplateProcessing / ByteLevel / Sequence of them). Anything else is refused with an error
// rather than encoded wrongly.
#include "core/byte_level.h"
#include "core/error.h"
#include "tokenizer/json_tables.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv::tokenizer {

namespace {

struct Context {
  Tokenizer::Impl& impl;
  std::string file;  // for messages
  bool byte_level = false;

  [[noreturn]] void fail(const std::string& what) const { throw Error(file + ": " + what); }
};

std::string type_of(const nlohmann::json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// model.vocab and model.merges were streamed into `merges` by the SAX pass; this checks the rest.
void load_model(Context& ctx, const nlohmann::json& model, std::size_t vocab_count,
                const std::vector<std::pair<std::string, std::string>>& merges) {
  if (!model.is_object()) ctx.fail("\"model\" is missing or not an object");
  const std::string type = type_of(model);
  if (!type.empty() && type != "BPE") {
    ctx.fail("model.type is \"" + type + "\"; only byte-level BPE tokenizers are supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && it->is_string() && !it->get<std::string>().empty()) {
      ctx.fail(std::string("model.") + key + " is set; only byte-level BPE is supported");
    }
  }
  if (vocab_count == 0) ctx.fail("model.vocab is missing or empty");
  Tokenizer::Impl& impl = ctx.impl;
  impl.ignore_merges = model.value("ignore_merges", false);
  impl.merges.reserve(merges.size());
  for (std::size_t index = 0; index < merges.size(); ++index) {
    const auto& [left, right] = merges[index];
    if (const auto missing = impl.add_merge(left, right)) {
      ctx.fail("model.merges[" + std::to_string(index) + "] refers to the token \"" + *missing +
               "\", which is not in model.vocab");
    }
  }
}

void load_added_tokens(Context& ctx, const nlohmann::json& list) {
  if (list.is_null()) return;
  if (!list.is_array()) ctx.fail("\"added_tokens\" must be an array");
  for (const auto& entry : list) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
        !entry.contains("content") || !entry["content"].is_string()) {
      ctx.fail("added_tokens: each entry needs an integer \"id\" and a string \"content\", got " +
               entry.dump());
    }
    AddedToken token;
    // Read as int64: get<int32_t> would wrap 2^32 + 5 to 5.
    const auto id = entry["id"].get<int64_t>();
    if (id < 0 || id > kMaxTokenId) ctx.fail("added_tokens: bad id " + entry.dump());
    token.id = static_cast<int32_t>(id);
    token.content = entry["content"].get<std::string>();
    token.special = entry.value("special", false);
    token.lstrip = entry.value("lstrip", false);
    token.rstrip = entry.value("rstrip", false);
    ctx.impl.add_added_token(token);
  }
}

void load_normalizer(Context& ctx, const nlohmann::json& node) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "NFC") {
    ctx.impl.nfc = true;
  } else if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    for (const auto& child : node["normalizers"]) load_normalizer(ctx, child);
  } else {
    ctx.fail("normalizer type \"" + type + "\" is not supported (supported: NFC, Sequence, null)");
  }
}

SplitBehavior parse_behavior(Context& ctx, const std::string& name) {
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  ctx.fail("pre_tokenizer Split: unknown behavior \"" + name + "\"");
}

void load_pre_tokenizer(Context& ctx, const nlohmann::json& node) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence" && node.contains("pretokenizers") && node["pretokenizers"].is_array()) {
    for (const auto& child : node["pretokenizers"]) load_pre_tokenizer(ctx, child);
  } else if (type == "Split") {
    const auto pattern = node.find("pattern");
    if (pattern == node.end() || !pattern->is_object()) {
      ctx.fail(
          "pre_tokenizer Split needs a \"pattern\" object ({\"Regex\": ...} or {\"String\": ...})");
    }
    bool literal = false;
    std::string text;
    if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      text = (*pattern)["Regex"].get<std::string>();
    } else if (pattern->contains("String") && (*pattern)["String"].is_string()) {
      text = (*pattern)["String"].get<std::string>();
      literal = true;
    } else {
      ctx.fail("pre_tokenizer Split: pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    ctx.impl.pre_tokenizer.add_split(text, literal,
                                     parse_behavior(ctx, node.value("behavior", "Isolated")),
                                     node.value("invert", false), ctx.file);
  } else if (type == "ByteLevel") {
    ctx.byte_level = true;
    ctx.impl.add_prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) {
      ctx.impl.pre_tokenizer.add_split(kGpt2Pattern, false, SplitBehavior::kIsolated, false,
                                       ctx.file);
    }
  } else {
    ctx.fail("pre_tokenizer type \"" + type +
             "\" is not supported (supported: ByteLevel, Split, Sequence); only byte-level BPE "
             "tokenizers can be loaded");
  }
}

void load_post_processor(Context& ctx, const nlohmann::json& node) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "ByteLevel") return;  // only trims offsets, adds no tokens
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (const auto& child : node["processors"]) load_post_processor(ctx, child);
    return;
  }
  if (type != "TemplateProcessing") {
    ctx.fail("post_processor type \"" + type +
             "\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
  const auto single = node.find("single");
  if (single == node.end() || !single->is_array()) {
    ctx.fail("post_processor TemplateProcessing needs a \"single\" array");
  }
  const nlohmann::json specials = node.value("special_tokens", nlohmann::json::object());
  bool seen_sequence = false;
  ctx.impl.prefix_ids.clear();
  ctx.impl.suffix_ids.clear();
  for (const auto& piece : *single) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id")) {
      ctx.fail("post_processor TemplateProcessing: unexpected item " + piece.dump());
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    std::vector<int32_t> ids;
    if (specials.contains(name) && specials[name].contains("ids")) {
      ids = specials[name]["ids"].get<std::vector<int32_t>>();
    } else if (auto id = ctx.impl.find(name)) {
      ids = {*id};
    } else {
      ctx.fail("post_processor TemplateProcessing: unknown special token \"" + name + "\"");
    }
    auto& target = seen_sequence ? ctx.impl.suffix_ids : ctx.impl.prefix_ids;
    target.insert(target.end(), ids.begin(), ids.end());
  }
}

}  // namespace

void load_tokenizer_json(Tokenizer::Impl& impl, const std::filesystem::path& path) {
  std::size_t vocab_count = 0;
  std::vector<std::pair<std::string, std::string>> merges;
  JsonTables tables;
  tables.vocab_path = std::vector<std::string>{"model", "vocab"};
  tables.merges_path = std::vector<std::string>{"model", "merges"};
  tables.on_vocab = [&](const std::string& token, int64_t id) {
    impl.set_token(static_cast<int32_t>(id), token, byte_level_to_bytes(token), 0);
    ++vocab_count;
  };
  tables.on_merge = [&](std::string_view left, std::string_view right, std::size_t) {
    merges.emplace_back(left, right);
  };
  impl.vocab.reserve(160000);
  const nlohmann::json root = parse_json_with_tables(read_file(path), path, tables);
  Context ctx{impl, path.string()};
  if (!root.is_object()) ctx.fail("expected a JSON object");
  try {
    load_model(ctx, root.contains("model") ? root["model"] : nlohmann::json(), vocab_count, merges);
    load_added_tokens(ctx, root.value("added_tokens", nlohmann::json()));
    load_normalizer(ctx, root.value("normalizer", nlohmann::json()));
    load_pre_tokenizer(ctx, root.value("pre_tokenizer", nlohmann::json()));
    load_post_processor(ctx, root.value("post_processor", nlohmann::json()));
  } catch (const nlohmann::json::exception& e) {
    ctx.fail(std::string("unexpected structure: ") + e.what());
  }
  if (!ctx.byte_level) {
    ctx.fail(
        "the pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers "
        "(GPT-2, Qwen2, Llama-3 style) are supported");
  }
  // Ids in the post-processor must exist.
  for (const auto* ids : {&impl.prefix_ids, &impl.suffix_ids}) {
    for (int32_t id : *ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= impl.flags.size() || impl.flags[id] == 0) {
        ctx.fail("post_processor refers to token id " + std::to_string(id) +
                 ", which is not in the vocabulary");
      }
    }
  }
}

}  // namespace rkv::tokenizer
