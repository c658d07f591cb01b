#include "server/server.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "rkv/tokenizer.h"
#include "server/choice_output.h"
#include "server/http.h"
#include "server/trace_store.h"
#include "viz/viz.h"

namespace rkv::server {

using nlohmann::json;

namespace {

std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(http::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(http::Response& res, const ApiError& e) {
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, error_body(e.what(), e.type, e.param, e.code));
}

// The OpenAI error type of a status the HTTP layer answers itself.
const char* error_type(int status) {
  return status == 503                    ? "unavailable_error"
         : status >= 500 && status != 501 ? "server_error"
                                          : "invalid_request_error";
}

// Compares the whole of two strings in time that depends only on their lengths.
bool same_secret(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^
                                       expected[i % std::max<std::size_t>(1, expected.size())]);
  return diff == 0;
}

// A choice that did not complete: the engine failed it, or cancelled it because the server is
// shutting down (a client that went away gets no response at all).
json failure_body(const Completion& c) {
  if (c.stop_reason == "cancelled")
    return error_body("the server is shutting down; the request was cancelled", "server_error", {},
                      "shutting_down");
  return error_body(c.error, "server_error");
}

// OpenAI's finish_reason: "tool_calls" when an answer that ended by itself made calls.
std::string finish_reason(const Completion& c, int calls) {
  return calls > 0 && c.finish_reason == "stop" ? "tool_calls" : c.finish_reason;
}

// The text of the last message (a completion's prompt) that --scripted-replies rules look at.
std::pair<std::string, std::string> last_message(const Request& r) {
  if (r.messages.empty()) return {"", r.text};
  return {r.messages.back().role, r.messages.back().content};
}

// --scripted-replies: the first rule whose conditions the request meets.
std::string scripted_reply(const json& rules, const Request& r) {
  const auto [role, text] = last_message(r);
  for (const json& rule : rules) {
    if (rule.contains("when_last_role") && rule["when_last_role"] != role) continue;
    if (rule.contains("when_contains") &&
        text.find(rule["when_contains"].get<std::string>()) == std::string::npos)
      continue;
    return rule["reply"].get<std::string>();
  }
  throw ApiError(400, "no scripted reply (--scripted-replies) matches this request");
}

// What the engine thread hands a waiting handler: the text of each token as it comes, and each
// choice's completion at the end.
struct Channel {
  struct Event {
    int choice = 0;
    std::string text;
    bool done = false;
    std::optional<TokenLogprob> logprob;  // the token's, when the request asked for them
  };
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Event> events;
  std::vector<Completion> completions;
  int done = 0;
};

}  // namespace

struct Server::Impl {
  using Route = std::function<void(const http::Request&, http::Response&)>;
  struct RouteEntry {
    std::string method, path;
    Route fn;
  };

  ServerOptions options;
  http::HttpServer http;
  std::vector<RouteEntry> routes_;
  std::atomic<Engine*> engine{nullptr};
  std::string model_name;
  std::mutex name_mutex;
  std::atomic<std::uint64_t> next_response{1};
  std::atomic<std::int64_t> rejected_invalid{0}, rejected_busy{0}, disconnected{0},
      http_requests{0}, server_errors{0}, rejected_draining{0}, completions_accepted{0};
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};  // completions accepted and not yet answered
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_mutex;
  TraceStore traces;
  ToolCallFormat tool_format = ToolCallFormat::none;  // set with the engine

  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        http(
            limits_of(options),
            [this](const http::Request& req, http::Response& res) { handle(req, res); },
            [this](int status, const std::string& message) {
              if (status >= 400 && status < 500) ++rejected_invalid;
              return std::pair<std::string, std::string>(
                  dump_json(error_body(message, error_type(status))), "application/json");
            }),
        traces(options.viz_traces) {}

  static http::Limits limits_of(const ServerOptions& o) {
    http::Limits l;
    l.max_body_bytes = o.max_body_bytes;
    l.header_timeout_seconds = o.header_timeout_seconds;
    l.idle_timeout_seconds = o.idle_timeout_seconds;
    l.write_timeout_seconds = o.write_timeout_seconds;
    l.max_connections = o.max_connections;
    l.backlog = o.listen_backlog;
    l.workers = std::max(4, o.http_threads);
    return l;
  }

  Engine& ready_engine() {
    Engine* e = engine.load();
    if (e == nullptr)
      throw ApiError(503, "the model is still loading", {}, "unavailable_error", "loading");
    return *e;
  }

  std::uint64_t random_seed() {
    std::lock_guard lock(seeds_mutex);
    return seeds();
  }

  std::string name() {
    std::lock_guard lock(name_mutex);
    return model_name;
  }

  void on(std::string method, std::string path, Route fn) {
    routes_.push_back({std::move(method), std::move(path), std::move(fn)});
  }
  void handle(const http::Request& req, http::Response& res);
  void route(const http::Request& req, http::Response& res);
  void routes();
  std::string vllm_metrics(const Engine* e, const EngineStats& s);
  void completions(const http::Request& req, http::Response& res, bool chat);
  json callable_tools(ParsedRequest& parsed, ToolCallFormat format, const Engine& engine_ref);
  std::shared_ptr<const TraceStore::Entry> find_trace(const http::Request& req);
  void viz_index(http::Response& res);
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  // Browsers may call the API from pages of other origins (CORS), as with llama.cpp's server.
  impl_->http.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
  // /health and /metrics answer on threads of their own, even while every worker streams.
  impl_->http.set_fast_lane([](const http::Request& req) {
    return req.method == "GET" && (req.path == "/health" || req.path == "/metrics");
  });
  // Memory of large requests goes back to the system once they are answered: blocks of 1 MiB
  // and more (bodies, prompts, their JSON) are mapped on their own and unmapped when freed (a
  // fixed threshold: glibc would otherwise raise it to the largest block freed so far, and keep
  // later ones in its per-thread arenas), and what the arenas hold free is trimmed after a large
  // request.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  impl_->http.set_after_large_request(1u << 20, [] { ::malloc_trim(0); });
  impl_->routes();
}

