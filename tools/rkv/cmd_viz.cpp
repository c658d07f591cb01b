// rkv viz: turns compression traces (`rkv generate --trace`) into one self-contained HTML page.
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "viz/viz.h"

namespace rkv::cli {
namespace {

struct Args {
  std::vector<std::string> traces;
  std::vector<std::string> labels;
  std::string output;
};

void run(const Args& a) {
  if (a.traces.size() > 2) throw Error("give one trace, or two to compare side by side");
  if (!a.labels.empty() && a.labels.size() != a.traces.size())
    throw Error("--label: give one per trace");
  std::vector<viz::PageTrace> page_traces;
  for (std::size_t i = 0; i < a.traces.size(); ++i) {
    const std::string& path = a.traces[i];
    viz::PageTrace t;
    t.text = read_file(path, "the trace");
    viz::TraceSummary s;
    try {
      s = viz::check_trace(t.text);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
    t.label = a.labels.empty() ? std::filesystem::path(path).filename().string() : a.labels[i];
    std::fprintf(stderr,
                 "[rkv] %s: trace version %d, %s, %d layers x %d KV heads, %lld tokens, %lld "
                 "compressions%s\n",
                 path.c_str(), s.version, s.method.empty() ? "no method" : s.method.c_str(),
                 s.layers, s.kv_heads, static_cast<long long>(s.tokens),
                 static_cast<long long>(s.compressions),
                 s.ended ? "" : " (no end record: the sequence was still running)");
    page_traces.push_back(std::move(t));
  }
  const std::string page = viz::render_page(page_traces);
  write_file_atomic(a.output, page);
  std::fprintf(stderr, "[rkv] wrote %s (%s)\n", a.output.c_str(),
               format_bytes(static_cast<double>(page.size())).c_str());
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  app.add_option("traces", a->traces,
                 "Trace files written by `rkv generate --trace` (one, or two side by side)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("-o,--output", a->output, "The HTML page to write (self-contained, no network)")
      ->required();
  app.add_option("--label", a->labels,
                 "A title for each trace's panel, in order (default: the file names)");
  app.footer(
      "The page shows every token of the sequence shaded by the share of (layer, KV head) caches "
      "that still hold it after each compression (a slider steps through them), a layer x head "
      "grid to look at one cache, and kept/evicted counts. The trace format is in docs/USAGE.md.");
  app.callback([a] { run(*a); });
}

const RegisterCommand reg("viz",
                          "Draw compression traces as an HTML page of kept and evicted tokens",
                          setup);

}  // namespace
}  // namespace rkv::cli
