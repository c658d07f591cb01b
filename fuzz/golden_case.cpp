// Fuzzes golden compression case files (src/compress/golden_case_io.cpp, golden_case.cpp) the way
// `rkv policy-run` reads them: load_case on a scratch file (rkv::Error for bad JSON), then
// run_case, whose nlohmann::json exceptions policy-run turns into an rkv::Error (a case not in
// the golden format), so they are expected here too. params_from_case runs alone as well.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "compress/golden_case.h"
#include "core/error.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = rkv_fuzz::scratch().write("case.json", rkv_fuzz::as_text(data, size));
  nlohmann::json gc;
  try {
    gc = rkv::compress::load_case(path);
  } catch (const rkv::Error&) {
    return 0;
  }
  try {
    (void)rkv::compress::params_from_case(gc);
  } catch (const rkv::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  try {
    (void)rkv::compress::run_case(gc, {.include_cache = (size & 1) != 0}).dump();
  } catch (const rkv::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