Server::~Server() {
  stop();
}

int Server::bind() {
  const auto& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw Error("--port must be in 0..65535");
  port_ = impl_->http.bind(o.host, o.port);
  return port_;
}

void Server::serve() {
  impl_->http.serve();
}

void Server::stop() {
  impl_->http.stop();
}

void Server::drain() {
  impl_->draining.store(true);
}

bool Server::draining() const {
  return impl_->draining.load();
}

int Server::in_flight() const {
  return impl_->in_flight.load();
}

std::string Server::agent_reply() const {
  const Engine* e = impl_->engine.load();
  if (e == nullptr) return "down\n";
  if (impl_->draining.load()) return "drain\n";
  const EngineStats s = e->stats();
  int free_percent = 100;
  if (s.kv_bytes_cap > 0) {
    const double used =
        static_cast<double>(s.kv_bytes_in_use) / static_cast<double>(s.kv_bytes_cap);
    // At least 5%: HAProxy rounds a server's weight times the percentage down, and a replica of
    // weight 0 takes nothing even when every replica is full (deploy/haproxy.cfg: weights >= 20).
    free_percent = std::clamp(static_cast<int>(100.0 * (1.0 - used)), 5, 100);
  }
  return "ready up " + std::to_string(free_percent) + "%\n";
}

void Server::set_engine(Engine* engine, std::string model_name, RequestDefaults defaults) {
  {
    std::lock_guard lock(impl_->name_mutex);
    impl_->model_name = std::move(model_name);
  }
  impl_->options.defaults = std::move(defaults);  // read only after the engine is seen below
  const std::string& parser = impl_->options.tool_call_parser;
  impl_->tool_format = parser.empty() || parser == "auto"
                           ? detect_tool_call_format(engine->chat_template().source)
                           : parse_tool_call_format(parser);
  impl_->engine.store(engine);
}

// Every request passes here: no exception leaves it (each becomes the OpenAI error object).
void Server::Impl::handle(const http::Request& req, http::Response& res) {
  ++http_requests;
  try {
    route(req, res);
  } catch (const ApiError& e) {
    if (e.status >= 400 && e.status < 500 && e.status != 429) ++rejected_invalid;
    res = http::Response{};
    send_error(res, e);
  } catch (const Error& e) {
    ++rejected_invalid;
    res = http::Response{};
    send_json(res, 400, error_body(e.what(), "invalid_request_error"));
  } catch (const std::exception& e) {
    ++server_errors;
    std::fprintf(stderr, "[serve] error: %s %s: %s\n", req.method.c_str(), req.path.c_str(),
                 e.what());
    res = http::Response{};
    send_json(res, 500, error_body(e.what(), "server_error"));
  } catch (...) {
    ++server_errors;
    res = http::Response{};
    send_json(res, 500, error_body("unknown error", "server_error"));
  }
}

