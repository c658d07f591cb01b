// The HTTP/1.1 layer under `rkv serve`: a bounded, event-driven reader in front of a fixed pool
// of handler threads (docs/SERVER.md, "The HTTP layer", says why not cpp-httplib).
//
// One I/O thread owns the listening socket and every connection that is reading a request: it
// reads whatever arrives without blocking, parses it (RequestParser) and enforces the limits,
// so a slow or hostile client holds a file descriptor and a buffer, never a thread. A complete
// request is handed to a worker, which runs the handler and writes the response (a streamed one
// holds its worker until it ends); a kept-alive connection then goes back to the I/O thread,
// where bytes already read (pipelined requests) are parsed first, so requests on one connection
// are answered in order. Everything the I/O thread refuses it answers itself with a short
// response and `Connection: close`.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rkv::server::http {

struct Limits {
  std::size_t max_body_bytes = 16u << 20;    // 413 beyond it, counted as the body arrives
  std::size_t max_header_bytes = 64u << 10;  // request line plus headers; 431 beyond it
  double header_timeout_seconds = 10;  // from a request's first byte to the end of its headers
  double idle_timeout_seconds = 5;     // waiting for a request, or for more of a body
  double write_timeout_seconds = 30;   // a response write that makes no progress this long
  int max_connections = 1024;          // open at once; beyond it, 503 and close
  int backlog = 1024;                  // the listen queue of connections not yet accepted
  int workers = 128;                   // handlers running at once (a stream holds one)
  int fast_workers = 2;                // handlers of the fast lane (see HttpServer::set_fast_lane)
};

struct Header {
  std::string name, value;
};

struct Request {
  std::string method;
  std::string target;   // as sent
  std::string path;     // percent-decoded, valid UTF-8
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::vector<Header> headers;
  std::vector<std::pair<std::string, std::string>> params;  // the query, decoded, valid UTF-8
  std::string body;
  bool keep_alive = true;

  // The first header of this name (case-insensitive); nullptr when absent.
  const std::string* header(std::string_view name) const;
  const std::string* param(std::string_view name) const;
};

// What a streaming handler writes to: each write is one chunk of the chunked body. False once
// the client is gone or stopped reading (then nothing more can be written).
class Sink {
 public:
  virtual ~Sink() = default;
  virtual bool write(std::string_view data) = 0;
};

struct Response {
  int status = 200;
  std::vector<Header> headers;
  std::string content_type;
  std::string body;
  // When set, the body is streamed (Transfer-Encoding: chunked) by this function instead.
  std::function<void(Sink&)> stream;

  void set_header(std::string name, std::string value);
  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
};

using Handler = std::function<void(const Request&, Response&)>;
// Answers for the failures the HTTP layer finds itself (400, 408, 413, 431, 501, 503, 505, and
// 500 when a handler throws): a body and its content type. The default writes plain text.
using ErrorBody =
    std::function<std::pair<std::string, std::string>(int status, const std::string& message)>;

// Incremental parser of one request at a time from a connection's bytes.
class RequestParser {
 public:
  enum class State { need_more, complete, error };
  explicit RequestParser(const Limits& limits) : limits_(limits) {}

  // Parses as much of `data[pos..]` as it can; advances `pos` past what it consumed (never past
  // the end of the request it completes, so pipelined bytes stay for the next one).
  State feed(const std::string& data, std::size_t& pos);
  // After `complete`: the request (the parser is then ready for the next one).
  Request take();

  bool started() const { return started_; }
  bool headers_done() const { return phase_ != Phase::head; }
  // The headers asked for "100 Continue" and the body has not begun.
  bool wants_continue() const { return expect_continue_ && phase_ == Phase::body_pending; }
  void continue_sent() { expect_continue_ = false; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Phase {
    head,
    body_pending,  // headers parsed, no byte of the body yet
    body_length,
    chunk_size,
    chunk_data,
    chunk_data_end,
    trailers,
    done
  };
  State fail(int status, std::string message);
  State parse_head(std::string_view head);
  State after_head();

  const Limits& limits_;
  Phase phase_ = Phase::head;
  bool started_ = false;
  bool expect_continue_ = false;
  std::size_t head_scanned_ = 0;  // bytes of the head already searched for its end
  std::uint64_t remaining_ = 0;   // body or chunk bytes still to come
  std::size_t trailer_bytes_ = 0;
  Request request_;
  int error_status_ = 0;
  std::string error_message_;
};

// Decodes %XX escapes (and '+' as a space when `plus_is_space`); false on a malformed escape.
bool percent_decode(std::string_view in, std::string& out, bool plus_is_space);

// A listening, non-blocking TCP socket on host:port (port 0: any free one). Throws rkv::Error.
struct Listener {
  int fd = -1;
  int port = 0;
};
Listener listen_on(const std::string& host, int port, int backlog);

class HttpServer {
 public:
  HttpServer(Limits limits, Handler handler, ErrorBody error_body = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Headers added to every response (e.g. CORS).
  void set_default_headers(std::vector<Header> headers);
  // Requests for which `pred` is true run on a few threads of their own, so cheap endpoints
  // (/health) answer while every worker holds a stream.
  void set_fast_lane(std::function<bool(const Request&)> pred);
  // Called after each response to a request whose body was at least this many bytes (for
  // returning memory to the system).
  void set_after_large_request(std::size_t bytes, std::function<void()> fn);

  // Binds and listens; port 0 picks a free one. Returns the port; throws rkv::Error.
  int bind(const std::string& host, int port);
  // Serves until stop() (from any thread, also before serve()).
  void serve();
  void stop();
  bool running() const { return running_.load(); }

  struct Counters {
    std::int64_t accepted = 0, refused_busy = 0, protocol_errors = 0, timeouts = 0;
    int open = 0;
  };
  Counters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> running_{false};
};

}  // namespace rkv::server::http
