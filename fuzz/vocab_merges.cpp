// Fuzzes vocab.json + merges.txt loading (src/tokenizer/load_vocab_merges.cpp, load_config.cpp)
// through Tokenizer::load on a scratch directory without a tokenizer.json. Input: vocab.json
// "\n--8<--\n" merges.txt, optionally followed by "\n--8<--\n" and tokenizer_config.json. A
// tokenizer that loads then encodes and decodes a short fixed text.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = rkv_fuzz::scratch();
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 3);
  dir.write("vocab.json", parts[0]);
  if (parts.size() > 1)
    dir.write("merges.txt", parts[1]);
  else
    dir.remove("merges.txt");
  if (parts.size() > 2)
    dir.write("tokenizer_config.json", parts[2]);
  else
    dir.remove("tokenizer_config.json");
  try {
    const rkv::Tokenizer tok = rkv::Tokenizer::load(dir.path());
    const std::vector<std::int32_t> ids = tok.encode("Hello, world! abc ab\n", true);
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
    for (std::int32_t id = 0; id < tok.vocab_size() && id < 64; ++id) (void)tok.token_string(id);
  } catch (const rkv::Error&) {
  }
  return 0;
}
