// Compression traces (`rkv generate --trace FILE`, `rkv serve --viz N`): one sequence's tokens and
// what every (layer, KV head) cache kept after each compression, as JSON lines. The format is
// versioned and documented in docs/USAGE.md ("Trace format"); `rkv viz` turns a trace into a page.
//
// Version 2 (written here), one JSON object per line, each with a "type":
//   header       first line: format "rkv-trace", version, method, budget, buffer, window,
//                layers, kv_heads, prompt_tokens, model
//   tokens       {"start": position of the first, "ids": [...], "text": [...]}: consecutive
//                tokens of the sequence (prompt first) with the text each one completes
//                (UTF-8; a token that only starts a character has "" and the next one carries it)
//   compression  one (compression, KV head): step (tokens processed, so positions 0..step-1
//                existed), first_reader (the first position whose attention saw the result:
//                step - 1 in a decode step, step after a prompt; added 2026-11-27), layer,
//                head, method, n_before, n_after, kept_positions (ascending original
//                positions), and importance/redundancy/final_score summaries. A position q at or
//                after first_reader attends, in that (layer, head), to kept_positions plus
//                step..q, until the next compression whose first_reader is at most q.
//   end          last line: generated tokens, finish_reason, compressions
// Version 1 (before 2026-11-23) had only compression lines, without "type".
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/kv_memory.h"

namespace rkv {

class Model;
class Tokenizer;
class StreamingDecoder;
struct PreparedRequest;
struct Completion;

inline constexpr int kTraceVersion = 2;

class CompressionTrace {
 public:
  // Receives each line without its newline.
  using Sink = std::function<void(const std::string& line)>;

  // Writes to `sink`. The tokenizer (may be null: tokens without text) must outlive the trace.
  CompressionTrace(Sink sink, const Tokenizer* tokenizer);
  // Writes to a file; throws rkv::Error when it cannot be written.
  CompressionTrace(const std::string& path, const Tokenizer* tokenizer);
  ~CompressionTrace();

  // The header and the prompt's tokens: call once, before the request is submitted.
  void begin(const PreparedRequest& request, const Model& model);
  // A generated token (in order).
  void token(int id);
  // One compression of one layer: a line per KV head.
  void record(const CompressionEvent& event);
  // The last line (tokens still buffered are written first).
  void end(const Completion& completion);

  std::int64_t lines() const;

 private:
  void write(const std::string& line);
  void flush_tokens();  // under mutex_

  Sink sink_;
  std::unique_ptr<std::ofstream> file_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<StreamingDecoder> decoder_;
  mutable std::mutex mutex_;
  std::int64_t lines_ = 0;
  std::int64_t next_position_ = 0;  // of the first buffered token
  std::vector<int> pending_ids_;    // generated tokens not yet written
  std::vector<std::string> pending_text_;
};

}  // namespace rkv
