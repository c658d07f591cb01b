#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/utf8.h"

namespace rkv::server::http {

namespace {

using Clock = std::chrono::steady_clock;

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

// RFC 9110's tchar: the characters of a method or a header name.
bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The printable form of request text in an error message: invalid UTF-8 and control bytes as
// \xHH, at most `limit` bytes.
std::string printable(std::string_view s, std::size_t limit = 200) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size() && out.size() < limit) {
    const auto c = static_cast<unsigned char>(s[i]);
    const Utf8Step step = utf8_step(s, i);
    if (c >= 0x80 && step.valid) {
      out.append(s.substr(i, step.length));
      i += step.length;
      continue;
    }
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    ++i;
  }
  if (i < s.size()) out += "...";
  return out;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
}

// Sends all of `data` on a blocking socket (SO_SNDTIMEO bounds each stall); false on failure.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // the peer is gone, or it stopped reading for the write timeout
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Writes what a non-blocking socket takes now; the rest is dropped (short answers only).
void send_now(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

}  // namespace

bool percent_decode(std::string_view in, std::string& out, bool plus_is_space) {
  out.clear();
  out.reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = hex(in[i + 1]);
      const int lo = hex(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += in[i];
    }
  }
  return true;
}

const std::string* Request::header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.name, name)) return &h.value;
  return nullptr;
}

const std::string* Request::param(std::string_view name) const {
  for (const auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

void Response::set_header(std::string name, std::string value) {
  for (auto& h : headers)
    if (iequals(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  headers.push_back({std::move(name), std::move(value)});
}

// ---- RequestParser ------------------------------------------------------------------------------

RequestParser::State RequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return State::error;
}

RequestParser::State RequestParser::parse_head(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    const std::size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
  }
  if (lines.empty()) return fail(400, "the request line is missing");
  if (lines.size() > 101) return fail(431, "more than 100 header fields");

  // The request line: METHOD SP target SP HTTP/1.x
  const std::string_view line = lines.front();
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not 'METHOD TARGET HTTP/1.1': '" + printable(line) + "'");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 32 ||
      !std::all_of(method.begin(), method.end(),
                   [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
    return fail(400, "the method '" + printable(method) + "' is not a valid HTTP method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.substr(0, 5) == "HTTP/")
      return fail(505, "HTTP version '" + printable(version) + "' is not supported (HTTP/1.1)");
    return fail(400, "the request line does not end in an HTTP version");
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
      }))
    return fail(400, "the request target is empty or holds a control character");
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.version = std::string(version);

  std::string_view origin = target;
  if (origin.substr(0, 7) == "http://" || origin.substr(0, 8) == "https://") {
    const std::size_t slash = origin.find('/', origin.find("//") + 2);
    origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
  }
  if (origin == "*" && method == "OPTIONS") {
    request_.path = "*";
  } else {
    if (origin.front() != '/')
      return fail(400, "the request target '" + printable(origin) + "' does not start with /");
    const std::size_t q = origin.find('?');
    const std::string_view raw_path = origin.substr(0, q);
    if (!percent_decode(raw_path, request_.path, false))
      return fail(400, "the request path holds a malformed %-escape");
    if (!is_valid_utf8(request_.path) || request_.path.find('\0') != std::string::npos)
      return fail(400, "the request path '" + printable(request_.path) +
                           "' is not valid UTF-8 text (percent-decoded)");
    if (q != std::string_view::npos) {
      std::string_view query = origin.substr(q + 1);
      while (!query.empty()) {
        const std::size_t amp = query.find('&');
        const std::string_view item = query.substr(0, amp);
        query.remove_prefix(amp == std::string_view::npos ? query.size() : amp + 1);
        if (item.empty()) continue;
        const std::size_t eq = item.find('=');
        std::string key, value;
        if (!percent_decode(item.substr(0, eq), key, true) ||
            (eq != std::string_view::npos && !percent_decode(item.substr(eq + 1), value, true)))
          return fail(400, "the query holds a malformed %-escape");
        if (!is_valid_utf8(key) || !is_valid_utf8(value))
          return fail(400, "the query parameter '" + printable(key) + "' is not valid UTF-8");
        request_.params.emplace_back(std::move(key), std::move(value));
      }
    }
  }

  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string_view h = lines[i];
    if (h.front() == ' ' || h.front() == '\t')
      return fail(400, "obsolete header line folding is not accepted");
    const std::size_t colon = h.find(':');
    if (colon == 0 || colon == std::string_view::npos)
      return fail(400, "a header line has no field name: '" + printable(h) + "'");
    const std::string_view name = h.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(),
                     [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
      return fail(400, "the header name '" + printable(name) + "' is not valid");
    const std::string_view value = trim_ows(h.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return (u < 0x20 && u != '\t') || u == 0x7f;
        }))
      return fail(400, "the header '" + std::string(name) + "' holds a control character");
    request_.headers.push_back({std::string(name), std::string(value)});
  }
  return State::need_more;
}

