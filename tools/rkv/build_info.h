// The commit rkv was built from (cmake/build_info.cmake writes the definition at build time).
#pragma once

namespace rkv::cli {

// git's short hash of the sources' HEAD when rkv was built, with "-dirty" when tracked files
// differed from it; "unknown" when the sources were not a git checkout.
const char* build_commit();

}  // namespace rkv::cli
