// Fuzzes `rkv serve` end to end, in process: the HTTP layer (src/server/http.cpp), the routes and
// the OpenAI handlers (src/server/server.cpp) and the engine behind them, on the shipped tiny
// model. Each input is the raw bytes a client sends on one connection (request lines, headers,
// chunked bodies, pipelined requests, JSON with invalid UTF-8); the harness sends them over
// loopback, half-closes, and reads the answer. A crash, a sanitizer report, a response that is not
// HTTP, or a server that stops answering /health is a bug.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "core/thread_pool.h"
#include "fuzz_common.h"
#include "model/model.h"
#include "rkv/engine.h"
#include "rkv/tokenizer.h"
#include "server/server.h"

namespace {

struct Served {
  std::unique_ptr<rkv::Model> model;
  std::unique_ptr<rkv::Tokenizer> tokenizer;
  std::unique_ptr<rkv::ThreadPool> pool;
  std::unique_ptr<rkv::Engine> engine;
  std::unique_ptr<rkv::server::Server> server;
  std::thread thread;
  int port = 0;

  Served() {
    model = rkv::Model::load(RKV_FUZZ_TOKENIZER_DIR);
    tokenizer = std::make_unique<rkv::Tokenizer>(rkv::Tokenizer::load(RKV_FUZZ_TOKENIZER_DIR));
    pool = std::make_unique<rkv::ThreadPool>(1);
    rkv::EngineOptions eo;
    eo.context_size = 48;  // every generation ends within a few milliseconds
    eo.kv_memory_bytes = 8u << 20;
    engine = std::make_unique<rkv::Engine>(*model, tokenizer.get(), *pool, eo);
    engine->start();
    rkv::server::ServerOptions o;
    o.port = 0;
    o.http_threads = 8;
    o.header_timeout_seconds = 2;
    o.idle_timeout_seconds = 2;
    o.max_body_bytes = 1u << 20;
    o.viz_traces = 4;
    rkv::server::RequestDefaults d;
    d.max_tokens = 8;
    server = std::make_unique<rkv::server::Server>(o);
    port = server->bind();
    server->set_engine(engine.get(), "tiny", d);
    thread = std::thread([this] { server->serve(); });
  }
};

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  // From 200 loopback addresses in turn: the server closes first, and the TIME_WAIT of a
  // connection holds its address pair for a minute, so one source address would run out of
  // ports within a few minutes at this rate.
  static std::uint32_t next = 0;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (next++ % 200));
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    std::size_t fds = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
      ++fds;
    std::fprintf(stderr, "fuzz: cannot connect to the server: %s (%zu descriptors open)\n",
                 std::strerror(err), fds);
    __builtin_trap();
  }
  return fd;
}

// Sends `bytes` on a new connection, half-closes, and returns what comes back until the server
// closes (or 8 s pass: a request still generating is left to finish on its own).
std::string exchange(int port, std::string_view bytes) {
  const int fd = connect_loopback(port);
  std::string out;
  std::size_t sent = 0;
  bool open = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < bytes.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) < 0) break;
    if ((p.revents & POLLOUT) != 0 && sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        sent = bytes.size();  // the server closed: read what it said
      } else {
        sent += static_cast<std::size_t>(n);
      }
    }
    if (sent == bytes.size() && open) {
      ::shutdown(fd, SHUT_WR);
      open = false;
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[16384];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      if (out.size() < (1u << 20)) out.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Served* served = new Served();  // lives for the whole process
  static std::uint64_t runs = 0;
  const std::string out = exchange(served->port, rkv_fuzz::as_text(data, size));
  // Whatever the input, what comes back is nothing (a client that sent nothing) or HTTP.
  if (!out.empty() && out.rfind("HTTP/1.1 ", 0) != 0) __builtin_trap();
  if (++runs % 64 == 0) {
    const std::string health = exchange(served->port, "GET /health HTTP/1.1\r\n\r\n");
    if (health.rfind("HTTP/1.1 200 ", 0) != 0) {
      std::fprintf(stderr, "fuzz: /health answered %zu bytes: %.300s\n", health.size(),
                   health.c_str());
      __builtin_trap();
    }
  }
  return 0;
}
