// rkv generate: streams a completion of a prompt (or of a chat turn) to stdout.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "core/thread_pool.h"
#include "engine/case_dump.h"
#include "engine/compression_trace.h"
#include "generate_options.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model;
  std::string matmul_precision;
  std::string device;  // --device
  std::string attention_precision;
  std::string tokenizer;
  std::string prompt;
  std::string prompt_file;
  std::string prompt_ids;
  bool chat = false;
  std::string system;
  int threads = 1;
  bool print_ids = false;
  std::string trace;
  std::string logits_out;
  std::string replay_ids;
  std::string dump_case;
  int dump_case_limit = 8;
  std::shared_ptr<GenerateFlags> gen = std::make_shared<GenerateFlags>();
};

// --logits-out: a NumPy .npy file of float32 rows [positions][vocab], written as they come; the
// header, which holds the row count, is rewritten at the end (a fixed 128 bytes).
class LogitsFile {
 public:
  LogitsFile(const std::string& path, int vocab)
      : path_(path), vocab_(vocab), out_(path, std::ios::binary) {
    if (!out_) throw Error(path + ": cannot open the logits file for writing");
    write_header();
  }
  void row(std::span<const float> logits) {
    out_.write(reinterpret_cast<const char*>(logits.data()),
               static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out_) throw Error(path_ + ": cannot write the logits file");
    ++rows_;
  }
  void finish() {
    out_.seekp(0);
    write_header();
    out_.close();
    if (!out_) throw Error(path_ + ": cannot write the logits file");
  }

 private:
  void write_header() {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows_) + ", " + std::to_string(vocab_) + "), }";
    dict.resize(kHeader - 10 - 1, ' ');
    dict += '\n';
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out_.write(magic, 8);
    const std::uint16_t n = static_cast<std::uint16_t>(dict.size());
    const char len[2] = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
    out_.write(len, 2);
    out_.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  }
  static constexpr std::size_t kHeader = 128;  // a multiple of 64, as NumPy aligns it
  std::string path_;
  int vocab_;
  std::ofstream out_;
  std::int64_t rows_ = 0;
};

