// Fuzzes the OpenAI-compatible request bodies (src/server/openai_api.cpp):
// parse_completion_request for /v1/chat/completions and /v1/completions with the default
// RequestDefaults (which covers parse_kv_object through the "kv" field). Any exception other
// than rkv::server::ApiError (which the server answers with 400) is a bug. The input is the body.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "server/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(rkv_fuzz::as_text(data, size));
  static const rkv::server::RequestDefaults defaults;
  for (bool chat : {true, false}) {
    try {
      const rkv::server::ParsedRequest r =
          rkv::server::parse_completion_request(body, chat, defaults, 12345);
      (void)r.request.compression.to_json();
    } catch (const rkv::server::ApiError& e) {
      if (e.status < 400 || e.status > 599) __builtin_trap();  // an error must be an HTTP error
    }
  }
  return 0;
}
