// rkv serve: an OpenAI-compatible HTTP server with per-request KV compression (docs/SERVER.md).
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "command.h"
#include "common.h"
#include "core/error.h"
#include "core/record_log.h"
#include "core/thread_pool.h"
#include "engine/batch_engine.h"
#include "generate_options.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "server/agent.h"
#include "server/server.h"
#include "server/tool_calls.h"

namespace rkv::cli {
namespace {

struct Args {
  std::string model, tokenizer, host = "127.0.0.1", alias, api_key, kv_memory = "2GiB",
                                reasoning_format = "parsed";
  int port = 8080;
  std::string matmul_precision;
  std::string device;  // --device
  std::string attention_precision;
  int parallel = 0;
  int queue_limit = 64;
  int http_threads = 128;
  std::string max_body = "16MiB";
  double header_timeout = 10, idle_timeout = 5, write_timeout = 30;
  int max_connections = 1024, listen_backlog = 1024;
  int agent_port = -1;
  double drain_timeout = 600;
  int viz = 0;
  int prefill_chunk = 256;
  int threads = 1;
  std::string tool_call_parser = "auto";
  std::string chat_template_kwargs;  // a JSON object
  std::string scripted_replies;      // a file (test seam)
  std::shared_ptr<GenerateFlags> gen = std::make_shared<GenerateFlags>();
};

// --scripted-replies FILE: [{"reply": TEXT, "when_last_role": ROLE, "when_contains": TEXT}, ...].
nlohmann::json read_scripted_replies(const std::string& path) {
  const std::string what = "--scripted-replies " + path;
  const auto rules = nlohmann::json::parse(
      read_file(path, "the file given with --scripted-replies"), nullptr, false);
  if (!rules.is_array() || rules.empty())
    throw Error(what + ": must be a non-empty JSON array of {\"reply\": ..., ...} rules");
  for (const auto& rule : rules) {
    if (!rule.is_object() || !rule.contains("reply") || !rule["reply"].is_string())
      throw Error(what + ": every rule needs a string \"reply\"");
    for (const auto& [key, value] : rule.items())
      if ((key != "reply" && key != "when_last_role" && key != "when_contains") ||
          !value.is_string())
        throw Error(what +
                    ": a rule has reply, when_last_role and when_contains, all strings; not \"" +
                    key + "\"");
  }
  return rules;
}

void run(const Args& a) {
  const GenerateFlags& g = *a.gen;
  if (a.reasoning_format != "parsed" && a.reasoning_format != "none")
    throw Error("--reasoning-format must be 'parsed' or 'none'");
  server::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.queue_limit = a.queue_limit;
  o.http_threads = a.http_threads;
  o.max_body_bytes = parse_byte_size(a.max_body);
  if (o.max_body_bytes == 0) throw Error("--max-body must be at least 1 byte");
  o.header_timeout_seconds = a.header_timeout;
  o.idle_timeout_seconds = a.idle_timeout;
  o.write_timeout_seconds = a.write_timeout;
  o.max_connections = a.max_connections;
  o.listen_backlog = a.listen_backlog;
  o.api_key = a.api_key;
  o.viz_traces = a.viz;
  server::RequestDefaults defaults;
  defaults.max_tokens = g.n_predict > 0 ? g.n_predict : 1 << 30;
  defaults.sampling = g.sampling();
  defaults.stop = g.stops;
  defaults.seeded = g.seed >= 0;
  defaults.compression = g.kv->params();  // invalid --kv-* settings fail here, before loading
  defaults.reasoning_inline = a.reasoning_format == "none";
  defaults.thinking_budget = g.thinking_budget;
  defaults.thinking_budget_message = g.thinking_budget_message;
  if (!a.chat_template_kwargs.empty()) {
    defaults.chat_template_kwargs =
        nlohmann::ordered_json::parse(a.chat_template_kwargs, nullptr, false);
    if (!defaults.chat_template_kwargs.is_object())
      throw Error(
          "--chat-template-kwargs must be a JSON object, such as '{\"enable_thinking\": false}'");
  }
  if (a.tool_call_parser != "auto") server::parse_tool_call_format(a.tool_call_parser);
  o.tool_call_parser = a.tool_call_parser;
  if (!a.scripted_replies.empty()) o.scripted_replies = read_scripted_replies(a.scripted_replies);
  EngineOptions engine_options;
  engine_options.kv_memory_bytes =
      a.kv_memory == "none" || a.kv_memory.empty() ? 0 : parse_byte_size(a.kv_memory);
  engine_options.max_batch = a.parallel;
  engine_options.prefill_chunk = a.prefill_chunk;
  engine_options.context_size = g.ctx_size;
  apply_chat_template_options(engine_options, g.chat_template, g.chat_template_file);
  engine_options.kv_dtype = g.kv->kv_dtype();

  // SIGINT/SIGTERM stop the server through one thread that waits for them; every other thread
  // (HTTP, engine, pool) inherits the blocked mask. A client that goes away must not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::Server server(o);
  const int port = server.bind();
  std::fprintf(stderr, "[serve] listening on http://%s:%d (loading the model; /health: 503)\n",
               a.host.c_str(), port);
  std::thread http([&server] { server.serve(); });
  // The load-balancer agent (HAProxy's agent-check) on a port of its own, when asked for.
  std::unique_ptr<server::AgentServer> agent;
  std::thread agent_thread;
  if (a.agent_port >= 0) {
    agent = std::make_unique<server::AgentServer>([&server] { return server.agent_reply(); });
    try {
      const int agent_port = agent->bind(a.host, a.agent_port);
      std::fprintf(stderr, "[serve] load-balancer agent on %s:%d\n", a.host.c_str(), agent_port);
    } catch (...) {
      server.stop();
      http.join();
      throw;
    }
    agent_thread = std::thread([&agent] { agent->serve(); });
  }
  auto stop_agent = [&] {
    if (!agent) return;
    agent->stop();
    agent_thread.join();
  };
  std::atomic<Engine*> running_engine{nullptr};
  std::atomic<bool> stopped{false};
  // The first SIGTERM/SIGINT drains (docs/DEPLOY.md): new requests get 503, those accepted run
  // to their end, then the server exits 0. A second signal, or --drain-timeout, ends the rest.
  const double drain_timeout = a.drain_timeout;
  std::thread waiter([&server, &stop_signals, &running_engine, &stopped, drain_timeout] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (stopped.load()) return;  // woken by the main thread at the end
    Engine* e = running_engine.load();
    if (e != nullptr && drain_timeout > 0) {
      server.drain();
      std::fprintf(stderr,
                   "[serve] draining: %d requests in flight; new ones get 503 (a second signal, "
                   "or --drain-timeout %g s, ends them)\n",
                   server.in_flight(), drain_timeout);
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(drain_timeout));
      bool again = false;
      while (server.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
        const timespec tick{0, 100'000'000};
        if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
          again = true;
          break;
        }
        if (stopped.load()) return;
      }
      if (server.in_flight() > 0)
        std::fprintf(stderr, "[serve] %s: ending the %d requests still in flight\n",
                     again ? "a second signal" : "the drain timeout passed", server.in_flight());
      else
        std::fprintf(stderr, "[serve] drained: every accepted request was answered\n");
    }
    std::fprintf(stderr, "[serve] stopping\n");
    // Requests in flight are cancelled first, so their handlers end and the server can stop.
    if (e != nullptr) e->stop();
    server.stop();
    // Idle keep-alive connections (the client libraries pool them) would hold the HTTP threads
    // for up to their 5 s timeout: with every request finished, exit without waiting for them.
    for (int i = 0; i < 20 && !stopped.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!stopped.load()) {
      std::fprintf(stderr, "[serve] stopped\n");
      std::fflush(stderr);
      std::_Exit(0);
    }
  });
  auto shutdown = [&] {
    server.stop();
    http.join();
    stop_agent();
    stopped.store(true);
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
  };

  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Engine> engine;
  try {
    // Each request chooses its own method, KV dtype and steering: auto serves on the CPU
    // (--device cuda serves fullkv requests on the GPU and refuses the others).
    DeviceNeeds needs;
    needs.per_request_settings = true;
    model = load_model(a.model, a.matmul_precision, a.attention_precision, a.device, needs);
    tokenizer =
        std::make_unique<Tokenizer>(Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer));
    defaults.steering = g.steering->load(*model);
    pool = std::make_unique<ThreadPool>(a.threads);
    // Any request may ask for triattention: the statistics are loaded whenever they are there.
    engine_options.query_stats = g.kv->load_query_stats(a.model, *model, true);
    engine = std::make_unique<Engine>(*model, tokenizer.get(), *pool, engine_options);
    // The defaults must make a valid request on their own.
    Request probe;
    probe.prompt_ids = {0};
    probe.max_new_tokens = 1;
    probe.compression = defaults.compression;
    probe.steering = defaults.steering;
    probe.stop = defaults.stop;
    engine->prepare(probe);
  } catch (...) {
    shutdown();
    throw;
  }
  engine->start();
  std::string name = a.alias;
  if (name.empty()) {
    name = std::filesystem::path(a.model).filename().string();
    if (name.empty()) name = std::filesystem::path(a.model).parent_path().filename().string();
  }
  running_engine.store(engine.get());
  server.set_engine(engine.get(), name, defaults);
  std::fprintf(
      stderr,
      "[serve] ready: model %s, context %d, KV cap %s, KV dtype %s, parallel %s, default "
      "method %s, %d threads\n",
      name.c_str(), engine->context_size(),
      engine_options.kv_memory_bytes
          ? format_bytes(static_cast<double>(engine_options.kv_memory_bytes)).c_str()
          : "none",
      std::string(kv_dtype_name(engine_options.kv_dtype.value_or(model->default_kv_dtype())))
          .c_str(),
      a.parallel > 0 ? std::to_string(a.parallel).c_str() : "as the cap allows",
      std::string(method_name(defaults.compression.method)).c_str(), a.threads);
  http.join();
  stop_agent();
  stopped.store(true);
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  engine->stop();
  std::fprintf(stderr, "[serve] stopped\n");
}