void run(const Args& a) {
  const int sources = !a.prompt.empty() + !a.prompt_file.empty() + !a.prompt_ids.empty();
  if (sources != 1) throw Error("give exactly one of --prompt, --file or --prompt-ids");
  if (!a.prompt_ids.empty() && a.chat) throw Error("--chat needs a text prompt, not --prompt-ids");
  const GenerateFlags& g = *a.gen;
  if (!g.stops.empty() && a.print_ids) throw Error("--stop needs text output: drop --print-ids");

  Request request;
  request.compression = g.kv->params();
  // Token ids in and out need no tokenizer, unless the method (SkipKV) or steering read the
  // tokens' text, or the compression's triggers its line-break or </think> ids.
  const CompressionParams& kv = request.compression;
  const bool needs_tokenizer = a.prompt_ids.empty() || !a.print_ids || kv.info().needs.token_text ||
                               (kv.info().compresses && kv.trigger == Trigger::newline) ||
                               (kv.info().compresses && kv.think_only) ||
                               !g.steering->path.empty() || !a.trace.empty() ||
                               g.thinking_budget >= 0;
  DeviceNeeds needs;
  needs.compressing_methods =
      compressing_methods({std::string(method_name(request.compression.method))});
  needs.steering = !g.steering->path.empty();
  needs.kv_dtype = g.kv->kv_dtype();
  auto model = load_model(a.model, a.matmul_precision, a.attention_precision, a.device, needs);
  std::unique_ptr<Tokenizer> tokenizer;
  if (needs_tokenizer)
    tokenizer =
        std::make_unique<Tokenizer>(Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer));
  if (!a.prompt_ids.empty()) {
    request.prompt_ids = parse_int_list(a.prompt_ids, "--prompt-ids");
    if (request.prompt_ids.empty()) throw Error("--prompt-ids: give at least one token id");
  } else {
    const std::string text =
        a.prompt_file.empty() ? a.prompt : read_file(a.prompt_file, "the prompt file");
    if (a.chat) {
      if (!a.system.empty()) request.messages.push_back({"system", a.system});
      request.messages.push_back({"user", text});
    } else {
      request.text = text;
    }
  }
  request.max_new_tokens = g.n_predict;
  request.sampling = g.sampling();
  request.stop = g.stops;
  request.ignore_eos = g.ignore_eos;
  request.thinking_budget = g.thinking_budget;
  request.thinking_budget_message = g.thinking_budget_message;
  request.decode_text = !a.print_ids;
  request.steering = g.steering->load(*model);
  if (!a.replay_ids.empty()) {
    request.replay_ids = parse_int_list(a.replay_ids, "--replay-ids");
    if (request.replay_ids.empty()) throw Error("--replay-ids: give at least one token id");
  }
  std::unique_ptr<LogitsFile> logits;
  if (!a.logits_out.empty()) {
    logits = std::make_unique<LogitsFile>(a.logits_out, model->config().vocab_size);
    request.on_logits = [&logits](int, std::span<const float> row) { logits->row(row); };
  }
  std::unique_ptr<CompressionTrace> trace;
  std::unique_ptr<CaseDumper> dumper;
  if (!a.trace.empty()) trace = std::make_unique<CompressionTrace>(a.trace, tokenizer.get());
  if (!a.dump_case.empty())
    dumper =
        std::make_unique<CaseDumper>(a.dump_case, request.compression.method, a.dump_case_limit);
  if (trace || dumper) {
    request.on_compression = [&trace, &dumper](const CompressionEvent& e) {
      if (trace) trace->record(e);
      if (dumper) dumper->record(e);
    };
  }

  ThreadPool pool(a.threads);
  EngineOptions engine_options;
  engine_options.context_size = g.ctx_size;
  engine_options.prefill_chunk = 512;
  apply_chat_template_options(engine_options, g.chat_template, g.chat_template_file);
  engine_options.kv_dtype = g.kv->kv_dtype();
  engine_options.query_stats =
      g.kv->load_query_stats(a.model, *model, request.compression.info().needs.query_stats);
  Engine engine(*model, tokenizer.get(), pool, engine_options);
  const std::uint64_t seed = request.sampling.seed;
  PreparedRequest prepared = engine.prepare(std::move(request));
  if (trace) trace->begin(prepared, *model);
  engine.submit(std::move(prepared), {.on_token =
                                          [&trace](const TokenEvent& e) {
                                            if (trace && e.token >= 0) trace->token(e.token);
                                            std::fwrite(e.text.data(), 1, e.text.size(), stdout);
                                            std::fflush(stdout);
                                          },
                                      .on_done = {}});
  engine.run_until_idle();
  const Completion c = engine.take_completions().at(0);
  if (trace) trace->end(c);
  if (logits) logits->finish();
  if (c.stop_reason == "error") throw Error(c.error);
  if (a.print_ids)
    std::printf("%s\n", int_list_json(c.tokens).c_str());
  else
    std::printf("\n");
  std::fflush(stdout);
  const double prefill_rate = c.prefill_seconds > 0 ? c.prompt_tokens / c.prefill_seconds : 0.0;
  const double decode_rate =
      c.decode_seconds > 0 ? static_cast<double>(c.tokens.size()) / c.decode_seconds : 0.0;
  std::fprintf(stderr,
               "[rkv] prompt tokens: %d, generated tokens: %zu, prefill: %.2f tokens/s, decode: "
               "%.2f tokens/s, "
               "stop: %s, KV cache: %zu bytes (%s; %s, %d entries per head, %s, %lld "
               "compressions), seed: %llu\n",
               c.prompt_tokens, c.tokens.size(), prefill_rate, decode_rate,
               c.stop_reason == "stop" ? "stopped" : c.stop_reason.c_str(), c.kv_bytes,
               format_bytes(static_cast<double>(c.kv_bytes)).c_str(),
               std::string(kv_dtype_name(c.kv_dtype)).c_str(), c.cache_capacity,
               std::string(method_name(c.compression.method)).c_str(),
               static_cast<long long>(c.compressions), static_cast<unsigned long long>(seed));
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_model_options(app, a->model, a->tokenizer);
  add_flag_option(app, "-p,--prompt", a->prompt, "Prompt text");
  add_flag_option(app, "-f,--file", a->prompt_file, "Read the prompt text from this file");
  add_flag_option(app, "--prompt-ids", a->prompt_ids,
                  "Start from these comma-separated token ids instead of text");
  app.add_flag("--chat", a->chat, "Wrap the prompt as a user turn in the model's chat template")
      ->envname("RKV_ARG_CHAT");
  add_flag_option(app, "--system", a->system, "System message for --chat");
  app.add_flag("--print-ids", a->print_ids,
               "Print the generated token ids as a JSON list instead of text");
  add_precision_options(app, a->matmul_precision, a->attention_precision);
  add_device_option(app, a->device);
  add_threads_option(app, a->threads);
  add_generate_options(app, a->gen, "Maximum number of tokens to generate");
  add_flag_option(
      app, "--dump-case", a->dump_case,
      "Save the inputs of real compressions as case files for `rkv policy-run` in this directory "
      "(streamingllm, snapkv, rkv)")
      ->group("KV compression");
  add_flag_option(app, "--dump-case-limit", a->dump_case_limit,
                  "Most case files --dump-case writes")
      ->group("KV compression")
      ->check(at_least(1));
  add_flag_option(
      app, "--trace", a->trace,
      "Write a trace of the sequence to this file: its tokens and, per compression and KV "
      "head, the kept positions and score summaries (JSON lines, docs/USAGE.md; "
      "`rkv viz` draws it)")
      ->group("KV compression");
  add_flag_option(app, "--logits-out", a->logits_out,
                  "Write the model's float32 logits at every position whose next token was "
                  "picked (the prompt's last, then each generated token's) to this NumPy .npy "
                  "file, one row of the vocabulary's size per position")
      ->group("KV compression");
  add_flag_option(app, "--replay-ids", a->replay_ids,
                  "Write these comma-separated token ids instead of sampling (all of them, "
                  "whatever -n says, unless an end-of-sequence id ends the sequence), compressing, "
                  "tracing and recording logits "
                  "as a generation would: the eviction of a sequence sampled elsewhere "
                  "(docs/USAGE.md, \"Attention masks from a trace\")")
      ->group("KV compression");
  app.callback([a] { run(*a); });
}

const RegisterCommand reg("generate", "Generate text from a prompt, streaming it as it is produced",
                          setup);

}  // namespace
}  // namespace rkv::cli
