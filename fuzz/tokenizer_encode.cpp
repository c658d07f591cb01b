// Fuzzes encoding and decoding of arbitrary text with a loaded tokenizer (src/tokenizer/encode.cpp,
// bpe.cpp, pre_tokenizer.cpp, added_tokens.cpp, utf8.cpp, streaming_decoder.cpp). The tokenizer is
// models/rkv-tiny-reasoner (RKV_FUZZ_TOKENIZER=DIR picks another). Input: one flag byte
// (bit 0: add_special, bit 1: skip_special) and the text; the text's bytes, read as little-endian
// int32 ids, are also decoded (ids out of range are rejected with rkv::Error).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/tokenizer.h"

namespace {

const rkv::Tokenizer& tokenizer() {
  static const rkv::Tokenizer tok = [] {
    const char* dir = std::getenv("RKV_FUZZ_TOKENIZER");
    return rkv::Tokenizer::load(dir != nullptr && *dir != '\0' ? dir : RKV_FUZZ_TOKENIZER_DIR);
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();  // a broken seed tokenizer fails at start-up, not on the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const rkv::Tokenizer& tok = tokenizer();
  const bool add_special = (data[0] & 1) != 0;
  const bool skip_special = (data[0] & 2) != 0;
  const auto text = rkv_fuzz::as_text(data + 1, size - 1);

  const std::vector<std::int32_t> ids = tok.encode(text, add_special);
  for (std::int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();  // encode made an id out of range
  (void)tok.decode(ids, skip_special);
  rkv::StreamingDecoder stream(tok, skip_special);
  for (std::int32_t id : ids) (void)stream.push(id);
  (void)stream.flush();

  // Arbitrary ids: in range they decode, out of range they are an rkv::Error.
  std::vector<std::int32_t> raw(text.size() / 4);
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
  try {
    (void)tok.decode(raw, skip_special);
  } catch (const rkv::Error&) {
  }
  for (auto& id : raw) {
    id = static_cast<std::int32_t>(static_cast<std::uint32_t>(id) %
                                   static_cast<std::uint32_t>(tok.vocab_size()));
    (void)tok.token_text(id);
    (void)tok.token_string(id);
  }
  try {
    (void)tok.decode(raw, skip_special);
    rkv::StreamingDecoder s2(tok, skip_special);
    for (std::int32_t id : raw) (void)s2.push(id);
    (void)s2.flush();
  } catch (const rkv::Error&) {
  }
  (void)tok.token_id(text);
  return 0;
}
