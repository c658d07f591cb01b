// Shared helpers of the libFuzzer harnesses (fuzz/*.cpp, docs/RELIABILITY.md).
//
// Every harness treats rkv::Error (and, for the server, rkv::server::ApiError) as the expected
// rejection of bad input. Any other exception escapes LLVMFuzzerTestOneInput, reaches
// std::terminate and is reported by libFuzzer as a crash, like a sanitizer report, a leak or a
// timeout.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace rkv_fuzz {

// The input as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Several files or fields in one input: the parts between separator lines "\n--8<--\n".
// The seed corpora use the same separator, so mutations keep the structure most of the time.
inline std::vector<std::string_view> split_parts(std::string_view text, std::size_t max_parts) {
  static constexpr std::string_view kSep = "\n--8<--\n";
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const std::size_t at = text.find(kSep);
    if (at == std::string_view::npos) break;
    parts.push_back(text.substr(0, at));
    text.remove_prefix(at + kSep.size());
  }
  parts.push_back(text);
  return parts;
}

// A private scratch directory for the path-based loaders (outside the source tree: $TMPDIR,
// /dev/shm when present, else /tmp), removed when the process exits normally.
class ScratchDir {
 public:
  ScratchDir() {
    namespace fs = std::filesystem;
    const char* tmp = std::getenv("TMPDIR");
    fs::path base = tmp != nullptr && *tmp != '\0' ? fs::path(tmp)
                    : fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                   : fs::path("/tmp");
    std::string templ = (base / "rkv-fuzz-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) std::abort();
    dir_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return dir_; }

  // Writes `name` with `bytes` (replacing it).
  std::filesystem::path write(const std::string& name, std::string_view bytes) const {
    const auto p = dir_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) std::abort();
    return p;
  }
  // Removes `name` when present.
  void remove(const std::string& name) const {
    std::error_code ec;
    std::filesystem::remove(dir_ / name, ec);
  }

 private:
  std::filesystem::path dir_;
};

// One scratch directory per process, created on first use.
inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

}  // namespace rkv_fuzz
