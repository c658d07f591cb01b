// `rkv bench` end to end on a tiny random checkpoint: the JSON rows carry the fields the issue
// names, the memory saving follows from the slot sizes, and `--batch max` fills the cap.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <tuple>

#include "core/svg_plot.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace rkv {
namespace {

namespace fs = std::filesystem;

// A tiny random checkpoint at dir/model, and the start of a `rkv bench-decode` command on it.
std::string tiny_bench_decode(const test::TempDir& dir) {
  RandomCheckpointOptions options;
  options.shape = "tiny";
  write_random_checkpoint(dir.path() / "model", options);
  return test::rkv_binary() + " bench-decode -m " + (dir.path() / "model").string();
}

TEST(BenchCli, TableRowsAndBatchMax) {
  const fs::path dir = fs::temp_directory_path() / ("rkv-bench-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandomCheckpointOptions options;
  options.shape = "tiny";
  write_random_checkpoint(dir / "model", options);
  const std::string cmd =
      test::rkv_binary() + " bench -m " + (dir / "model").string() +
      " --prompt-len 16 --gen-lens 64 --methods fullkv,rkv --budgets 24,25% --batch 1,max"
      " --kv-memory 1MiB --kv-buffer 8 -t 1 --json " +
      (dir / "b.json").string() + " --latency-plot " + (dir / "lat.svg").string() +
      " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = test::read_json(dir / "b.json");
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 6u);  // fullkv x 2 batches + rkv x 2 budgets x 2 batches
  // tiny: 4 layers, 2 KV heads, head_dim 32; a bf16 checkpoint gets a bf16 cache by default:
  // 2 bytes per value: keys and values of 4 layers x 2 KV heads, 1024 bytes per entry.
  const double per_entry = 4 * 2 * 32 * 2 * 2;
  EXPECT_EQ(j["kv_dtype"], "bf16");
  // Per cached token the slot also holds an int32 position and a float state per layer and head.
  const double per_token = per_entry + 4 * 2 * (4 + 4);
  EXPECT_EQ(j["kv_bytes_per_token"]["total"].get<double>(), per_token);
  // rkv's slot adds its query ring: window 8 x 4 layers x 4 query heads x 32 floats.
  const double ring = 8 * 4 * 4 * 32 * 4;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    for (const char* key : {"method", "budget", "batch", "kv_bytes_per_sequence",
                            "memory_saving_pct", "throughput_tok_s", "tokens", "decode_s"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_EQ(row["kv_dtype"], "bf16");
    const int batch = row["batch"];
    EXPECT_EQ(row["tokens"].get<int>(), batch * 64);
    const double bytes = row["kv_bytes_per_sequence"];
    if (row["method"] == "fullkv") {
      EXPECT_EQ(bytes, per_token * (16 + 64));
      EXPECT_EQ(row["memory_saving_pct"].get<double>(), 0.0);
    } else {
      const int budget = row["budget"];
      EXPECT_TRUE(budget == 24 || budget == 16) << budget;  // 25% of 64 generated tokens
      EXPECT_EQ(bytes, per_token * (budget + 8) + ring);
      EXPECT_NEAR(row["memory_saving_pct"].get<double>(),
                  100.0 * (1.0 - (per_token * (budget + 8) + ring) / (per_token * 80)), 1e-9);
    }
    // Rows alternate --batch 1 and --batch max (as many slots as fit in 1 MiB).
    EXPECT_EQ(batch, i % 2 == 0 ? 1 : static_cast<int>((1 << 20) / bytes));
  }
  std::ifstream svg(dir / "lat.svg");
  const std::string text((std::istreambuf_iterator<char>(svg)), {});
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  EXPECT_NE(text.find("rkv (budget 24)"), std::string::npos);
  fs::remove_all(dir);
}

// `rkv bench-decode`: -n 0 measures prompt processing alone (as llama-bench's -n 0 does), -p 0
// -n 0 is refused, and a count below its minimum gets a plain message naming the flag.
TEST(BenchDecodeCli, PromptAloneAndPlainCountErrors) {
  const fs::path dir =
      fs::temp_directory_path() / ("rkv-bench-decode-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandomCheckpointOptions options;
  options.shape = "tiny";
  write_random_checkpoint(dir / "model", options);
  const std::string base =
      test::rkv_binary() + " bench-decode -m " + (dir / "model").string() + " -t 1 --no-limits ";
  const std::string json = (dir / "r.json").string();
  ASSERT_EQ(
      std::system((base + "-p 16 -n 0 --depths 0,8 --json " + json + " >/dev/null 2>&1").c_str()),
      0);
  const auto rows = test::read_json(json)["results"];
  ASSERT_EQ(rows.size(), 1u) << rows.dump();
  EXPECT_EQ(rows[0]["test"], "pp16");
  // The tiny shape (config.json): 4 layers, hidden 128, 4 query heads and 2 KV heads of 32, FFN
  // 384, vocabulary 1024 with a tied output head. Per layer q 128x128, k and v 64x128, o 128x128,
  // gate, up and down 384x128; prefill runs the head for the last of the 16 tokens only, and
  // causal attention adds 2 x 4 layers x 4 heads x 32 x 16 x 17 flops.
  const double layer_params = 4.0 * (128 * 128 + 2 * 64 * 128 + 128 * 128 + 3 * 384 * 128);
  const double flops = 2.0 * layer_params * 16 + 2.0 * 1024 * 128 + 2.0 * 4 * 4 * 32 * 16 * 17;
  EXPECT_NEAR(rows[0]["gflop_per_s"].get<double>() * rows[0]["seconds"].get<double>() * 1e9, flops,
              1e-6 * flops);
  std::string out;
  EXPECT_EQ(test::run_command(base + "-p 0 -n 0 2>&1", out), 1);
  EXPECT_NE(out.find("nothing to measure"), std::string::npos) << out;
  for (const char* flag : {"-r 0", "-n -1", "-p -2", "-r x"}) {
    EXPECT_NE(test::run_command(base + flag + " 2>&1", out), 0) << flag;
    EXPECT_NE(out.find("must be an integer >= "), std::string::npos) << flag << ": " << out;
    EXPECT_EQ(out.find("e+308"), std::string::npos) << out;
  }
  fs::remove_all(dir);
}

// With its limits (the default), every bench-decode row is read against the limit measured
// just before and just after its timed repetition: decode against the streaming read, prompt
// processing against the compute peak, each row's limit the mean of its two and its fraction
// the row's own rate over it.
TEST(BenchDecodeCli, EveryRowIsReadAgainstTheLimitAroundIt) {
  const test::TempDir dir("bench-decode-limits");
  const std::string json = (dir.path() / "r.json").string();
  std::string out;
  ASSERT_EQ(test::run_command(tiny_bench_decode(dir) + " -t 1 -p 8 -n 2 --depths 0,4 -r 2 --json " +
                                  json + " 2>&1",
                              out),
            0)
      << out;
  const auto doc = test::read_json(json);
  EXPECT_EQ(doc["machine_limits"]["measured"], "just before and after each timed repetition");
  const auto rows = doc["results"];
  ASSERT_EQ(rows.size(), 3u) << rows.dump();
  for (const auto& row : rows) {
    const bool decode = row["test"].get<std::string>().rfind("tg", 0) == 0;
    const double before = row["limit_before"], after = row["limit_after"], limit = row["limit"];
    EXPECT_GT(before, 0.0) << row.dump();
    EXPECT_GT(after, 0.0) << row.dump();
    EXPECT_DOUBLE_EQ(limit, (before + after) / 2.0) << row.dump();
    const double rate = row[decode ? "gb_per_s" : "gflop_per_s"];
    EXPECT_DOUBLE_EQ(row["fraction_of_limit"].get<double>(), rate / limit) << row.dump();
  }
  // The printed table gives each row's limit in its own unit.
  EXPECT_TRUE(
      std::regex_search(out, std::regex(R"(\| pp8 \|.*GFLOP/s \| [0-9.]+ GFLOP/s \| [0-9]+% \|)")))
      << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex(R"(\| tg2 \| 4 \|.*GB/s \| [0-9.]+ GB/s \| [0-9]+% \|)")))
      << out;
}

// `rkv --version` and bench-decode's JSON name the commit rkv was built from: the same string in
// both, and a commit of the sources' git history (with "-dirty" when tracked files differed from
// it), or "unknown" where the sources are not a git checkout.
TEST(RkvCli, VersionAndBenchJsonNameTheCommitItWasBuiltFrom) {
  std::string out;
  ASSERT_EQ(test::run_command(test::rkv_binary() + " --version 2>&1", out), 0) << out;
  const std::string prefix = "rkv 0.1.0 (";
  const std::size_t close = out.find(')');
  ASSERT_TRUE(out.rfind(prefix, 0) == 0 && close != std::string::npos) << out;
  const std::string commit = out.substr(prefix.size(), close - prefix.size());
  const std::string source = RKV_SOURCE_DIR;
  std::string git_out;
  const bool checkout =
      test::run_command("git -C " + source + " rev-parse --git-dir 2>&1", git_out) == 0;
  if (!checkout) {
    EXPECT_EQ(commit, "unknown");
  } else {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(commit, m, std::regex("([0-9a-f]{7,})(-dirty)?"))) << commit;
    const std::string hash = m[1];
    EXPECT_EQ(
        test::run_command("git -C " + source + " cat-file -e " + hash + "^{commit} 2>&1", git_out),
        0)
        << commit << " is not a commit of " << source << ": " << git_out;
  }
  const test::TempDir dir("bench-decode-commit");
  const std::string json = (dir.path() / "r.json").string();
  ASSERT_EQ(
      test::run_command(
          tiny_bench_decode(dir) + " -t 1 --no-limits -p 8 -n 0 --json " + json + " 2>&1", out),
      0)
      << out;
  EXPECT_EQ(test::read_json(json)["build_commit"], commit);
}

