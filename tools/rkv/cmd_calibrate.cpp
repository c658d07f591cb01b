// rkv calibrate: computes TriAttention's calibration statistics for one model
// (../shared/spec/TRIATTENTION.md section 2): one forward pass over a plain text, and per layer,
// query head and frequency pair the mean complex pre-RoPE query and its mean modulus, written to
// a safetensors file (engine/query_stats.h) that triattention requests load.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "core/thread_pool.h"
#include "engine/query_stats.h"
#include "model/model.h"
#include "rkv/tokenizer.h"

namespace rkv::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string model;
  std::string tokenizer;
  std::string text_file;
  std::string out;
  int max_length = 32768;
  int chunk = 256;
  std::string separator;
  int threads = 1;
};

// Fails before the forward pass, not after it, when the output cannot be written; leaves no file
// behind that was not there.
void check_writable(const std::string& path) {
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (existed && fs::is_directory(path, ec))
    throw Error(path + ": is a directory; -o names the statistics file to write");
  {
    std::ofstream probe(path, std::ios::binary | std::ios::app);
    if (!probe) throw Error(path + ": cannot write the statistics file there");
  }
  if (!existed) fs::remove(path, ec);
}

// --separator's escapes: \n, \t, \r and \\ (a separator of newlines is awkward to type).
std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char e = text[++i];
    out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
  }
  return out;
}

void run(const Args& a) {
  std::error_code ec;
  if (!fs::exists(a.text_file, ec)) throw Error(a.text_file + ": calibration text file not found");
  if (!fs::is_regular_file(a.text_file, ec))
    throw Error(a.text_file + ": the calibration text must be a plain text file");
  const std::string text = read_file(a.text_file, "the calibration text");
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error(a.text_file + ": the calibration text file is empty");
  check_writable(a.out);

  auto model = Model::load(a.model);
  const ModelConfig& c = model->config();
  const Tokenizer tokenizer = Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer);

  // Each piece of text is its own sequence; without --separator the whole text is one, as the
  // reference runs it.
  std::vector<std::string> pieces;
  const std::string separator = unescape(a.separator);
  if (separator.empty()) {
    pieces.push_back(text);
  } else {
    for (std::size_t at = 0;;) {
      const std::size_t next = text.find(separator, at);
      pieces.push_back(text.substr(at, next == std::string::npos ? next : next - at));
      if (next == std::string::npos) break;
      at = next + separator.size();
    }
  }
  // Plain text as `rkv generate -p` encodes it (the tokenizer's special tokens, e.g. a BOS,
  // added as it adds them): the reference tokenizes with the HF tokenizer's defaults. At most
  // --max-length tokens in all, and no sequence longer than the model's context.
  const auto context = static_cast<std::size_t>(
      c.max_position_embeddings > 0 ? c.max_position_embeddings : a.max_length);
  std::vector<std::vector<int>> sequences;
  const auto max_length = static_cast<std::size_t>(a.max_length);
  std::size_t total = 0, cut = 0;
  bool limited = false;
  for (const std::string& piece : pieces) {
    if (total >= max_length) {
      limited = true;
      break;
    }
    if (piece.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::vector<std::int32_t> ids = tokenizer.encode(piece, true);
    std::vector<int> seq(ids.begin(), ids.end());
    if (seq.size() > context) {
      seq.resize(context);
      ++cut;
    }
    if (seq.size() > max_length - total) {
      seq.resize(max_length - total);
      limited = true;
    }
    total += seq.size();
    sequences.push_back(std::move(seq));
  }
  if (cut > 0)
    std::fprintf(stderr,
                 "[rkv] calibrate: %zu sequence%s longer than the model's context of %zu tokens: "
                 "using the first %zu tokens of each\n",
                 cut, cut == 1 ? " is" : "s are", context, context);
  if (total < 2)
    throw Error(a.text_file + ": the calibration text is " + std::to_string(total) + " token" +
                (total == 1 ? "" : "s") +
                "; the statistics need at least 2 (use a longer text: the reference uses up to "
                "32768)");

  std::fprintf(stderr,
               "[rkv] calibrate: %zu tokens of %s%s in %zu sequence%s, %d layers x %d query "
               "heads\n",
               total, a.text_file.c_str(), limited ? " (--max-length: the rest left out)" : "",
               sequences.size(), sequences.size() == 1 ? "" : "s", c.num_layers, c.num_heads);
  ThreadPool pool(a.threads);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_report = start;
  QueryStats stats =
      calibrate_queries(*model, pool, sequences, a.chunk, [&](std::int64_t done, std::int64_t all) {
        // A line every few seconds, so a long run shows it is moving.
        const auto now = Clock::now();
        if (done == all || now - last_report < std::chrono::seconds(5)) return;
        last_report = now;
        std::fprintf(stderr, "[rkv] calibrate: %lld/%lld tokens (%.0f%%), %.1f s\n",
                     static_cast<long long>(done), static_cast<long long>(all),
                     100.0 * static_cast<double>(done) / static_cast<double>(all),
                     std::chrono::duration<double>(now - start).count());
      });
  stats.text = fs::path(a.text_file).filename().string();
  save_query_stats(a.out, stats);

  // The mean resultant length |qbar| / qabs over every head and frequency pair: how tightly the
  // pre-RoPE queries cluster (the spec's Qwen3-8B file: 0.72).
  const tri::Stats& s = stats.stats;
  double concentration = 0.0;
  std::size_t cells = 0;
  for (std::size_t i = 0; i < s.abs_mean.size(); ++i) {
    if (s.abs_mean[i] <= 0.0) continue;
    concentration += std::hypot(s.mean_re[i], s.mean_im[i]) / s.abs_mean[i];
    ++cells;
  }
  if (cells > 0) concentration /= static_cast<double>(cells);
  std::fprintf(stderr,
               "[rkv] wrote %s: %lld tokens, %d layers x %d query heads x %d frequency pairs, "
               "mean concentration |qbar|/qabs %.3f, %.1f s\n",
               a.out.c_str(), static_cast<long long>(stats.tokens), s.layers, s.q_heads, s.freqs,
               concentration, std::chrono::duration<double>(Clock::now() - start).count());
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_model_options(app, a->model, a->tokenizer);
  add_flag_option(app, "-f,--file", a->text_file,
                  "The calibration text: a plain text file, tokenized as it is (no chat "
                  "template), e.g. a book chapter, an article or code")
      ->required();
  add_flag_option(app, "-o,--out", a->out,
                  "Where to write the statistics (.safetensors; the engine looks for "
                  "query_stats.safetensors in the model directory by default)")
      ->required();
  add_flag_option(app, "--max-length", a->max_length,
                  "Use at most the first N tokens of the text (and never more than the model's "
                  "context)")
      ->check(at_least(2));
  add_flag_option(app, "--separator", a->separator,
                  "Split the text at each occurrence of this string (escapes \\n, \\t, \\r, "
                  "\\\\) into sequences, each run from position 0 in a cache of its own (default: "
                  "none, the whole text is one sequence, as the reference runs it)");
  add_flag_option(app, "--chunk", a->chunk,
                  "Tokens per forward pass; the statistics do not depend on it beyond float "
                  "rounding")
      ->check(at_least(1));
  add_threads_option(app, a->threads);
  app.callback([a] { run(*a); });
}

const RegisterCommand reg(
    "calibrate",
    "Compute a model's TriAttention statistics (the mean pre-RoPE query per head and frequency) "
    "from a text, on the CPU",
    setup);

}  // namespace
}  // namespace rkv::cli
