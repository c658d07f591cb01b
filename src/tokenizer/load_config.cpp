// Reads what lies beside the vocabulary: tokenizer_config.json (bos_token, eos_token,
// add_bos_token, add_eos_token, chat_template), chat_template.jinja and generation_config.json
// (eos_token_id), and settles the BOS, the post-processor's prefix/suffix and the EOS set.
#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace rkv::tokenizer {

namespace {

// Known end-of-text markers; those present as special tokens always end generation.
constexpr const char* kEndMarkers[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                       "<|end_of_text|>", "<｜end▁of▁sentence｜>"};

std::string chat_template_from(const nlohmann::json& value, const std::filesystem::path& path) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    std::string first;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) {
        throw Error(path.string() + ": chat_template entries need a \"template\" string");
      }
      if (first.empty()) first = entry["template"].get<std::string>();
      if (entry.value("name", "") == "default") return entry["template"].get<std::string>();
    }
    return first;
  }
  return {};
}

std::optional<int32_t> resolve(const Tokenizer::Impl& impl, const std::string& token,
                               const std::filesystem::path& path, const char* key) {
  if (token.empty()) return std::nullopt;
  auto id = impl.find(token);
  if (!id) {
    throw Error(path.string() + ": " + key + " \"" + token + "\" is not a token of the vocabulary");
  }
  return id;
}

}  // namespace

void load_config(Tokenizer::Impl& impl, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::optional<int32_t> bos, eos;
  std::optional<bool> add_bos, add_eos;

  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path);
    if (!config.is_object()) throw Error(config_path.string() + ": expected a JSON object");
    if (config.contains("bos_token")) {
      const std::string text = token_content(config["bos_token"]);
      bos = resolve(impl, text, config_path, "bos_token");
      if (!text.empty()) impl.bos_token = text;
    }
    if (config.contains("eos_token")) {
      const std::string text = token_content(config["eos_token"]);
      eos = resolve(impl, text, config_path, "eos_token");
      if (!text.empty()) impl.eos_token = text;
    }
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      add_bos = config["add_bos_token"].get<bool>();
    }
    if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
      add_eos = config["add_eos_token"].get<bool>();
    }
    if (config.contains("chat_template")) {
      impl.chat_template = chat_template_from(config["chat_template"], config_path);
    }
  }
  if (impl.chat_template.empty() && fs::exists(dir / "chat_template.jinja")) {
    impl.chat_template = read_file(dir / "chat_template.jinja");
  }

  // The BOS: named in the config, else the single token the post-processor puts first.
  if (bos) {
    impl.bos = *bos;
  } else if (!impl.prefix_ids.empty()) {
    impl.bos = impl.prefix_ids.front();
  }
  // add_bos_token / add_eos_token in the config override the post-processor (as transformers'
  // Llama tokenizers rebuild it from them). The slow format has no post-processor otherwise.
  if (add_bos.value_or(false) && impl.bos >= 0 &&
      (impl.prefix_ids.empty() || impl.prefix_ids.front() != impl.bos)) {
    impl.prefix_ids.insert(impl.prefix_ids.begin(), impl.bos);
  }
  if (add_bos.has_value() && !*add_bos && !impl.prefix_ids.empty() &&
      impl.prefix_ids.front() == impl.bos) {
    impl.prefix_ids.erase(impl.prefix_ids.begin());
  }
  if (add_eos.value_or(false) && eos &&
      (impl.suffix_ids.empty() || impl.suffix_ids.back() != *eos)) {
    impl.suffix_ids.push_back(*eos);
  }
  if (add_eos.has_value() && !*add_eos && eos && !impl.suffix_ids.empty() &&
      impl.suffix_ids.back() == *eos) {
    impl.suffix_ids.pop_back();
  }

  if (eos) impl.eos.push_back(*eos);
  const fs::path generation_path = dir / "generation_config.json";
  if (fs::exists(generation_path)) {
    const nlohmann::json generation = read_json_file(generation_path);
    if (generation.is_object() && generation.contains("eos_token_id")) {
      const auto& value = generation["eos_token_id"];
      if (value.is_number_integer()) {
        impl.eos.push_back(value.get<int32_t>());
      } else if (value.is_array()) {
        for (const auto& id : value) {
          if (id.is_number_integer()) impl.eos.push_back(id.get<int32_t>());
        }
      }
    }
  }
  add_end_markers(impl);
}

void add_end_markers(Tokenizer::Impl& impl) {
  for (const char* marker : kEndMarkers) {
    auto id = impl.find(marker);
    if (id && (impl.flags[static_cast<std::size_t>(*id)] & Tokenizer::Impl::kSpecial) != 0) {
      impl.eos.push_back(*id);
    }
  }
  std::sort(impl.eos.begin(), impl.eos.end());
  impl.eos.erase(std::unique(impl.eos.begin(), impl.eos.end()), impl.eos.end());
  impl.eos.erase(
      std::remove_if(
          impl.eos.begin(), impl.eos.end(),
          [&](int32_t id) { return id < 0 || static_cast<std::size_t>(id) >= impl.flags.size(); }),
      impl.eos.end());
}

}  // namespace rkv::tokenizer