// --fill stream compresses where decoding's every-buffer trigger would, prefill once at the end;
// hand-worked on the tiny shape's 4 layers, R-KV budget 32, buffer 16, 4 decoded tokens:
//  * depth 100, prefill: one compression of each layer (100 -> 32 entries), then 4 entries: 36;
//  * depth 100, stream: batches end at 16, 32, ..., 96; the layers hold more than the budget at
//    48, 64, 80 and 96 (4 compressions of 4 layers), the last batch (96-99) and the 4 decoded
//    tokens add 8 entries to the 32 kept: 40;
//  * depth 96, a multiple of the buffer: the same 4 x 4 compressions, the last at 96, and then
//    the 4 decoded tokens: 36, as after prefill (one compression of each layer, 96 -> 32).
TEST(BenchDecodeCli, StreamFillCompressesWhereDecodingWould) {
  const test::TempDir dir("bench-decode-fill");
  const std::string base = tiny_bench_decode(dir) +
                           " -t 1 --no-limits -p 0 -n 4 --kv-method rkv --kv-budget 32 "
                           "--kv-buffer 16 ";
  const std::string json = (dir.path() / "r.json").string();
  for (const auto& [fill, depth, compressions, entries] :
       {std::tuple{"prefill", 100, 4, 36}, std::tuple{"stream", 100, 16, 40},
        std::tuple{"prefill", 96, 4, 36}, std::tuple{"stream", 96, 16, 36}}) {
    const std::string run = base + "-d " + std::to_string(depth) + " --fill " + fill;
    ASSERT_EQ(std::system((run + " --json " + json + " >/dev/null 2>&1").c_str()), 0) << run;
    const auto out = test::read_json(json);
    EXPECT_EQ(out["fill"], fill);
    const auto row = out["results"].at(0);
    EXPECT_EQ(row["test"], "tg4") << run;
    EXPECT_EQ(row["compressions"].get<int>(), compressions) << run;
    EXPECT_EQ(row["entries_per_head"].get<int>(), entries) << run;
  }
  std::string err;
  EXPECT_NE(test::run_command(base + "-d 100 --fill decode 2>&1", err), 0);
  EXPECT_NE(err.find("--fill"), std::string::npos) << err;
}

