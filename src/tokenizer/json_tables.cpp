// SAX handler that builds a JSON document but streams the vocabulary and merges tables.
#include "tokenizer/json_tables.h"

#include "core/error.h"

namespace rkv::tokenizer {

namespace {

using nlohmann::json;

class TableSax : public nlohmann::json_sax<json> {
 public:
  TableSax(const std::filesystem::path& file, const JsonTables& tables)
      : file_(file.string()), tables_(tables) {}

  json take() { return std::move(root_); }

  bool null() override { return value(json(nullptr), "null"); }
  bool boolean(bool v) override { return value(json(v), v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(json(v), std::to_string(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      return vocab_id(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return value(json(v), std::to_string(v));
  }
  bool number_float(number_float_t v, const string_t& s) override { return value(json(v), s); }
  bool binary(binary_t&) override { return value(json(), "binary"); }

  bool string(string_t& s) override {
    if (mode_ == Mode::kMerges) {
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail("merges[" + std::to_string(merge_index_) + "] = \"" + s +
             "\": expected two tokens separated by one space");
      }
      const std::string_view view(s);
      tables_.on_merge(view.substr(0, space), view.substr(space + 1), merge_index_++);
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      pair_.push_back(std::move(s));
      return true;
    }
    return value(json(std::move(s)), "a string");
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return value(json(), "an object");
    if (matches(tables_.vocab_path)) {
      mode_ = Mode::kVocab;
      return true;
    }
    open(json::object());
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
    } else {
      close();
    }
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kDom) return value(json(), "an array");
    if (matches(tables_.merges_path)) {
      mode_ = Mode::kMerges;
      return true;
    }
    open(json::array());
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) {
        fail("merges[" + std::to_string(merge_index_) + "] must be [\"a\", \"b\"]");
      }
      tables_.on_merge(pair_[0], pair_[1], merge_index_++);
      mode_ = Mode::kMerges;
    } else if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
    } else {
      close();
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(file_ + ": malformed JSON: " + e.what());
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  [[noreturn]] void fail(const std::string& what) const { throw Error(file_ + ": " + what); }

  bool vocab_id(int64_t id) {
    if (id < 0 || id > kMaxTokenId) {
      fail("token \"" + key_ + "\" has id " + std::to_string(id) +
           "; expected an integer from 0 to " + std::to_string(kMaxTokenId));
    }
    tables_.on_vocab(key_, id);
    return true;
  }

  // Whether a container opened now sits at `path`.
  bool matches(const std::optional<std::vector<std::string>>& path) const {
    if (!path) return false;
    if (stack_.empty()) return path->empty();
    if (path->size() != path_.size() + 1 || !stack_.back()->is_object()) return false;
    return std::equal(path_.begin(), path_.end(), path->begin()) && path->back() == key_;
  }

  bool value(json v, const std::string& what) {
    if (mode_ == Mode::kVocab) {
      fail("token \"" + key_ + "\" has id " + what + "; expected a non-negative integer");
    }
    if (mode_ != Mode::kDom) {
      fail("merges[" + std::to_string(merge_index_) + "] must be \"a b\" or [\"a\", \"b\"], got " +
           what);
    }
    add(std::move(v));
    return true;
  }

  json* add(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }

  void open(json container) {
    const bool in_object = !stack_.empty() && stack_.back()->is_object();
    if (!stack_.empty()) path_.push_back(in_object ? key_ : std::string("[]"));
    stack_.push_back(add(std::move(container)));
  }

  void close() {
    stack_.pop_back();
    if (!path_.empty() && path_.size() >= stack_.size()) path_.pop_back();
  }

  std::string file_;
  const JsonTables& tables_;
  json root_;
  std::vector<json*> stack_;       // open containers, root first
  std::vector<std::string> path_;  // keys of the open containers below the root
  std::string key_;
  Mode mode_ = Mode::kDom;
  std::vector<std::string> pair_;
  std::size_t merge_index_ = 0;
};

}  // namespace

nlohmann::json parse_json_with_tables(const std::string& text, const std::filesystem::path& file,
                                      const JsonTables& tables) {
  TableSax sax(file, tables);
  json::sax_parse(text, &sax);
  return sax.take();
}

}  // namespace rkv::tokenizer
