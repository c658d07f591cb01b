#include "viz/viz.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "engine/compression_trace.h"

namespace rkv::viz {

extern const std::string_view kPageTemplate;

namespace {

using nlohmann::json;

constexpr std::int64_t kMaxCaches = 1 << 16;    // layers x KV heads a page can draw
constexpr std::int64_t kMaxPosition = 1 << 24;  // tokens a sequence can have
constexpr std::string_view kMarker = "<!--RKV-TRACES-->";

std::int64_t int_field(const json& r, const char* key, std::int64_t lo, std::int64_t hi) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number_integer())
    throw Error(std::string("\"") + key + "\" must be an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi)
    throw Error(std::string("\"") + key + "\" is " + std::to_string(v) + ", outside [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

const json& array_field(const json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_array()) throw Error(std::string("\"") + key + "\" must be a list");
  return *it;
}

struct Checker {
  TraceSummary s;
  bool header_seen = false;
  std::int64_t records_before = 0;  // lines of any type before this one
  std::set<std::int64_t> steps;
  int max_layer = -1, max_head = -1;

  void line(const json& r) {
    if (!r.is_object()) throw Error("a record must be a JSON object");
    std::string type;
    if (const auto it = r.find("type"); it != r.end()) {
      if (!it->is_string()) throw Error("\"type\" must be a string");
      type = it->get<std::string>();
    } else if (r.contains("kept_positions")) {
      type = "compression";  // version 1
    }
    if (type == "header")
      header(r);
    else if (type == "tokens")
      tokens(r);
    else if (type == "compression")
      compression(r);
    else if (type == "end")
      s.ended = true;
    else
      throw Error("unknown record type \"" + type + "\"");
    ++records_before;
  }

  void header(const json& r) {
    if (records_before != 0) throw Error("the header must be the first line");
    const auto format = r.find("format");
    if (format == r.end() || !format->is_string() || format->get<std::string>() != "rkv-trace")
      throw Error("not an rkv trace (\"format\" is not \"rkv-trace\")");
    const std::int64_t version = int_field(r, "version", 1, 1 << 20);
    if (version > kTraceVersion)
      throw Error("trace version " + std::to_string(version) + " is newer than this rkv reads (" +
                  std::to_string(kTraceVersion) + "): update rkv");
    s.version = static_cast<int>(version);
    s.layers = static_cast<int>(int_field(r, "layers", 1, kMaxCaches));
    s.kv_heads = static_cast<int>(int_field(r, "kv_heads", 1, kMaxCaches));
    if (static_cast<std::int64_t>(s.layers) * s.kv_heads > kMaxCaches)
      throw Error("too many caches to draw: " + std::to_string(s.layers) + " layers x " +
                  std::to_string(s.kv_heads) + " KV heads");
    if (const auto it = r.find("method"); it != r.end() && it->is_string())
      s.method = it->get<std::string>();
    header_seen = true;
  }

  void tokens(const json& r) {
    const std::int64_t start = int_field(r, "start", 0, kMaxPosition);
    if (start != s.tokens)
      throw Error("tokens start at position " + std::to_string(start) + ", expected " +
                  std::to_string(s.tokens) + " (records must be contiguous)");
    const json& ids = array_field(r, "ids");
    for (const json& id : ids)
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
        throw Error("\"ids\" must hold token ids (non-negative integers)");
    if (const auto it = r.find("text"); it != r.end()) {
      if (!it->is_array() || it->size() != ids.size())
        throw Error("\"text\" must be a list as long as \"ids\"");
      for (const json& t : *it)
        if (!t.is_string()) throw Error("\"text\" must hold strings");
    }
    s.tokens += static_cast<std::int64_t>(ids.size());
    if (s.tokens > kMaxPosition) throw Error("too many tokens");
  }

  void compression(const json& r) {
    const std::int64_t step = int_field(r, "step", 0, kMaxPosition);
    const std::int64_t layer =
        int_field(r, "layer", 0, header_seen ? s.layers - 1 : kMaxCaches - 1);
    const std::int64_t head =
        int_field(r, "head", 0, header_seen ? s.kv_heads - 1 : kMaxCaches - 1);
    const json& kept = array_field(r, "kept_positions");
    std::int64_t previous = -1;
    for (const json& p : kept) {
      if (!p.is_number_integer()) throw Error("\"kept_positions\" must hold integers");
      const std::int64_t v = p.get<std::int64_t>();
      if (v <= previous || v >= step)
        throw Error("\"kept_positions\" must be ascending positions before the step (" +
                    std::to_string(step) + ")");
      previous = v;
    }
    if (const auto it = r.find("n_after");
        it != r.end() && (!it->is_number_integer() ||
                          it->get<std::int64_t>() != static_cast<std::int64_t>(kept.size())))
      throw Error("\"n_after\" is not the number of kept positions");
    if (s.method.empty())
      if (const auto it = r.find("method"); it != r.end() && it->is_string())
        s.method = it->get<std::string>();
    max_layer = std::max(max_layer, static_cast<int>(layer));
    max_head = std::max(max_head, static_cast<int>(head));
    if (!header_seen &&
        static_cast<std::int64_t>(max_layer + 1) * static_cast<std::int64_t>(max_head + 1) >
            kMaxCaches)
      throw Error("too many caches to draw");
    steps.insert(step);
    ++s.records;
  }
};

// The page's script reads the embedded lines with JSON.parse. '<' can only occur inside JSON
// strings, where \u003c means the same character, so no line can close the <script> element.
std::string embed(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string escape_html(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

TraceSummary check_trace(std::string_view text) {
  Checker checker;
  std::int64_t line_number = 0;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    ++line_number;
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      json r;
      try {
        r = json::parse(line);
      } catch (const json::exception& e) {
        throw Error(std::string("not JSON: ") + e.what());
      }
      checker.line(r);
    } catch (const json::exception& e) {  // a field of an unexpected type the checks missed
      throw Error("line " + std::to_string(line_number) + ": " + e.what());
    } catch (const Error& e) {
      throw Error("line " + std::to_string(line_number) + ": " + e.what());
    }
  }
  if (checker.records_before == 0) throw Error("the trace is empty");
  TraceSummary s = checker.s;
  if (!checker.header_seen) {
    s.layers = checker.max_layer + 1;
    s.kv_heads = checker.max_head + 1;
  }
  s.compressions = static_cast<std::int64_t>(checker.steps.size());
  return s;
}

std::string render_page(const std::vector<PageTrace>& traces) {
  std::string blocks;
  for (const PageTrace& t : traces) {
    blocks += "<script type=\"application/x-ndjson\" class=\"rkv-trace\" data-label=\"";
    blocks += escape_html(t.label);
    blocks += "\">\n";
    blocks += embed(t.text);
    blocks += "</script>\n";
  }
  const std::size_t at = kPageTemplate.find(kMarker);
  if (at == std::string_view::npos) throw Error("the viz page template has no trace marker");
  std::string page;
  page.reserve(kPageTemplate.size() + blocks.size());
  page += kPageTemplate.substr(0, at);
  page += blocks;
  page += kPageTemplate.substr(at + kMarker.size());
  return page;
}

}  // namespace rkv::viz