// --interleave: the depths' caches are filled first and their decode steps then take turns, so
// with one repetition every depth's row is read against one limit, measured around the whole
// group; each depth still decodes exactly what it would alone (R-KV at budget 32, buffer 16:
// depth 100 is compressed once per layer to 32 entries and the 4 decoded tokens add 4, 36; depth
// 8 is under the budget and holds 8 + 4 = 12), and its bytes are the formula's: every matrix
// once a step, and the entries each step reads (those held before it plus its own, every layer).
TEST(BenchDecodeCli, InterleavedDepthsShareOneLimitAndDecodeAsAlone) {
  const test::TempDir dir("bench-decode-interleave");
  const std::string json = (dir.path() / "r.json").string();
  std::string out;
  ASSERT_EQ(test::run_command(tiny_bench_decode(dir) +
                                  " -t 1 -p 0 -n 4 --depths 8,100 --kv-method rkv --kv-budget 32 "
                                  "--kv-buffer 16 --kv-dtype f32 --interleave --json " +
                                  json + " 2>&1",
                              out),
            0)
      << out;
  const auto doc = test::read_json(json);
  EXPECT_EQ(doc["interleaved"], true);
  const auto rows = doc["results"];
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["depth"], 8);
  EXPECT_EQ(rows[1]["depth"], 100);
  EXPECT_EQ(rows[0]["limit_before"], rows[1]["limit_before"]) << rows.dump();
  EXPECT_EQ(rows[0]["limit_after"], rows[1]["limit_after"]) << rows.dump();
  EXPECT_EQ(rows[0]["compressions"], 0) << rows.dump();
  EXPECT_EQ(rows[0]["entries_per_head"], 12) << rows.dump();
  EXPECT_EQ(rows[1]["compressions"], 4) << rows.dump();
  EXPECT_EQ(rows[1]["entries_per_head"], 36) << rows.dump();
  const double matrices = doc["matmul_bytes"];
  // An f32 cache of the tiny shape's 2 KV heads of 32: keys and values, 512 bytes an entry of a
  // layer; 4 layers.
  const double entry = 2.0 * 2 * 32 * 4;
  for (const auto& [k, held] : {std::pair{0, 8}, std::pair{1, 32}}) {
    double bytes = 0.0;
    for (int i = 0; i < 4; ++i) bytes += matrices + 4.0 * (held + i + 1) * entry;
    const auto& row = rows[static_cast<std::size_t>(k)];
    EXPECT_NEAR(row["gb_per_s"].get<double>() * row["seconds"].get<double>() * 1e9, bytes,
                1e-9 * bytes)
        << row.dump();
  }
}

