// `rkv serve`: an OpenAI-compatible HTTP server over the Engine (docs/SERVER.md).
//
// One engine thread steps the continuous batch (Engine::start); the HTTP threads only parse,
// validate, queue and stream: a handler prepares its request (every invalid one is answered
// with an OpenAI error object and never reaches the engine), submits it, and then writes what
// the engine thread hands it through a per-request channel. A write that fails (the client went
// away) cancels the request, which frees its KV slot at the engine's next step.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/openai_api.h"

namespace rkv::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (see Server::port())
  int queue_limit = 64;    // requests waiting for a slot beyond which new ones get 429
  int http_threads = 128;  // requests handled at once (streams hold one each)
  // The limits of the HTTP layer (docs/SERVER.md, "Limits"): a request's body, the time for its
  // request line and headers, the idle time of a connection (between requests and within a
  // body), a stalled response write, connections open at once (503 beyond), the listen queue.
  std::size_t max_body_bytes = 16u << 20;
  double header_timeout_seconds = 10;
  double idle_timeout_seconds = 5;
  double write_timeout_seconds = 30;
  int max_connections = 1024;
  int listen_backlog = 1024;
  std::string model_name;          // what /v1/models lists (default: the model directory's name)
  RequestDefaults defaults;        // the generate flags given to `rkv serve`
  double heartbeat_seconds = 0.5;  // idle time after which a waiting response probes the client
  // When set, every endpoint but /health needs "Authorization: Bearer <api_key>" (401 without).
  std::string api_key;
  // Keep the compression traces of the last `viz_traces` requests for the /viz page (0: off).
  int viz_traces = 0;
  // The tool-call syntax parsed from chat answers (src/server/tool_calls.h): "auto" reads it from
  // the engine's chat template, or a format's name.
  std::string tool_call_parser = "auto";
  // A test seam (`--scripted-replies FILE`): null, or an array of rules {"reply": TEXT,
  // "when_last_role": ROLE, "when_contains": TEXT}; a request takes the first rule whose
  // conditions (both optional) its last message (a completion's prompt) meets, and the engine
  // writes that reply instead of sampling (Request::scripted_reply).
  nlohmann::json scripted_replies;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the listening socket; returns the port. Throws rkv::Error when it cannot.
  int bind();
  int port() const { return port_; }
  // Serves until stop(); /health answers 503 (loading) until set_engine().
  void serve();
  void stop();
  // The engine is ready: requests are served from now on, with `defaults` for what they leave
  // out (replacing ServerOptions::defaults: steering needs the loaded model). The engine must be
  // started and outlive the server's serving.
  void set_engine(Engine* engine, std::string model_name, RequestDefaults defaults);

  // Graceful drain (docs/DEPLOY.md): from now on new completions get 503 with Retry-After (code
  // "draining"), /health answers 503 {"status": "draining"} and the agent says "drain", while
  // the requests already accepted run to their end. in_flight() counts those not yet answered.
  void drain();
  bool draining() const;
  int in_flight() const;
  // The line rkv's load-balancer agent answers (HAProxy's agent-check protocol): "down" while
  // the model loads, "drain" while draining, else "ready up N%" with N the share of the KV cap
  // that is free (5-100; 100 without a cap), so new requests go where there is room.
  std::string agent_reply() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace rkv::server