RequestParser::State RequestParser::after_head() {
  const bool http10 = request_.version == "HTTP/1.0";
  int lengths = 0, encodings = 0;
  std::string length_value, encoding_value;
  for (const auto& h : request_.headers) {
    if (iequals(h.name, "Content-Length")) {
      ++lengths;
      length_value = h.value;
    } else if (iequals(h.name, "Transfer-Encoding")) {
      ++encodings;
      encoding_value = lowercase(h.value);
    } else if (iequals(h.name, "Connection")) {
      const std::string v = lowercase(h.value);
      if (v.find("close") != std::string::npos) request_.keep_alive = false;
    } else if (iequals(h.name, "Expect")) {
      if (lowercase(h.value) != "100-continue")
        return fail(417, "the expectation '" + printable(h.value) + "' is not supported");
      expect_continue_ = !http10;
    }
  }
  if (http10) request_.keep_alive = false;
  if (lengths > 1) return fail(400, "the request has more than one Content-Length header");
  if (encodings > 0) {
    if (lengths > 0)
      return fail(400, "the request has both Content-Length and Transfer-Encoding headers");
    if (http10) return fail(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    if (encodings > 1 || encoding_value != "chunked")
      return fail(501, "Transfer-Encoding '" + printable(encoding_value) +
                           "' is not supported (only chunked)");
    phase_ = Phase::chunk_size;
    return State::need_more;
  }
  if (lengths == 1) {
    if (length_value.empty() || length_value.size() > 18 ||
        length_value.find_first_not_of("0123456789") != std::string::npos)
      return fail(400, "the Content-Length '" + printable(length_value) + "' is not a number");
    remaining_ = std::stoull(length_value);
    if (remaining_ > limits_.max_body_bytes)
      return fail(413, "the request body is " + length_value + " bytes, more than the limit of " +
                           std::to_string(limits_.max_body_bytes));
  }
  if (remaining_ == 0) {
    phase_ = Phase::done;
    return State::complete;
  }
  phase_ = Phase::body_pending;
  return State::need_more;
}

RequestParser::State RequestParser::feed(const std::string& data, std::size_t& pos) {
  if (phase_ == Phase::head) {
    // Blank lines before a request line are ignored (RFC 9112, 2.2).
    while (!started_ && pos < data.size() && (data[pos] == '\r' || data[pos] == '\n')) ++pos;
    if (pos >= data.size()) return State::need_more;
    started_ = true;
    std::size_t i = pos + (head_scanned_ > 3 ? head_scanned_ - 3 : 0);
    std::size_t end = std::string::npos;
    for (; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      if (i + 1 < data.size() && data[i + 1] == '\n') {
        end = i + 2;
        break;
      }
      if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') {
        end = i + 3;
        break;
      }
    }
    if (end == std::string::npos) {
      head_scanned_ = data.size() - pos;
      if (head_scanned_ > limits_.max_header_bytes)
        return fail(431, "the request line and headers exceed " +
                             std::to_string(limits_.max_header_bytes) + " bytes");
      return State::need_more;
    }
    if (end - pos > limits_.max_header_bytes)
      return fail(431, "the request line and headers exceed " +
                           std::to_string(limits_.max_header_bytes) + " bytes");
    if (parse_head(std::string_view(data).substr(pos, end - pos)) == State::error)
      return State::error;
    pos = end;
    const State s = after_head();
    if (s != State::need_more) return s;
  }
  while (pos < data.size() || phase_ == Phase::done) {
    switch (phase_) {
      case Phase::head:
      case Phase::done:
        return State::complete;
      case Phase::body_pending:
        phase_ = Phase::body_length;
        [[fallthrough]];
      case Phase::body_length:
      case Phase::chunk_data: {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size() - pos));
        request_.body.append(data, pos, n);
        pos += n;
        remaining_ -= n;
        if (remaining_ == 0)
          phase_ = phase_ == Phase::chunk_data ? Phase::chunk_data_end : Phase::done;
        break;
      }
      case Phase::chunk_size: {
        expect_continue_ = false;  // the body has begun
        const std::size_t nl = data.find('\n', pos);
        if (nl == std::string::npos) {
          if (data.size() - pos > 4096) return fail(400, "a chunk-size line exceeds 4096 bytes");
          return State::need_more;
        }
        std::string_view line(data.data() + pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        std::size_t digits = 0;
        std::uint64_t size = 0;
        while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
          if (digits == 15) return fail(400, "a chunk size is too large");
          const char c = lower(line[digits]);
          size = size * 16 + static_cast<std::uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
          ++digits;
        }
        const std::string_view rest = trim_ows(line.substr(digits));
        if (digits == 0 || (!rest.empty() && rest.front() != ';'))
          return fail(400, "a chunk-size line is malformed: '" + printable(line) + "'");
        pos = nl + 1;
        if (size == 0) {
          phase_ = Phase::trailers;
          break;
        }
        if (request_.body.size() + size > limits_.max_body_bytes)
          return fail(413, "the request body is more than the limit of " +
                               std::to_string(limits_.max_body_bytes) + " bytes");
        remaining_ = size;
        phase_ = Phase::chunk_data;
        break;
      }
      case Phase::chunk_data_end:
        if (data[pos] == '\n') {
          ++pos;
        } else if (data[pos] == '\r') {
          if (pos + 1 >= data.size()) return State::need_more;
          if (data[pos + 1] != '\n') return fail(400, "a chunk does not end in CRLF");
          pos += 2;
        } else {
          return fail(400, "a chunk is longer than its size");
        }
        phase_ = Phase::chunk_size;
        break;
      case Phase::trailers: {
        const std::size_t nl = data.find('\n', pos);
        if (nl == std::string::npos) {
          if (trailer_bytes_ + (data.size() - pos) > limits_.max_header_bytes)
            return fail(431, "the trailer fields exceed " +
                                 std::to_string(limits_.max_header_bytes) + " bytes");
          return State::need_more;
        }
        const std::size_t len = nl + 1 - pos;
        trailer_bytes_ += len;
        if (trailer_bytes_ > limits_.max_header_bytes)
          return fail(431, "the trailer fields exceed " + std::to_string(limits_.max_header_bytes) +
                               " bytes");
        pos = nl + 1;
        if (len == 1 || (len == 2 && data[nl - 1] == '\r')) phase_ = Phase::done;
        break;
      }
    }
  }
  return State::need_more;
}

