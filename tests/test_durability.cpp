// Nothing lost when a run dies: the checked record log (core/record_log.h) against torn and
// corrupted files and a full disk, and `rkv eval` / `rkv bench` killed with SIGKILL at random
// moments and resumed until they finish: every result present exactly once, none half-written,
// the same as an uninterrupted run's.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/record_log.h"
#include "test_util.h"

extern char** environ;

namespace rkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(RecordLog, Crc32IsTheStandardOne) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32(""), 0u);
}

TEST(RecordLog, ATornFileKeepsExactlyItsCompleteRecords) {
  test::TempDir dir("log");
  const fs::path path = dir.path() / "r.jsonl";
  std::vector<json> records;
  {
    RecordLog log(path);
    for (int i = 0; i < 5; ++i) {
      records.push_back(
          {{"i", i}, {"text", std::string(static_cast<std::size_t>(i * 7), 'x')}, {"f", 0.1 * i}});
      log.append(records.back());
    }
  }
  EXPECT_EQ(RecordLog::read(path), records);
  const std::string full = read_text(path);
  // Cut at every byte: the records whose line is whole survive, and only those.
  for (std::size_t cut = 0; cut <= full.size(); ++cut) {
    dir.write("cut.jsonl", full.substr(0, cut));
    const std::size_t whole =
        static_cast<std::size_t>(std::count(full.begin(), full.begin() + cut, '\n'));
    const auto got = RecordLog::read(dir.path() / "cut.jsonl");
    ASSERT_EQ(got.size(), whole) << "cut at " << cut;
    for (std::size_t i = 0; i < whole; ++i) EXPECT_EQ(got[i], records[i]);
    // Appending after a torn tail: the torn line is gone, the new record whole.
    {
      RecordLog again(dir.path() / "cut.jsonl");
      again.append({{"i", 99}});
    }
    const auto after = RecordLog::read(dir.path() / "cut.jsonl");
    ASSERT_EQ(after.size(), whole + 1) << "cut at " << cut;
    EXPECT_EQ(after.back(), (json{{"i", 99}}));
  }
  // A flipped byte inside a complete line fails its check; the others stand.
  std::string damaged = full;
  damaged[full.find("xxxx") + 1] = 'y';
  dir.write("damaged.jsonl", damaged);
  const auto kept = RecordLog::read(dir.path() / "damaged.jsonl");
  EXPECT_EQ(kept.size(), records.size() - 1);
  // Lines written before records carried a checksum are still read.
  dir.write("old.jsonl", "{\"a\":1}\n{\"a\":2}\n{\"a\":");
  EXPECT_EQ(RecordLog::read(dir.path() / "old.jsonl").size(), 2u);
  EXPECT_TRUE(RecordLog::read(dir.path() / "missing.jsonl").empty());
}

TEST(RecordLog, AFullDiskIsAnErrorNotALostRecord) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  RecordLog log("/dev/full");
  EXPECT_THROW(log.append({{"i", 1}}), Error);
}

TEST(RecordLog, AtomicWritesReplaceWholeFiles) {
  test::TempDir dir("atomic");
  const fs::path path = dir.path() / "summary.json";
  write_file_atomic(path, "first\n");
  write_file_atomic(path, "second, longer\n");
  EXPECT_EQ(read_text(path), "second, longer\n");
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1u);  // no temporary left behind
}

// The kill-and-resume tests check files, not memory: they run in the release build, where rkv is
// fast enough to be killed dozens of times in seconds (a sanitized one takes minutes).
#ifdef RKV_SANITIZED
#define RKV_SKIP_UNDER_SANITIZERS() \
  GTEST_SKIP() << "kill-and-resume runs in the release build (sanitized rkv is too slow)"
#else
#define RKV_SKIP_UNDER_SANITIZERS() static_cast<void>(0)
#endif

// Runs `args` (argv[0] is the program) with stdout and stderr to /dev/null; kills it with
// SIGKILL after `kill_after` unless it exits first. Returns true when it exited 0 on its own.
bool run_or_kill(const std::vector<std::string>& args, std::chrono::milliseconds kill_after) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
  const auto deadline = std::chrono::steady_clock::now() + kill_after;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Runs `args` killed at random moments until one run finishes; returns how many were killed.
// After each kill, the results kept in `log` must only have grown (a resumed run builds on what
// the killed ones wrote); some kills must land after results were written.
int run_killed_until_done(const std::vector<std::string>& args, const fs::path& log,
                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int killed = 0, killed_with_results = 0;
  std::size_t kept = 0;
  for (int attempt = 0; attempt < 200; ++attempt) {
    // Early attempts die young (mostly while loading or in the first results); later ones get
    // longer, so the run always completes.
    const int limit = 40 + 30 * attempt;
    if (run_or_kill(args, std::chrono::milliseconds(20 + rng() % limit))) {
      EXPECT_GT(killed_with_results, 1) << "kills should interrupt runs that had made progress";
      return killed;
    }
    ++killed;
    const std::size_t now = RecordLog::read(log).size();
    EXPECT_GE(now, kept) << "results were lost after kill " << killed;
    killed_with_results += now > 0 ? 1 : 0;
    kept = now;
  }
  ADD_FAILURE() << "never finished";
  return killed;
}

