// Fuzzes the GGUF reader (src/model/gguf.cpp): magic, version, counts, metadata of every value
// type (strings, arrays), tensor infos, alignment and data bounds; then the GGUF model loader
// and the vocabulary loaders (SentencePiece-style and byte-level BPE) on what the reader accepted.
// The input is written to a file and opened through the production paths (GgufFile, Model::load,
// Tokenizer::load).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_common.h"
#include "model/gguf.h"
#include "model/model.h"
#include "rkv/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = rkv_fuzz::scratch().write("model.gguf", rkv_fuzz::as_text(data, size));
  try {
    const rkv::GgufFile file(path);
    // Touch what a loader reads: every value, every tensor's first and last byte.
    std::size_t sum = 0;
    for (const auto& [key, value] : file.metadata())
      sum += key.size() + value.text.size() + value.array_size();
    for (const auto& t : file.tensors()) {
      sum += static_cast<std::size_t>(t.numel()) + t.dims_string().size();
      const auto* bytes = reinterpret_cast<const unsigned char*>(t.data);
      if (t.nbytes > 0) sum += bytes[0] + bytes[t.nbytes - 1];
    }
    volatile std::size_t sink = sum;
    (void)sink;
  } catch (const rkv::Error&) {
    return 0;
  }
  try {
    const auto model = rkv::Model::load(path);
    volatile int sink = model->config().vocab_size;
    (void)sink;
  } catch (const rkv::Error&) {
  }
  try {
    const rkv::Tokenizer tokenizer = rkv::Tokenizer::load(path);
    const auto ids = tokenizer.encode("Once upon a time, <s> caf\xC3\xA9 \xF0\x9F\x98\x80\n");
    volatile std::size_t sink = tokenizer.decode(ids).size();
    (void)sink;
  } catch (const rkv::Error&) {
  }
  return 0;
}