Request RequestParser::take() {
  Request out = std::move(request_);
  request_ = Request{};
  phase_ = Phase::head;
  started_ = false;
  expect_continue_ = false;
  head_scanned_ = 0;
  remaining_ = 0;
  trailer_bytes_ = 0;
  return out;
}

// ---- HttpServer ---------------------------------------------------------------------------------

struct HttpServer::Impl {
  struct Conn {
    explicit Conn(const Limits& limits) : parser(limits) {}
    int fd = -1;
    std::string in;
    std::size_t pos = 0;
    RequestParser parser;
    Clock::time_point deadline;
    bool draining = false;  // answered and half-closed: reading what is left, then closing
    std::size_t drained = 0;
  };
  struct Job {
    std::unique_ptr<Conn> conn;
    Request request;
  };
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Job> jobs;
    std::vector<std::thread> threads;
  };

  Limits limits;
  Handler handler;
  ErrorBody error_body;
  std::vector<Header> default_headers;
  std::function<bool(const Request&)> fast_lane;
  std::size_t large_bytes = 0;
  std::function<void()> after_large;

  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // the I/O thread's only
  int draining = 0;                                      // the I/O thread's only
  Queue workers, fast;
  std::mutex returned_mutex;
  std::vector<std::unique_ptr<Conn>> returned;
  std::mutex busy_mutex;
  std::set<int> busy;  // sockets a worker is writing to
  std::atomic<int> open{0};
  std::atomic<std::int64_t> accepted{0}, refused_busy{0}, protocol_errors{0}, timeouts{0};

  Impl(Limits l, Handler h, ErrorBody e)
      : limits(l), handler(std::move(h)), error_body(std::move(e)) {
    if (!error_body)
      error_body = [](int, const std::string& message) {
        return std::pair<std::string, std::string>(message + "\n", "text/plain; charset=utf-8");
      };
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd < 0 || wake_fd < 0)
      throw Error(std::string("cannot create the server's event loop: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
  }

  ~Impl() {
    for (auto& [fd, c] : conns) ::close(fd);
    if (listen_fd >= 0) ::close(listen_fd);
    ::close(epoll_fd);
    ::close(wake_fd);
  }

  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof(one));
  }

  // A short answer that ends the connection, from the I/O thread.
  std::string short_response(int status, const std::string& message) {
    const auto [body, type] = error_body(status, message);
    std::string out = status_line(status);
    for (const auto& h : default_headers) out += h.name + ": " + h.value + "\r\n";
    if (status == 503) out += "Retry-After: 1\r\n";
    out += "Content-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
    return out;
  }

  void watch(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }

  void close_conn(int fd) {
    const auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second->draining)
      --draining;
    else
      --open;
    ::close(fd);  // also leaves the epoll set
    conns.erase(it);
  }

  // Answers, half-closes and reads what is left for a while (a lingering close), so the client
  // sees the answer instead of a reset from unread bytes: a reset makes the client's kernel
  // throw away an answer its program has not read yet. The linger ends when the client closes,
  // after 2 s, or after 256 MiB discarded, whichever comes first.
  void refuse(Conn& c, int status, const std::string& message) {
    send_now(c.fd, short_response(status, message));
    ::shutdown(c.fd, SHUT_WR);
    c.draining = true;
    c.in.clear();
    c.in.shrink_to_fit();
    c.pos = 0;
    c.deadline = Clock::now() + std::chrono::seconds(2);
    --open;
    ++draining;
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;  // EAGAIN, or out of descriptors: the rest wait in the backlog
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>(limits);
      c->fd = fd;
      c->deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(limits.header_timeout_seconds));
      if (open.load() >= limits.max_connections) {
        ++refused_busy;
        if (draining >= limits.max_connections) {
          ::close(fd);
          continue;
        }
        ++open;  // refuse() moves it to the draining count
        Conn& ref = *c;
        conns.emplace(fd, std::move(c));
        watch(fd);
        refuse(ref, 503,
               "the server has " + std::to_string(limits.max_connections) +
                   " connections open, its limit; retry later");
        continue;
      }
      ++open;
      ++accepted;
      watch(fd);
      conns.emplace(fd, std::move(c));
    }
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // Parses what `c` holds; dispatches a complete request or answers a bad one.
  void process(Conn& c, bool eof) {
    const bool was_started = c.parser.started();
    const RequestParser::State s = c.parser.feed(c.in, c.pos);
    const auto now = Clock::now();
    if (!was_started && c.parser.started())
      c.deadline = now + seconds(limits.header_timeout_seconds);
    if (s == RequestParser::State::error) {
      ++protocol_errors;
      refuse(c, c.parser.error_status(), c.parser.error_message());
      return;
    }
    if (s == RequestParser::State::complete) {
      c.in.erase(0, c.pos);
      c.pos = 0;
      if (c.in.capacity() > (64u << 10)) c.in.shrink_to_fit();
      dispatch(c.fd);
      return;
    }
    c.in.erase(0, c.pos);
    c.pos = 0;
    if (c.parser.headers_done()) {
      // The body arrives: the idle timeout runs from the last progress.
      c.deadline = now + seconds(limits.idle_timeout_seconds);
      if (c.parser.wants_continue()) {
        send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
        c.parser.continue_sent();
      }
    }
    if (eof) {
      if (c.parser.started()) {
        ++protocol_errors;
        refuse(c, 400, "the connection was closed before the request was complete");
      } else {
        close_conn(c.fd);
      }
    }
  }

  void on_readable(int fd) {
    const auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    char buf[65536];
    bool eof = false;
    for (int reads = 0; reads < 4; ++reads) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        if (c.draining) {
          c.drained += static_cast<std::size_t>(n);
          if (c.drained > (256u << 20)) return close_conn(fd);
        } else {
          c.in.append(buf, static_cast<std::size_t>(n));
        }
        if (static_cast<std::size_t>(n) < sizeof(buf)) break;
        continue;
      }
      if (n == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return close_conn(fd);  // reset by the peer
    }
    if (c.draining) {
      if (eof) close_conn(fd);
      return;
    }
    process(c, eof);
  }

  void dispatch(int fd) {
    auto it = conns.find(fd);
    std::unique_ptr<Conn> conn = std::move(it->second);
    conns.erase(it);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    Job job{std::move(conn), {}};
    job.request = job.conn->parser.take();
    Queue& q = fast_lane && fast_lane(job.request) ? fast : workers;
    std::lock_guard lock(q.mutex);
    q.jobs.push_back(std::move(job));
    q.cv.notify_one();
  }

  void take_returned() {
    std::uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd, &count, sizeof(count));
    std::vector<std::unique_ptr<Conn>> back;
    {
      std::lock_guard lock(returned_mutex);
      back.swap(returned);
    }
    for (auto& c : back) {
      const int fd = c->fd;
      if (stopping.load()) {
        ::close(fd);
        --open;
        continue;
      }
      c->deadline = Clock::now() + seconds(limits.idle_timeout_seconds);
      Conn& ref = *c;
      conns.emplace(fd, std::move(c));
      watch(fd);
      if (!ref.in.empty()) process(ref, false);  // a pipelined request read with the last one
    }
  }

  void check_deadlines() {
    const auto now = Clock::now();
    std::vector<int> expired;
    for (const auto& [fd, c] : conns)
      if (now >= c->deadline) expired.push_back(fd);
    for (int fd : expired) {
      Conn& c = *conns.at(fd);
      if (c.draining || !c.parser.started()) {
        close_conn(fd);  // an idle keep-alive connection, or an answered one
      } else {
        ++timeouts;
        refuse(c, 408,
               c.parser.headers_done() ? "no part of the request body arrived for " +
                                             std::to_string(limits.idle_timeout_seconds) + " s"
                                       : "the request line and headers did not arrive within " +
                                             std::to_string(limits.header_timeout_seconds) + " s");
      }
    }
  }

  void run_io() {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
    std::vector<epoll_event> events(256);
    auto last_check = Clock::now();
    while (!stopping.load()) {
      const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 100);
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<std::size_t>(i)].data.fd;
        if (fd == listen_fd)
          accept_all();
        else if (fd == wake_fd)
          take_returned();
        else
          on_readable(fd);
      }
      const auto now = Clock::now();
      if (now - last_check >= std::chrono::milliseconds(100)) {
        last_check = now;
        check_deadlines();
      }
    }
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
    ::close(listen_fd);
    listen_fd = -1;
    std::vector<int> fds;
    for (const auto& [fd, c] : conns) fds.push_back(fd);
    for (int fd : fds) close_conn(fd);
  }

  class SocketSink : public Sink {
   public:
    // chunked: each write is a chunk; else (an HTTP/1.0 client) the bytes as they are, the end
    // of the body being the end of the connection.
    SocketSink(int fd, bool chunked) : fd_(fd), chunked_(chunked) {}
    bool write(std::string_view data) override {
      if (!alive_) return false;
      if (data.empty()) return true;  // an empty chunk would end the body
      if (!chunked_) {
        alive_ = send_all(fd_, data);
        return alive_;
      }
      char size[24];
      const int len = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
      std::string chunk;
      chunk.reserve(data.size() + static_cast<std::size_t>(len) + 2);
      chunk.append(size, static_cast<std::size_t>(len));
      chunk.append(data);
      chunk.append("\r\n");
      alive_ = send_all(fd_, chunk);
      return alive_;
    }
    bool alive() const { return alive_; }
    void dead() { alive_ = false; }

   private:
    int fd_;
    bool chunked_;
    bool alive_ = true;
  };

  // Writes the response; true when the connection can carry another request.
  bool respond(int fd, const Request& req, Response& res) {
    bool keep = req.keep_alive && !stopping.load();
    for (const auto& h : res.headers)
      if (iequals(h.name, "Connection") && lowercase(h.value) == "close") keep = false;
    std::string head = status_line(res.status);
    for (const auto& h : default_headers) head += h.name + ": " + h.value + "\r\n";
    for (const auto& h : res.headers)
      if (!iequals(h.name, "Connection")) head += h.name + ": " + h.value + "\r\n";
    if (!res.content_type.empty()) head += "Content-Type: " + res.content_type + "\r\n";
    if (!keep) head += "Connection: close\r\n";
    if (!res.stream) {
      if (res.status != 204 && res.status != 304)
        head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
      head += "\r\n";
      if (req.method != "HEAD") head += res.body;
      return send_all(fd, head) && keep;
    }
    // HTTP/1.0 has no chunked encoding: the body ends with the connection (keep is false).
    const bool chunked = req.version != "HTTP/1.0";
    head += chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n";
    if (!send_all(fd, head)) return false;
    SocketSink sink(fd, chunked);
    try {
      res.stream(sink);
    } catch (...) {
      sink.dead();  // the body is cut: the client sees the stream end without its last chunk
    }
    return chunked && sink.alive() && send_all(fd, "0\r\n\r\n") && keep;
  }

  void serve_job(Job& job) {
    const int fd = job.conn->fd;
    set_nonblocking(fd, false);
    const auto t = limits.write_timeout_seconds;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t);
    tv.tv_usec = static_cast<suseconds_t>((t - static_cast<double>(tv.tv_sec)) * 1e6);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    {
      std::lock_guard lock(busy_mutex);
      busy.insert(fd);
    }
    Response res;
    try {
      handler(job.request, res);
    } catch (const std::exception& e) {
      res = Response{};
      res.status = 500;
      std::tie(res.body, res.content_type) = error_body(500, e.what());
    } catch (...) {
      res = Response{};
      res.status = 500;
      std::tie(res.body, res.content_type) = error_body(500, "unknown error");
    }
    bool keep = false;
    try {
      keep = respond(fd, job.request, res);
    } catch (...) {
      keep = false;
    }
    {
      std::lock_guard lock(busy_mutex);
      busy.erase(fd);
    }
    const bool large = after_large && job.request.body.size() >= large_bytes;
    job.request = Request{};
    res = Response{};
    if (large) after_large();
    if (!keep) {
      ::close(fd);
      --open;
      return;
    }
    set_nonblocking(fd, true);
    {
      std::lock_guard lock(returned_mutex);
      returned.push_back(std::move(job.conn));
    }
    wake();
  }

  void run_worker(Queue& q) {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(q.mutex);
        q.cv.wait(lock, [&] { return stopping.load() || !q.jobs.empty(); });
        if (q.jobs.empty()) return;  // stopping, and nothing left
        job = std::move(q.jobs.front());
        q.jobs.pop_front();
      }
      serve_job(job);
    }
  }

  void start_workers(Queue& q, int count) {
    for (int i = 0; i < count; ++i) q.threads.emplace_back([this, &q] { run_worker(q); });
  }

  void stop_workers(Queue& q) {
    {
      std::lock_guard lock(q.mutex);
      q.cv.notify_all();
    }
  }
};