TEST(SvgPlot, DrawsEverySeriesWithItsPoints) {
  const std::string svg = render_line_plot({{"a", {0, 1, 2}, {1, 2, 3}}, {"b <c>", {0, 2}, {3, 1}}},
                                           {"title", "x", "y", true, true});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  std::size_t lines = 0, dots = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1))
    ++lines;
  for (std::size_t at = svg.find("<circle"); at != std::string::npos;
       at = svg.find("<circle", at + 1))
    ++dots;
  EXPECT_EQ(lines, 2u);
  EXPECT_EQ(dots, 5u);
  EXPECT_NE(svg.find("b &lt;c&gt;"), std::string::npos);
}

// --steady-state: every step advances every sequence by one token (finished ones are replaced at
// once), so N timed steps of a batch of B produce exactly N x B tokens, compressions included.
TEST(BenchCli, SteadyStateTimesStepsOfTheWholeBatch) {
  const fs::path dir =
      fs::temp_directory_path() / ("rkv-bench-steady-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandomCheckpointOptions options;
  options.shape = "tiny";
  write_random_checkpoint(dir / "model", options);
  const std::string cmd = test::rkv_binary() + " bench -m " + (dir / "model").string() +
                          " --prompt-len 16 --gen-lens 96 --methods fullkv,rkv --budgets 24"
                          " --batch 5 --kv-buffer 8 --steady-state 40 -t 1 --json " +
                          (dir / "s.json").string() + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto rows = test::read_json(dir / "s.json")["rows"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["steady_state_steps"], 40) << row.dump();
    EXPECT_EQ(row["batch"], 5) << row.dump();
    EXPECT_EQ(row["tokens"], 200) << row.dump();
    EXPECT_GT(row["throughput_tok_s"].get<double>(), 0.0) << row.dump();
    // The share of the timed steps spent compressing: none for fullkv; for rkv (budget 24,
    // buffer 8, sequences of up to 112 tokens) some, and less than all.
    const double share = row["compression_share"].get<double>();
    if (row["method"] == "fullkv") {
      EXPECT_EQ(share, 0.0) << row.dump();
    } else {
      EXPECT_GT(share, 0.0) << row.dump();
      EXPECT_LT(share, 1.0) << row.dump();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rkv
