#include "engine/compression_vocab.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace rkv {

CompressionVocab compression_vocab(const Tokenizer& tokenizer) {
  CompressionVocab vocab;
  for (const char* text : {"\n", ".\n", ")\n", "\n\n", ".\n\n", ")\n\n"}) {
    const auto ids = tokenizer.encode(text, false);
    if (ids.size() == 1 && std::find(vocab.newline_ids.begin(), vocab.newline_ids.end(), ids[0]) ==
                               vocab.newline_ids.end())
      vocab.newline_ids.push_back(ids[0]);
  }
  vocab.think_end_id = tokenizer.token_id("</think>");
  // The model's vocabulary may be larger than the tokenizer's (padded embedding rows): such ids
  // have no text.
  vocab.token_text = [tokenizer](int id) -> std::string {
    if (id < 0 || id >= tokenizer.vocab_size()) return {};
    try {
      return tokenizer.token_text(id);
    } catch (const Error&) {
      return {};
    }
  };
  return vocab;
}

}  // namespace rkv