HttpServer::HttpServer(Limits limits, Handler handler, ErrorBody error_body)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), std::move(error_body))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::set_default_headers(std::vector<Header> headers) {
  impl_->default_headers = std::move(headers);
}

void HttpServer::set_fast_lane(std::function<bool(const Request&)> pred) {
  impl_->fast_lane = std::move(pred);
}

void HttpServer::set_after_large_request(std::size_t bytes, std::function<void()> fn) {
  impl_->large_bytes = bytes;
  impl_->after_large = std::move(fn);
}

Listener listen_on(const std::string& host, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr)
    throw Error("cannot listen on " + host + ": not an address or host name this machine knows");
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, std::max(1, backlog)) == 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      const int bound = addr.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      ::freeaddrinfo(found);
      return {fd, bound};
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw Error("cannot listen on " + host + ":" + std::to_string(port) + " (" + why + ")");
}

int HttpServer::bind(const std::string& host, int port) {
  const Listener l = listen_on(host, port, impl_->limits.backlog);
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  impl_->listen_fd = l.fd;
  return l.port;
}

void HttpServer::serve() {
  if (impl_->listen_fd < 0) throw Error("HttpServer::serve: bind() first");
  if (impl_->stopping.load()) return;
  running_.store(true);
  impl_->start_workers(impl_->workers, std::max(1, impl_->limits.workers));
  impl_->start_workers(impl_->fast, std::max(1, impl_->limits.fast_workers));
  impl_->run_io();
  // Handlers in flight finish (the caller stops the engine first, which ends them); a worker
  // stuck writing to a client that does not read is cut after a grace period.
  impl_->stop_workers(impl_->workers);
  impl_->stop_workers(impl_->fast);
  const auto grace = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool idle;
    {
      std::lock_guard lock(impl_->busy_mutex);
      idle = impl_->busy.empty();
      if (!idle && Clock::now() >= grace)
        for (int fd : impl_->busy) ::shutdown(fd, SHUT_RDWR);
    }
    if (idle || Clock::now() >= grace) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto* q : {&impl_->workers, &impl_->fast})
    for (auto& t : q->threads) t.join();
  {
    std::lock_guard lock(impl_->returned_mutex);
    for (auto& c : impl_->returned) {
      ::close(c->fd);
      --impl_->open;
    }
    impl_->returned.clear();
  }
  running_.store(false);
}

void HttpServer::stop() {
  impl_->stopping.store(true);
  impl_->wake();
  impl_->stop_workers(impl_->workers);
  impl_->stop_workers(impl_->fast);
}

HttpServer::Counters HttpServer::counters() const {
  Counters c;
  c.accepted = impl_->accepted.load();
  c.refused_busy = impl_->refused_busy.load();
  c.protocol_errors = impl_->protocol_errors.load();
  c.timeouts = impl_->timeouts.load();
  c.open = impl_->open.load();
  return c;
}

}  // namespace rkv::server::http
