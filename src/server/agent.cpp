#include "server/agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "server/http.h"

namespace rkv::server {

AgentServer::AgentServer(std::function<std::string()> reply) : reply_(std::move(reply)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0)
    throw Error(std::string("agent: cannot create an eventfd: ") + std::strerror(errno));
}

AgentServer::~AgentServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

int AgentServer::bind(const std::string& host, int port) {
  const http::Listener l = http::listen_on(host, port, 128);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = l.fd;
  return l.port;
}

void AgentServer::serve() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, 500) <= 0) continue;
    if ((fds[1].revents & POLLIN) != 0) break;
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      // One short line into an empty socket buffer: it never blocks. What HAProxy may send first
      // (agent-send) is not needed.
      std::string line;
      try {
        line = reply_();
      } catch (...) {
        line = "down\n";
      }
      [[maybe_unused]] const ssize_t n =
          ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
    }
  }
}

void AgentServer::stop() {
  stopping_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

}  // namespace rkv::server
