// Fuzzes the compression trace checker (src/viz/viz.cpp, check_trace) and, for every trace it
// accepts, the page that embeds it: a trace must either be refused with rkv::Error or turn into
// a page whose embedded text contains no '<' (so no record can end its <script> element).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz_common.h"
#include "viz/viz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(rkv_fuzz::as_text(data, size));
  try {
    (void)rkv::viz::check_trace(text);
  } catch (const rkv::Error&) {
    return 0;
  }
  const std::string page = rkv::viz::render_page({{"fuzz", text}});
  const std::size_t begin = page.find("class=\"rkv-trace\"");
  const std::size_t open = page.find('>', begin);
  const std::size_t close = page.find("</script>", open);
  if (begin == std::string::npos || close == std::string::npos ||
      page.substr(open + 1, close - open - 1).find('<') != std::string::npos)
    std::abort();
  return 0;
}
