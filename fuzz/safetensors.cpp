// Fuzzes the safetensors reader (src/model/safetensors.cpp): the 8-byte header length, the JSON
// header, dtypes, shapes and data_offsets. The input is written to a file and opened through the
// production path (SafetensorsFile, which maps the file with MappedFile).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_common.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = rkv_fuzz::scratch().write("model.safetensors", rkv_fuzz::as_text(data, size));
  try {
    rkv::SafetensorsFile file(path);
    // Touch what a loader reads: every tensor's bytes, size and shape.
    std::size_t sum = 0;
    for (const auto& [name, info] : file.tensors()) {
      sum += static_cast<std::size_t>(info.numel()) + info.shape_string().size();
      const auto* bytes = static_cast<const unsigned char*>(info.data);
      if (info.nbytes > 0) sum += bytes[0] + bytes[info.nbytes - 1];
    }
    for (const auto& [k, v] : file.metadata()) sum += k.size() + v.size();
    volatile std::size_t sink = sum;
    (void)sink;
  } catch (const rkv::Error&) {
  }
  return 0;
}
