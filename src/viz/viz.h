// `rkv viz`: a compression trace (src/engine/compression_trace.h; docs/USAGE.md, "Trace format")
// as one self-contained HTML page that shows which tokens each (layer, KV head) cache keeps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::viz {

// What a trace holds, once checked.
struct TraceSummary {
  int version = 1;  // 1: compression records only; 2: typed records (header, tokens, ..., end)
  std::string method;
  int layers = 0;                 // from the header, else one past the largest layer seen
  int kv_heads = 0;               // the same for heads
  std::int64_t tokens = 0;        // tokens with ids (0 for version 1)
  std::int64_t compressions = 0;  // distinct compression steps
  std::int64_t records = 0;       // compression lines (one per compression, layer and KV head)
  bool ended = false;             // the end record is there (a finished sequence)
};

// Checks a trace line by line: each line a JSON object of a known record type with the fields
// the page reads, tokens contiguous from position 0, kept positions ascending and before their
// step, layers and heads within the header's. Throws rkv::Error naming the line otherwise.
TraceSummary check_trace(std::string_view text);

struct PageTrace {
  std::string label;  // the panel's title (e.g. the file name)
  std::string text;   // the trace's JSON lines, checked by check_trace
};

// The page: one panel per trace (side by side), each trace embedded as it is (no network
// fetches; the page's own script reads the records).
std::string render_page(const std::vector<PageTrace>& traces);

// Text made safe for HTML element content and attribute values (&, <, >, ").
std::string escape_html(std::string_view text);

}  // namespace rkv::viz
