// Helpers shared by the tests: where the goldens are, and reading JSON files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace rkv::test {

// ../shared beside the repository (or $RKV_SHARED_DIR). Empty when absent.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("RKV_SHARED_DIR"); env != nullptr && *env != '\0') return env;
  std::filesystem::path p = RKV_DEFAULT_SHARED_DIR;
  if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p);
  return {};
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

// The path to the rkv program built alongside the tests.
inline std::string rkv_binary() {
  return RKV_BINARY_PATH;
}

}  // namespace rkv::test

// Skips the current test, with a message that says why, when ../shared is missing.
#define RKV_REQUIRE_SHARED(dir_var)                                                   \
  const std::filesystem::path dir_var = ::rkv::test::shared_dir();                    \
  if (dir_var.empty()) {                                                              \
    GTEST_SKIP() << "../shared (the golden files) is not beside the repository; set " \
                    "RKV_SHARED_DIR to run this test";                                \
  }