void setup(CLI::App& app) {
  auto a = std::make_shared<Args>();
  add_model_options(app, a->model, a->tokenizer);
  add_flag_option(app, "--host", a->host, "Address to listen on (127.0.0.1: this machine only)");
  add_flag_option(app, "--port", a->port, "Port to listen on (0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  add_flag_option(app, "--api-key", a->api_key,
                  "Require \"Authorization: Bearer KEY\" on every endpoint but /health "
                  "(default: none)");
  add_flag_option(app, "--viz", a->viz,
                  "Keep the compression traces of the last N requests and serve their eviction "
                  "pages at /viz (0: off; a trace holds every compression's kept positions, "
                  "about 4 bytes per kept entry per layer, KV head and compression)")
      ->check(CLI::Range(0, 100000));
  add_flag_option(app, "--alias", a->alias,
                  "Model name in /v1/models and responses (default: the directory's name)");
  add_flag_option(app, "--kv-memory", a->kv_memory,
                  "KV memory cap for all running requests (512MiB, 4GiB, ...; none: no cap). A "
                  "request waits until its KV slot fits")
      ->group("KV compression");
  add_flag_option(app, "--parallel,--max-batch", a->parallel,
                  "Most requests decoding at once (0: as many as the KV cap allows)")
      ->check(at_least(0));
  add_flag_option(app, "--queue-limit", a->queue_limit,
                  "Requests allowed to wait for a slot; more are answered 429 with Retry-After")
      ->check(at_least(0));
  add_flag_option(app, "--http-threads", a->http_threads,
                  "Requests handled at once (each streaming response holds one; /health and "
                  "/metrics have two threads of their own)")
      ->check(CLI::Range(4, 4096));
  add_flag_option(app, "--max-body", a->max_body,
                  "Largest request body (16MiB, 1MiB, ...), counted as it arrives in any "
                  "transfer encoding; larger ones are answered 413")
      ->group("HTTP limits");
  add_flag_option(app, "--header-timeout", a->header_timeout,
                  "Seconds from a request's first byte to the end of its headers; slower ones "
                  "are answered 408")
      ->check(CLI::Range(0.1, 3600.0))
      ->group("HTTP limits");
  add_flag_option(app, "--idle-timeout", a->idle_timeout,
                  "Seconds a kept-alive connection may wait for its next request, and a body "
                  "for its next bytes (408 then)")
      ->check(CLI::Range(0.1, 3600.0))
      ->group("HTTP limits");
  add_flag_option(app, "--write-timeout", a->write_timeout,
                  "Seconds a response write may stall on a client that does not read before "
                  "the connection is dropped (its request is cancelled)")
      ->check(CLI::Range(0.1, 3600.0))
      ->group("HTTP limits");
  add_flag_option(app, "--max-connections", a->max_connections,
                  "Connections open at once; beyond it new ones are answered 503 and closed")
      ->check(CLI::Range(8, 1000000))
      ->group("HTTP limits");
  add_flag_option(app, "--agent-port", a->agent_port,
                  "Answer HAProxy's agent-check on this port (0: any free port, printed): the "
                  "free share of the KV cap as the weight, drain while draining (default: off)")
      ->check(CLI::Range(-1, 65535))
      ->group("Deployment");
  add_flag_option(app, "--drain-timeout", a->drain_timeout,
                  "On SIGTERM/SIGINT, seconds to let accepted requests finish while new ones get "
                  "503 before ending the rest with an error (0: end them at once; a second "
                  "signal ends them at any time)")
      ->check(CLI::Range(0.0, 86400.0))
      ->group("Deployment");
  add_flag_option(app, "--listen-backlog", a->listen_backlog,
                  "Connections the kernel queues before they are accepted (capped by "
                  "net.core.somaxconn)")
      ->check(CLI::Range(1, 65535))
      ->group("HTTP limits");
  add_flag_option(app, "--prefill-chunk", a->prefill_chunk,
                  "Prompt tokens per engine step, over all prefilling requests")
      ->check(at_least(1));
  add_flag_option(app, "--reasoning-format", a->reasoning_format,
                  "parsed: the chain of thought in message.reasoning_content; none: inline in "
                  "the content (a request's 'reasoning_format' overrides)");
  add_flag_option(app, "--tool-call-parser", a->tool_call_parser,
                  "The tool-call syntax read from chat answers: auto (the one the model's chat "
                  "template teaches), or hermes, qwen3-xml, llama3-json, mistral, harmony, "
                  "deepseek, kimi, glm, none")
      ->group("Chat");
  add_flag_option(app, "--chat-template-kwargs", a->chat_template_kwargs,
                  "A JSON object of chat-template variables every request gets, e.g. "
                  "'{\"enable_thinking\": false}' (a request's chat_template_kwargs override)")
      ->group("Chat");
  add_flag_option(app, "--scripted-replies", a->scripted_replies,
                  "Testing only: a JSON file of rules [{\"reply\", \"when_last_role\", "
                  "\"when_contains\"}]; each request's answer is the first matching rule's reply "
                  "instead of sampled tokens (client tests on models that cannot call tools)")
      ->group("Testing");
  add_precision_options(app, a->matmul_precision, a->attention_precision);
  add_device_option(app, a->device);
  add_threads_option(app, a->threads);
  a->gen->n_predict = 2048;
  add_generate_options(app, a->gen,
                       "Default max_tokens of a request that gives none (clipped to the context; "
                       "0: up to the context)");
  app.callback([a] { run(*a); });
}

const RegisterCommand reg("serve", "OpenAI-compatible HTTP server with per-request KV compression",
                          setup);

}  // namespace
}  // namespace rkv::cli
