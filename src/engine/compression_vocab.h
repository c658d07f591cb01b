// The token ids compression triggers need, looked up from a tokenizer.
#pragma once

#include "engine/kv_memory.h"
#include "rkv/tokenizer.h"

namespace rkv {

// newline_ids: the tokens that are exactly one of the line breaks of ALGORITHMS.md 1
// (`\n`, `.\n`, `)\n`, `\n\n`, `.\n\n`, `)\n\n`); think_end_id: `</think>` (-1 if absent);
// token_text: the tokenizer's raw token text (skipkv / steering sentence tracking).
CompressionVocab compression_vocab(const Tokenizer& tokenizer);

}  // namespace rkv
