// Fuzzes the compression parameter text (src/compress/params.cpp, registry.cpp, names.cpp;
// include/rkv/compression.h): CompressionParams::set with arbitrary name/value pairs, validate,
// budget_for, to_json, format_text_list, and parse_method / parse_smoothing / parse_trigger.
// Input: lines "name=value" (the first line may instead name a method preset: "@rkv").
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz_common.h"
#include "rkv/compression.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = rkv_fuzz::as_text(data, size);
  rkv::CompressionParams p;
  bool first = true;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    try {
      if (first && !line.empty() && line[0] == '@') {
        p = rkv::CompressionParams::defaults(rkv::parse_method(line.substr(1)));
      } else {
        const std::size_t eq = line.find('=');
        const std::string_view name = line.substr(0, eq);
        const std::string_view value =
            eq == std::string_view::npos ? std::string_view{} : line.substr(eq + 1);
        try {
          (void)rkv::parse_method(value);
        } catch (const rkv::Error&) {
        }
        try {
          (void)rkv::parse_smoothing(value);
        } catch (const rkv::Error&) {
        }
        try {
          (void)rkv::parse_trigger(value);
        } catch (const rkv::Error&) {
        }
        p.set(name, value);
      }
    } catch (const rkv::Error&) {
    }
    first = false;
  }
  (void)p.to_json();
  (void)rkv::format_text_list(p.delimiters);
  (void)rkv::format_text_list(p.keywords);
  try {
    p.validate();
    for (std::int64_t n :
         {std::int64_t{0}, std::int64_t{1}, std::int64_t{4096}, std::int64_t{1} << 40})
      (void)p.budget_for(n);
  } catch (const rkv::Error&) {
  }
  return 0;
}