void Server::Impl::route(const http::Request& req, http::Response& res) {
  if (req.method == "OPTIONS") {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.status = 204;
    return;
  }
  if (!options.api_key.empty() && req.path != "/health") {
    const std::string* auth = req.header("Authorization");
    if (auth == nullptr || !same_secret(*auth, "Bearer " + options.api_key))
      throw ApiError(401, "a valid API key is required: send \"Authorization: Bearer <key>\"", {},
                     "authentication_error", "invalid_api_key");
  }
  std::string allowed;
  for (const RouteEntry& r : routes_) {
    if (r.path != req.path) continue;
    if (r.method == req.method) return r.fn(req, res);
    allowed += (allowed.empty() ? "" : ", ") + r.method;
  }
  if (!allowed.empty()) {
    res.set_header("Allow", allowed + ", OPTIONS");
    throw ApiError(405,
                   req.method + " is not allowed on " + req.path + " (allowed: " + allowed + ")");
  }
  throw ApiError(404, "no route " + req.method + " " + req.path);
}

void Server::Impl::routes() {
  on("GET", "/health", [this](const http::Request&, http::Response& res) {
    if (engine.load() == nullptr) {
      json body = error_body("the model is still loading", "unavailable_error", {}, "loading");
      body["status"] = "loading";
      send_json(res, 503, body);
    } else if (draining.load()) {
      json body =
          error_body("the server is draining: it finishes its requests and takes no new ones",
                     "unavailable_error", {}, "draining");
      body["status"] = "draining";
      send_json(res, 503, body);
    } else {
      send_json(res, 200, {{"status", "ok"}});
    }
  });
  on("GET", "/v1/models", [this](const http::Request&, http::Response& res) {
    Engine& e = ready_engine();
    const ModelConfig& c = e.model().config();
    send_json(res, 200,
              {{"object", "list"},
               {"data",
                {{{"id", name()},
                  {"object", "model"},
                  {"created", unix_time()},
                  {"owned_by", "rkv"},
                  {"meta",
                   {{"n_ctx", e.context_size()},
                    {"n_vocab", c.vocab_size},
                    {"weight_bytes", e.model().weight_bytes()},
                    {"kv_memory_bytes", e.options().kv_memory_bytes}}}}}}});
  });
  on("GET", "/metrics", [this](const http::Request&, http::Response& res) {
    Engine* e = engine.load();
    const EngineStats s = e ? e->stats() : EngineStats{};
    std::string out;
    auto metric = [&out](const char* name, const char* type, const char* help, double value) {
      char line[512];
      std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                    type, name, value);
      out += line;
    };
    metric("rkv_ready", "gauge", "1 when the model is loaded and requests are served.", e ? 1 : 0);
    metric("rkv_requests_running", "gauge", "Sequences holding a KV slot (prefilling or decoding).",
           s.running);
    metric("rkv_requests_waiting", "gauge", "Requests queued for a KV slot.", s.waiting);
    metric("rkv_kv_bytes_in_use", "gauge", "Bytes of the KV slots of running sequences.",
           static_cast<double>(s.kv_bytes_in_use));
    metric("rkv_kv_bytes_cap", "gauge", "The KV memory cap (0: none).",
           static_cast<double>(s.kv_bytes_cap));
    metric("rkv_kv_bytes_peak", "gauge", "Most bytes of KV slots in use at once since start.",
           static_cast<double>(s.peak_kv_bytes));
    metric("rkv_requests_running_peak", "gauge", "Most sequences running at once since start.",
           s.peak_running);
    metric("rkv_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           static_cast<double>(s.prompt_tokens));
    metric("rkv_generated_tokens_total", "counter", "Tokens generated.",
           static_cast<double>(s.generated_tokens));
    metric("rkv_compressions_total", "counter",
           "KV compressions (layer x step), finished requests.",
           static_cast<double>(s.compressions));
    metric("rkv_requests_finished_total", "counter", "Requests finished, any reason.",
           static_cast<double>(s.finished));
    metric("rkv_requests_cancelled_total", "counter", "Requests cancelled (client gone).",
           static_cast<double>(s.cancelled));
    metric("rkv_requests_failed_total", "counter", "Requests the engine failed.",
           static_cast<double>(s.failed));
    metric("rkv_requests_rejected_invalid_total", "counter", "Requests answered with a 4xx error.",
           static_cast<double>(rejected_invalid.load()));
    metric("rkv_requests_rejected_busy_total", "counter", "Requests answered 429 (queue full).",
           static_cast<double>(rejected_busy.load()));
    metric("rkv_http_requests_total", "counter", "HTTP requests received.",
           static_cast<double>(http_requests.load()));
    metric("rkv_http_server_errors_total", "counter",
           "Requests answered 500 (or whose stream ended with an error event).",
           static_cast<double>(server_errors.load()));
    const http::HttpServer::Counters hc = http.counters();
    metric("rkv_http_connections_open", "gauge", "Connections open (reading or being answered).",
           hc.open);
    metric("rkv_http_connections_total", "counter", "Connections accepted.",
           static_cast<double>(hc.accepted));
    metric("rkv_http_connections_refused_total", "counter",
           "Connections answered 503 because --max-connections were open.",
           static_cast<double>(hc.refused_busy));
    metric("rkv_http_protocol_errors_total", "counter",
           "Requests the HTTP layer refused (malformed, too large, unsupported encoding).",
           static_cast<double>(hc.protocol_errors));
    metric("rkv_http_timeouts_total", "counter", "Requests answered 408: headers or body too slow.",
           static_cast<double>(hc.timeouts));
    metric("rkv_draining", "gauge", "1 while the server drains (takes no new requests).",
           draining.load() ? 1 : 0);
    metric("rkv_requests_in_flight", "gauge", "Completions accepted and not yet answered.",
           in_flight.load());
    metric("rkv_requests_accepted_total", "counter", "Completions accepted (queued or run).",
           static_cast<double>(completions_accepted.load()));
    metric("rkv_requests_rejected_draining_total", "counter",
           "Completions answered 503 because the server was draining.",
           static_cast<double>(rejected_draining.load()));
    out += vllm_metrics(e, s);
    out +=
        "# HELP rkv_step_seconds Wall time of the engine's forward passes (one per step).\n"
        "# TYPE rkv_step_seconds summary\n";
    char line[256];
    std::snprintf(line, sizeof(line), "rkv_step_seconds_sum %.9g\nrkv_step_seconds_count %lld\n",
                  s.step_seconds, static_cast<long long>(s.steps));
    out += line;
    res.set_content(out, "text/plain; version=0.0.4");
  });
  on("POST", "/tokenize", [this](const http::Request& req, http::Response& res) {
    Engine& e = ready_engine();
    const json j = parse_request_json(req.body);
    const auto it = j.find("content");
    if (it == j.end() || !it->is_string())
      throw ApiError(400, "'content' (a string) is required", "content");
    bool add_special = false;
    if (const auto a = j.find("add_special"); a != j.end()) {
      if (!a->is_boolean()) throw ApiError(400, "'add_special' must be a boolean", "add_special");
      add_special = a->get<bool>();
    }
    if (e.tokenizer() == nullptr) throw ApiError(400, "the server has no tokenizer");
    const auto ids = e.tokenizer()->encode(it->get<std::string>(), add_special);
    send_json(res, 200, {{"tokens", ids}});
  });
  on("POST", "/detokenize", [this](const http::Request& req, http::Response& res) {
    Engine& e = ready_engine();
    const json j = parse_request_json(req.body);
    const auto it = j.find("tokens");
    if (it == j.end() || !it->is_array())
      throw ApiError(400, "'tokens' (an array of token ids) is required", "tokens");
    std::vector<std::int32_t> ids;
    const int vocab = e.model().config().vocab_size;
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= vocab)
        throw ApiError(400, "'tokens' must hold ids in 0.." + std::to_string(vocab - 1), "tokens");
      ids.push_back(t.get<std::int32_t>());
    }
    if (e.tokenizer() == nullptr) throw ApiError(400, "the server has no tokenizer");
    send_json(res, 200, {{"content", e.tokenizer()->decode(ids)}});
  });
  // The eviction page of a traced request (--viz N): an index of the kept traces, the page of
  // one (running or finished), and its trace as JSON lines.
  on("GET", "/viz", [this](const http::Request& req, http::Response& res) {
    if (req.param("id") == nullptr) return viz_index(res);
    const auto entry = find_trace(req);
    std::string text;
    {
      std::lock_guard lock(entry->mutex);
      text = entry->text;
    }
    const std::string label =
        entry->id + (entry->choice > 0 ? " choice " + std::to_string(entry->choice) : "");
    res.set_content(viz::render_page({{label, text}}), "text/html; charset=utf-8");
  });
  on("GET", "/viz/trace", [this](const http::Request& req, http::Response& res) {
    const auto entry = find_trace(req);
    std::lock_guard lock(entry->mutex);
    res.set_content(entry->text, "application/x-ndjson");
  });
  on("POST", "/v1/chat/completions",
     [this](const http::Request& req, http::Response& res) { completions(req, res, true); });
  on("POST", "/v1/completions",
     [this](const http::Request& req, http::Response& res) { completions(req, res, false); });
}

