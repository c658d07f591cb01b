// Fuzzes config.json (+ generation_config.json) -> ModelConfig (src/model/config.cpp) through
// ModelConfig::load on a scratch directory. Input: config.json, optionally followed by
// "\n--8<--\n" and generation_config.json.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_common.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = rkv_fuzz::scratch();
  const auto parts = rkv_fuzz::split_parts(rkv_fuzz::as_text(data, size), 2);
  dir.write("config.json", parts[0]);
  if (parts.size() > 1)
    dir.write("generation_config.json", parts[1]);
  else
    dir.remove("generation_config.json");
  try {
    const rkv::ModelConfig c = rkv::ModelConfig::load(dir.path());
    (void)c.arch_label();
    (void)c.to_json().dump();
    if (c.num_kv_heads > 0) (void)c.group_size();
  } catch (const rkv::Error&) {
  }
  return 0;
}
