#include "core/record_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace rkv {

namespace {

using nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

void write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(path.string() + ": cannot write (" + std::strerror(n < 0 ? errno : ENOSPC) + ")");
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void sync(int fd, const std::filesystem::path& path) {
  if (::fsync(fd) != 0)
    throw Error(path.string() + ": cannot sync to disk (" + std::strerror(errno) + ")");
}

// Syncs the directory holding `path`, so that a rename or a new file in it is durable too.
void sync_directory(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some file systems do not open directories
  ::fsync(fd);
  ::close(fd);
}

std::string read_all(const std::filesystem::path& path) {  // "" when absent
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::uint32_t crc32(std::string_view bytes) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

RecordLog::RecordLog(const std::filesystem::path& path) : path_(path) {
  // Cut a torn last line before appending after it.
  std::error_code ec;
  if (std::filesystem::is_regular_file(path_, ec)) {
    const std::string text = read_all(path_);
    const std::size_t keep = text.empty() ? 0 : text.rfind('\n') + 1;  // npos + 1 == 0
    if (keep < text.size()) std::filesystem::resize_file(path_, keep, ec);
    if (ec) throw Error(path_.string() + ": cannot repair a cut last line (" + ec.message() + ")");
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(path_.string() + ": cannot open for writing (" + std::strerror(errno) + ")");
  sync_directory(path_);
}

RecordLog::~RecordLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordLog::append(json record) {
  if (!record.is_object()) throw Error("a record must be a JSON object");
  record.erase("crc32");
  const std::uint32_t crc = crc32(dump(record));
  record["crc32"] = hex8(crc);
  // One write of the whole line: a kill leaves either all of it or a torn tail without "\n".
  write_all(fd_, dump(record) + "\n", path_);
  sync(fd_, path_);
}

std::vector<json> RecordLog::read(const std::filesystem::path& path) {
  std::vector<json> out;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return out;
  const std::string text = read_all(path);
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // cut short: not a record
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      continue;
    }
    if (!j.is_object()) continue;
    if (const auto it = j.find("crc32"); it != j.end()) {
      if (!it->is_string()) continue;
      const std::string expected = it->get<std::string>();
      j.erase("crc32");
      if (hex8(crc32(dump(j))) != expected) continue;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(tmp.string() + ": cannot open for writing (" + std::strerror(errno) + ")");
  try {
    write_all(fd, text, tmp);
    sync(fd, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path.string() + ": cannot replace (" + std::strerror(err) + ")");
  }
  sync_directory(path);
}

std::string read_file(const std::filesystem::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open " + std::string(what));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": cannot read " + std::string(what));
  return std::move(ss).str();
}

}  // namespace rkv