// The functions a request's answer may call (null: none, the output is all content), and, when
// tool_choice makes a call compulsory, the call's opening as the answer's prefix.
json Server::Impl::callable_tools(ParsedRequest& parsed, ToolCallFormat format,
                                  const Engine& engine_ref) {
  if (parsed.tool_choice == ToolChoice::none) return nullptr;
  if (format == ToolCallFormat::none) {
    std::string names;
    for (const std::string& f : tool_call_format_names())
      if (f != "none") names += (names.empty() ? "" : ", ") + f;
    throw ApiError(400,
                   "tools: the model's chat template teaches no tool-call syntax this server "
                   "parses; start it with --tool-call-parser NAME (" +
                       names + ") if the model writes one of them",
                   "tools");
  }
  json tools = json::parse(parsed.request.tools.dump());
  if (parsed.tool_choice == ToolChoice::function) {
    json only = json::array();
    for (const json& t : tools)
      if (t["function"]["name"] == parsed.tool_choice_name) only.push_back(t);
    tools = std::move(only);
  }
  if (parsed.tool_choice != ToolChoice::automatic)
    parsed.request.answer_prefix =
        tool_call_opening(format, engine_ref.chat_template().source, parsed.tool_choice_name);
  return tools;
}

void Server::Impl::completions(const http::Request& req, http::Response& res, bool chat) {
  Engine& engine_ref = ready_engine();
  if (draining.load()) {
    ++rejected_draining;
    throw ApiError(503,
                   "the server is draining (shutting down after its running requests): retry on "
                   "another replica",
                   {}, "unavailable_error", "draining");
  }
  // Counted from here until the response is written (or dropped): the drain waits for it.
  ++in_flight;
  ++completions_accepted;
  const std::shared_ptr<void> answered(nullptr, [this](void*) { --in_flight; });
  ParsedRequest parsed = parse_completion_request(req.body, chat, options.defaults, random_seed());
  if (!parsed.max_tokens_given) {
    // No max_tokens: as much as the default allows and the context leaves.
    parsed.request.strict_length = false;
  }
  const ToolCallFormat format = chat ? tool_format : ToolCallFormat::none;
  const nlohmann::json call_tools = callable_tools(parsed, format, engine_ref);
  if (!options.scripted_replies.is_null())
    parsed.request.scripted_reply = scripted_reply(options.scripted_replies, parsed.request);
  // Validated (and tokenized) once before anything is queued: an invalid request never reaches
  // the engine. The n choices differ only in their seeds.
  std::vector<PreparedRequest> prepared;
  parsed.request.decode_text = true;
  try {
    prepared.push_back(engine_ref.prepare(parsed.request));
  } catch (const RequestError& e) {
    throw ApiError(400, e.field() == "kv" ? "kv: " + std::string(e.what()) : e.what(), e.field());
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  for (int i = 1; i < parsed.n; ++i) {
    prepared.push_back(prepared.front());
    prepared.back().request.sampling.seed += static_cast<std::uint64_t>(i);
  }
  if (engine_ref.stats().waiting + parsed.n > options.queue_limit) {
    ++rejected_busy;
    throw ApiError(429,
                   "the server is busy: " + std::to_string(options.queue_limit) +
                       " requests are already waiting for a KV slot; retry later",
                   {}, "server_busy", "queue_full");
  }

  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_response++);
  auto channel = std::make_shared<Channel>();
  channel->completions.resize(static_cast<std::size_t>(parsed.n));
  ChoiceOutput::Setup output_setup;
  output_setup.split_reasoning = chat && !parsed.reasoning_inline;
  output_setup.starts_in_reasoning = prepared.front().starts_in_reasoning;
  output_setup.format = format;
  output_setup.tools = call_tools;
  output_setup.parallel_tool_calls = parsed.parallel_tool_calls;
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < parsed.n; ++i) {
    PreparedRequest& p = prepared[static_cast<std::size_t>(i)];
    std::shared_ptr<TraceStore::Entry> trace;
    if (traces.enabled()) {
      trace = traces.add(id, i, std::string(method_name(p.request.compression.method)),
                         engine_ref.tokenizer());
      trace->trace->begin(p, engine_ref.model());
      p.request.on_compression = [trace](const CompressionEvent& e) { trace->trace->record(e); };
    }
    RequestCallbacks cb;
    cb.on_token = [channel, i, trace](const TokenEvent& e) {
      if (trace && e.token >= 0) trace->trace->token(e.token);
      if (e.text.empty() && e.logprob == nullptr) return;
      std::lock_guard lock(channel->mutex);
      channel->events.push_back(
          {i, std::string(e.text), false,
           e.logprob ? std::optional<TokenLogprob>(*e.logprob) : std::nullopt});
      channel->cv.notify_all();
    };
    cb.on_done = [channel, i, trace](const Completion& c) {
      if (trace) {
        trace->trace->end(c);
        std::lock_guard lock(trace->mutex);
        trace->finished = true;
      }
      std::lock_guard lock(channel->mutex);
      channel->completions[static_cast<std::size_t>(i)] = c;
      channel->events.push_back({i, {}, true, std::nullopt});
      ++channel->done;
      channel->cv.notify_all();
    };
    ids.push_back(engine_ref.submit(std::move(p), cb));
  }

  const std::int64_t created = unix_time();
  const std::string model = parsed.model.empty() ? name() : parsed.model;
  const int n = parsed.n;
  const int logprobs = parsed.request.logprobs;
  const Tokenizer* tokenizer = engine_ref.tokenizer();
  const auto heartbeat = std::chrono::duration<double>(options.heartbeat_seconds);
  Engine* eng = &engine_ref;
  auto cancel_all = [eng, ids, this] {
    ++disconnected;
    for (std::uint64_t rid : ids) eng->cancel(rid);
  };
  auto failed = [this](const std::exception& e) {
    ++server_errors;
    std::fprintf(stderr, "[serve] error while answering: %s\n", e.what());
  };

  // Requests are prepared with the tokenizer (decode_text), so it is there when logprobs are.
  auto logprobs_of = [logprobs, tokenizer, chat](const Completion& c) -> json {
    if (logprobs < 0 || tokenizer == nullptr) return nullptr;
    return logprobs_body(c.logprobs, *tokenizer, chat);
  };

  if (!parsed.stream) {
    // The body is written once every choice is done; until then, a blank every heartbeat
    // (JSON allows leading whitespace) finds out whether the client is still there.
    res.content_type = "application/json";
    res.stream = [=](http::Sink& sink) {
      (void)answered;  // held until the response is written
      try {
        std::unique_lock lock(channel->mutex);
        while (channel->done < n) {
          if (!channel->cv.wait_for(lock, heartbeat, [&] { return channel->done >= n; })) {
            lock.unlock();
            const bool alive = sink.write(" ");
            lock.lock();
            if (!alive) {
              lock.unlock();
              cancel_all();
              return;
            }
          }
        }
        std::vector<Completion> done = channel->completions;
        lock.unlock();
        json choices = json::array();
        for (int i = 0; i < n; ++i) {
          const Completion& c = done[static_cast<std::size_t>(i)];
          if (c.stop_reason == "error" || c.stop_reason == "cancelled") {
            // The status line is sent already; the body says what went wrong.
            sink.write(dump_json(failure_body(c)));
            return;
          }
          if (chat) {
            ChoiceOutput output(output_setup);
            ChoiceOutput::Delta d = output.push(c.text);
            d.append(output.finish());
            json message = {{"role", "assistant"}};
            // With calls and no text, content is null, as OpenAI answers.
            message["content"] = d.calls.empty() || !d.content.empty() ? json(d.content) : json();
            // reasoning_content (DeepSeek's, llama.cpp's) and reasoning (vLLM's newer name).
            if (!d.reasoning.empty()) {
              message["reasoning_content"] = d.reasoning;
              message["reasoning"] = d.reasoning;
            }
            if (!d.calls.empty()) message["tool_calls"] = tool_calls_body(d.calls);
            choices.push_back({{"index", i},
                               {"message", message},
                               {"finish_reason", finish_reason(c, output.calls())},
                               {"logprobs", logprobs_of(c)}});
          } else {
            choices.push_back({{"index", i},
                               {"text", c.text},
                               {"finish_reason", c.finish_reason},
                               {"logprobs", logprobs_of(c)}});
          }
        }
        const json body = {{"id", id},
                           {"object", chat ? "chat.completion" : "text_completion"},
                           {"created", created},
                           {"model", model},
                           {"choices", choices},
                           {"usage", usage_body(done)},
                           {"kv", kv_report(done)}};
        sink.write(dump_json(body));
      } catch (const std::exception& e) {
        // The status line is sent: the body is the error, and the choices are cancelled.
        failed(e);
        cancel_all();
        sink.write(dump_json(error_body(e.what(), "server_error")));
      }
    };
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.content_type = "text/event-stream";
  res.stream = [=](http::Sink& sink) {
    (void)answered;  // held until the response is written
    auto send = [&sink](const json& chunk) {
      return sink.write("data: " + dump_json(chunk) + "\n\n");
    };
    try {
      auto chunk_of = [&](json choices) {
        return json{{"id", id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", std::move(choices)}};
      };
      auto delta_chunk = [&](int i, const char* key, const std::string& text) {
        if (chat)
          return chunk_of(
              json::array({{{"index", i}, {"delta", {{key, text}}}, {"finish_reason", nullptr}}}));
        return chunk_of(json::array(
            {{{"index", i}, {"text", text}, {"finish_reason", nullptr}, {"logprobs", nullptr}}}));
      };
      // The chain of thought under both names clients read: reasoning_content and reasoning.
      auto reasoning_chunk = [&](int i, const std::string& text) {
        return chunk_of(json::array({{{"index", i},
                                      {"delta", {{"reasoning_content", text}, {"reasoning", text}}},
                                      {"finish_reason", nullptr}}}));
      };
      std::vector<ChoiceOutput> outputs(static_cast<std::size_t>(n), ChoiceOutput(output_setup));
      std::vector<std::size_t> offsets(static_cast<std::size_t>(n), 0);  // completions' text_offset
      // A choice's new reasoning, content (with its token's log-probabilities, when the request
      // asked for them: they ride on the chunk of its text, an empty one while the text is held
      // back) and calls that just completed (two chunks each: index, id and name, then the
      // arguments).
      auto send_delta = [&](int i, const ChoiceOutput::Delta& d, const json* lp) {
        if (!d.reasoning.empty() && !send(reasoning_chunk(i, d.reasoning))) return false;
        if (!d.content.empty() || lp != nullptr) {
          json chunk = delta_chunk(i, "content", d.content);
          if (lp != nullptr) chunk["choices"][0]["logprobs"] = *lp;
          if (!send(chunk)) return false;
        }
        for (const ToolCallOut& call : d.calls)
          for (const json& part : tool_call_stream_deltas(call))
            if (!send(chunk_of(json::array({{{"index", i},
                                             {"delta", {{"tool_calls", json::array({part})}}},
                                             {"finish_reason", nullptr}}}))))
              return false;
        return true;
      };
      bool ok = true;
      if (chat)
        for (int i = 0; i < n && ok; ++i)
          ok = send(chunk_of(json::array({{{"index", i},
                                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                                           {"finish_reason", nullptr}}})));
      int finished = 0;
      std::vector<Completion> done;
      while (ok && finished < n) {
        std::deque<Channel::Event> events;
        {
          std::unique_lock lock(channel->mutex);
          channel->cv.wait_for(lock, heartbeat, [&] { return !channel->events.empty(); });
          events.swap(channel->events);
          if (finished + static_cast<int>(std::count_if(events.begin(), events.end(),
                                                        [](const auto& e) { return e.done; })) >=
              n)
            done = channel->completions;
        }
        if (events.empty()) {
          ok = sink.write(": keep-alive\n\n");
          continue;
        }
        for (const auto& e : events) {
          if (!ok) break;
          const auto i = static_cast<std::size_t>(e.choice);
          if (!e.done) {
            json lp;
            if (e.logprob && tokenizer != nullptr) {
              lp = logprobs_body({&*e.logprob, 1}, *tokenizer, chat, offsets[i]);
              if (!chat) offsets[i] += lp["tokens"][0].get<std::string>().size();
            }
            ok = send_delta(e.choice, outputs[i].push(e.text), lp.is_null() ? nullptr : &lp);
            continue;
          }
          ++finished;
          Completion c;
          {
            std::lock_guard lock(channel->mutex);
            c = channel->completions[i];
          }
          if (c.stop_reason == "error" || c.stop_reason == "cancelled") {
            ok = send(failure_body(c));  // OpenAI's clients raise an APIError on this event
            continue;
          }
          ok = send_delta(e.choice, outputs[i].finish(), nullptr);
          json last = chat ? json{{"index", e.choice},
                                  {"delta", json::object()},
                                  {"finish_reason", finish_reason(c, outputs[i].calls())}}
                           : json{{"index", e.choice},
                                  {"text", ""},
                                  {"finish_reason", c.finish_reason},
                                  {"logprobs", nullptr}};
          json chunk = chunk_of(json::array({last}));
          chunk["kv"] = kv_report({c});
          if (ok) ok = send(chunk);
        }
      }
      if (!ok) {
        cancel_all();
        return;
      }
      if (parsed.include_usage) {
        json chunk = chunk_of(json::array());
        chunk["usage"] = usage_body(done);
        if (!send(chunk)) return;
      }
      sink.write("data: [DONE]\n\n");
    } catch (const std::exception& e) {
      // Mid-stream: an error event, then the end, so every client sees how the stream ended.
      failed(e);
      cancel_all();
      if (send(error_body(e.what(), "server_error"))) sink.write("data: [DONE]\n\n");
    }
  };
}

// The model-server metrics that routers scrape (the names vLLM exposes: the Gateway API
// Inference Extension's endpoint picker, vLLM's production-stack router, KServe), labelled with
// model_name as vLLM does. docs/SERVER.md says what rkv puts in each.
std::string Server::Impl::vllm_metrics(const Engine* e, const EngineStats& s) {
  std::string label;
  for (const char c : name()) {
    if (c == '\\' || c == '"') label += '\\';
    if (c == '\n') {
      label += "\\n";
      continue;
    }
    label += c;
  }
  const std::string model = "{model_name=\"" + label + "\"}";
  const double usage = s.kv_bytes_cap > 0 ? static_cast<double>(s.kv_bytes_in_use) /
                                                static_cast<double>(s.kv_bytes_cap)
                                          : 0.0;
  std::string out;
  auto gauge = [&](const char* metric, const char* help, const std::string& labels, double value) {
    char text[128];
    std::snprintf(text, sizeof(text), " %.17g\n", value);
    out += std::string("# HELP ") + metric + " " + help + "\n# TYPE " + metric + " gauge\n" +
           metric + labels + text;
  };
  gauge("vllm:num_requests_running", "Requests holding a KV slot (as rkv_requests_running).", model,
        s.running);
  gauge("vllm:num_requests_waiting", "Requests waiting for a KV slot (as rkv_requests_waiting).",
        model, s.waiting);
  gauge("vllm:kv_cache_usage_perc",
        "KV bytes in use over the KV memory cap, 0-1 (0 without a cap).", model, usage);
  gauge("vllm:gpu_cache_usage_perc", "The same as vllm:kv_cache_usage_perc (the older name).",
        model, usage);
  // A "block" is one cached token of every layer and KV head in the server's KV dtype (what a
  // full-cache request takes per token): block_size 1, and the cap holds num_gpu_blocks of them.
  std::size_t blocks = 0;
  if (e != nullptr && s.kv_bytes_cap > 0) {
    const Model& m = e->model();
    const std::optional<KvDtype> dtype = e->options().kv_dtype;
    const std::size_t per_token = KvCache::slot_bytes_for(m.cache_shape(2, 0, dtype)) -
                                  KvCache::slot_bytes_for(m.cache_shape(1, 0, dtype));
    if (per_token > 0) blocks = s.kv_bytes_cap / per_token;
  }
  gauge("vllm:cache_config_info",
        "Information of the KV cache: a block is one cached token of every layer and KV head.",
        "{block_size=\"1\",num_gpu_blocks=\"" + std::to_string(blocks) + "\"}", 1);
  return out;
}

std::shared_ptr<const TraceStore::Entry> Server::Impl::find_trace(const http::Request& req) {
  if (!traces.enabled())
    throw ApiError(404,
                   "request traces are off: start rkv serve with --viz N to keep the traces of "
                   "the last N requests",
                   {}, "invalid_request_error", "viz_disabled");
  const std::string* id_param = req.param("id");
  const std::string id = id_param != nullptr ? *id_param : std::string();
  int choice = 0;
  if (const std::string* choice_param = req.param("choice")) {
    const std::string& c = *choice_param;
    if (c.empty() || c.size() > 3 || c.find_first_not_of("0123456789") != std::string::npos)
      throw ApiError(400, "choice must be a choice index (0, 1, ...)", "choice");
    choice = std::stoi(c);
  }
  auto entry = traces.find(id, choice);
  if (!entry)
    throw ApiError(404,
                   "no trace of request \"" + id + "\" (choice " + std::to_string(choice) +
                       "): only the last " + std::to_string(options.viz_traces) +
                       " requests are kept",
                   "id", "invalid_request_error", "trace_not_found");
  return entry;
}

void Server::Impl::viz_index(http::Response& res) {
  std::string html =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rkv serve: "
      "request traces</title><style>body{font:14px/1.5 system-ui,sans-serif;margin:16px}"
      "td,th{padding:2px 10px;text-align:left}</style></head><body>\n<h1>Request traces</h1>\n";
  const auto entries = traces.list();
  if (!traces.enabled()) {
    html += "<p>Tracing is off: start <code>rkv serve</code> with <code>--viz N</code>.</p>";
  } else if (entries.empty()) {
    html += "<p>No request yet: the traces of the last " + std::to_string(options.viz_traces) +
            " requests are kept.</p>";
  } else {
    html += "<table><tr><th>request</th><th>choice</th><th>method</th><th>state</th></tr>\n";
    for (const auto& e : entries) {
      bool finished;
      {
        std::lock_guard lock(e->mutex);
        finished = e->finished;
      }
      const std::string query =
          "id=" + viz::escape_html(e->id) +
          (e->choice > 0 ? "&amp;choice=" + std::to_string(e->choice) : std::string());
      html += "<tr><td><a href=\"/viz?" + query + "\">" + viz::escape_html(e->id) +
              "</a></td><td>" + std::to_string(e->choice) + "</td><td>" +
              viz::escape_html(e->method) + "</td><td>" + (finished ? "finished" : "running") +
              "</td><td><a href=\"/viz/trace?" + query + "\">trace</a></td></tr>\n";
    }
    html += "</table>";
  }
  html += "</body></html>\n";
  res.set_content(html, "text/html; charset=utf-8");
}

}  // namespace rkv::server
