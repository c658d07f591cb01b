// Fuzzes tokenizer.json loading (src/tokenizer/load_tokenizer_json.cpp, json_tables.cpp,
// added_tokens.cpp, pre_tokenizer.cpp, load_config.cpp) through Tokenizer::load on a scratch
// directory. Input: tokenizer.json, optionally followed by "\n--8<--\n" and
// tokenizer_config.json. A tokenizer that loads then encodes and decodes a short fixed text.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = rkv_fuzz::scratch();
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 2);
  dir.write("tokenizer.json", parts[0]);
  if (parts.size() > 1)
    dir.write("tokenizer_config.json", parts[1]);
  else
    dir.remove("tokenizer_config.json");
  try {
    const rkv::Tokenizer tok = rkv::Tokenizer::load(dir.path());
    const std::vector<std::int32_t> ids = tok.encode("Hello, world! 12 <think>x</think>\n", true);
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
    (void)tok.eos_ids();
    (void)tok.chat_template_text();
    for (std::int32_t id = 0; id < tok.vocab_size() && id < 64; ++id) {
      (void)tok.token_string(id);
      (void)tok.is_special(id);
    }
  } catch (const rkv::Error&) {
  }
  return 0;
}
