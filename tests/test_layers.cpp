// The layering of docs/ARCHITECTURE.md, checked on the sources: every #include "dir/..." of a file
// in src/<dir>/ names its own directory, a directory of a lower layer, or a public header
// (rkv/...); the public headers (include/rkv/) include only each other.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace rkv {
namespace {

// From the bottom; directories of one layer include nothing of each other.
const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> rank = {
      {"core", 0},     {"kv", 1},   {"kernels", 2}, {"backend", 2},   {"model", 3},
      {"compress", 3}, {"cuda", 4}, {"jinja", 4},   {"tokenizer", 5}, {"engine", 6},
      {"eval", 7},     {"viz", 7},  {"server", 8}};
  return rank;
}

// Each quoted include of the files under `dir`: "path:line: target".
std::vector<std::pair<std::string, std::string>> includes_under(const std::filesystem::path& dir) {
  static const std::regex include(R"(^\s*#\s*include\s+"([^"]+)\")");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, include))
        out.emplace_back(entry.path().string() + ":" + std::to_string(n), m[1].str());
    }
  }
  return out;
}

TEST(Layers, EveryIncludePointsDownTheLayers) {
  const std::filesystem::path src = test::source_dir() / "src";
  std::vector<std::string> wrong;
  for (const auto& [dir, rank] : layers()) {
    ASSERT_TRUE(std::filesystem::is_directory(src / dir)) << dir;
    for (const auto& [where, target] : includes_under(src / dir)) {
      const std::string top = target.substr(0, target.find('/'));
      const auto it = layers().find(top);
      if (top == "rkv" || top == dir || it == layers().end()) continue;
      if (it->second >= rank) wrong.push_back(where + ": " + target);
    }
  }
  // Every directory of src/ has its place.
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    if (!entry.is_directory()) continue;
    EXPECT_TRUE(layers().count(entry.path().filename().string()))
        << entry.path() << " has no layer here (docs/ARCHITECTURE.md)";
  }
  EXPECT_TRUE(wrong.empty()) << "includes that point up or sideways:\n"
                             << testing::PrintToString(wrong);
}

TEST(Layers, PublicHeadersIncludeOnlyPublicHeaders) {
  std::vector<std::string> wrong;
  for (const auto& [where, target] : includes_under(test::source_dir() / "include" / "rkv"))
    if (target.rfind("rkv/", 0) != 0) wrong.push_back(where + ": " + target);
  EXPECT_TRUE(wrong.empty()) << testing::PrintToString(wrong);
}

}  // namespace
}  // namespace rkv
