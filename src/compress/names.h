// Names of the compression enums as the command line and JSON write them.
#pragma once

#include <string_view>
#include <vector>

namespace rkv::compress {

// Throws rkv::Error "unknown WHAT 'NAME' (expected one of: a, b, ...)".
[[noreturn]] void throw_unknown_name(std::string_view what, std::string_view name,
                                     const std::vector<std::string_view>& accepted);

}  // namespace rkv::compress
