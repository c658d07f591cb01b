// Results that survive a run killed at any moment (kill -9, a full disk, power loss between two
// writes): append-only JSON-lines logs whose every record is one line written whole, synced to
// disk and checked by a CRC-32 of its content, and whole files replaced atomically.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace rkv {

// One record per line: the record's JSON object plus a field "crc32" (8 hex digits) over the
// object's compact dump without that field.
class RecordLog {
 public:
  // Opens `path` for appending, creating it. A last line cut short by an interrupted write (no
  // line break at the end) is removed first, so a new record never joins a torn one.
  explicit RecordLog(const std::filesystem::path& path);
  ~RecordLog();
  RecordLog(const RecordLog&) = delete;
  RecordLog& operator=(const RecordLog&) = delete;

  // Appends `record` (a JSON object) as one line and syncs it to disk before returning. Throws
  // rkv::Error naming the file when the write fails (a full disk): nothing half-written stays
  // counted, as the torn line fails its check.
  void append(nlohmann::json record);

  // The complete records of `path` whose check holds, in order ("crc32" removed). A line without
  // "crc32" (written before records were checked) is kept when it parses; a line cut short, one
  // that does not parse or one whose checksum fails is left out. A missing file has none.
  static std::vector<nlohmann::json> read(const std::filesystem::path& path);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// CRC-32 (IEEE 802.3, as zlib's crc32) of `bytes`.
std::uint32_t crc32(std::string_view bytes);

// Replaces `path` with `text` atomically: written to a temporary file beside it, synced, then
// renamed over it, so a reader sees the old file or the new one, never a part. Throws rkv::Error.
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

// The whole file as bytes. Throws rkv::Error "<path>: cannot open <what>" when it cannot be read.
std::string read_file(const std::filesystem::path& path, std::string_view what);

}  // namespace rkv