TEST(Durability, EvalKilledAtRandomResumesWithEverySampleOnce) {
  RKV_SKIP_UNDER_SANITIZERS();
  test::TempDir dir("eval-kill");
  const std::string model = test::shipped_model_dir().string();
  auto eval_args = [&](const fs::path& out) {
    return std::vector<std::string>{test::rkv_binary(),
                                    "eval",
                                    "-m",
                                    model,
                                    "--dataset",
                                    (fs::path(RKV_SOURCE_DIR) / "data/chains_test.jsonl").string(),
                                    "--preset",
                                    "chains",
                                    "--limit",
                                    "6",
                                    "--methods",
                                    "fullkv,rkv",
                                    "--budgets",
                                    "160",
                                    "--temp",
                                    "0",
                                    "-t",
                                    "1",
                                    "--max-batch",
                                    "2",
                                    "-o",
                                    out.string()};
  };
  ASSERT_TRUE(run_or_kill(eval_args(dir.path() / "whole"), std::chrono::minutes(10)));
  const int killed = run_killed_until_done(eval_args(dir.path() / "killed"),
                                           dir.path() / "killed/samples.jsonl", 7);
  EXPECT_GT(killed, 3) << "the test should interrupt the run several times";

  auto by_key = [](const fs::path& samples) {
    std::map<std::string, json> out;
    for (json r : RecordLog::read(samples)) {
      r.erase("time_s");
      const std::string key = r["example_id"].get<std::string>() + "/" +
                              r["method"].get<std::string>() + "/" +
                              r["budget_label"].get<std::string>();
      EXPECT_TRUE(out.emplace(key, r).second) << "duplicated: " << key;
    }
    return out;
  };
  const auto whole = by_key(dir.path() / "whole/samples.jsonl");
  const auto resumed = by_key(dir.path() / "killed/samples.jsonl");
  EXPECT_EQ(whole.size(), 12u);
  EXPECT_EQ(resumed, whole);
  // Every line of the resumed file is a complete, checked record.
  const std::string text = read_text(dir.path() / "killed/samples.jsonl");
  EXPECT_EQ(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')),
            RecordLog::read(dir.path() / "killed/samples.jsonl").size());
  EXPECT_EQ(test::read_json(dir.path() / "killed/summary.json"),
            test::read_json(dir.path() / "whole/summary.json"));
}

TEST(Durability, BenchKilledAtRandomResumesWithEveryRowOnce) {
  RKV_SKIP_UNDER_SANITIZERS();
  test::TempDir dir("bench-kill");
  const fs::path model = dir.path() / "m";
  ASSERT_TRUE(run_or_kill(
      {test::rkv_binary(), "make-model", "--shape", "tiny", "--dtype", "f32", "-o", model.string()},
      std::chrono::minutes(2)));
  const std::vector<std::string> args = {test::rkv_binary(),
                                         "bench",
                                         "-m",
                                         model.string(),
                                         "--gen-lens",
                                         "600",
                                         "--prompt-len",
                                         "16",
                                         "--methods",
                                         "fullkv,rkv,snapkv",
                                         "--budgets",
                                         "32,48",
                                         "--batch",
                                         "1,3",
                                         "-t",
                                         "1",
                                         "--kv-buffer",
                                         "16",
                                         "--json",
                                         (dir.path() / "b.json").string(),
                                         "--markdown",
                                         (dir.path() / "b.md").string(),
                                         "--resume"};
  const int killed = run_killed_until_done(args, dir.path() / "b.json.rows.jsonl", 11);
  EXPECT_GT(killed, 3) << "the test should interrupt the run several times";
  const json out = test::read_json(dir.path() / "b.json");
  std::set<std::string> keys;
  for (const json& row : out["rows"]) {
    const std::string key = row["method"].get<std::string>() + "/" +
                            row["budget_label"].get<std::string>() + "/" +
                            std::to_string(row["batch"].get<int>());
    EXPECT_TRUE(keys.insert(key).second) << "duplicated row " << key;
    EXPECT_EQ(row["tokens"].get<int>(), 600 * row["batch"].get<int>()) << key;
  }
  EXPECT_EQ(keys.size(), 2u + 2u * 2u * 2u);  // fullkv x 2 batches + 2 methods x 2 budgets x 2
  // The Markdown table has the same rows, each once.
  const std::string md = read_text(dir.path() / "b.md");
  EXPECT_EQ(static_cast<std::size_t>(std::count(md.begin(), md.end(), '\n')), 2 + keys.size());
}

}  // namespace
}  // namespace rkv
