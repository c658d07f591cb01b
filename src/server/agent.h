// rkv's load-balancer agent (`rkv serve --agent-port N`): HAProxy's agent-check protocol. HAProxy
// connects, rkv writes one line and closes: Server::agent_reply(), the share of the KV cap that
// is free as the server's weight ("ready up 37%"), "drain" while draining, "down" while loading
// (docs/DEPLOY.md).
#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace rkv::server {

class AgentServer {
 public:
  explicit AgentServer(std::function<std::string()> reply);
  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  // Listens on host:port (0: any free port); returns the port. Throws rkv::Error.
  int bind(const std::string& host, int port);
  // Answers until stop() (from any thread).
  void serve();
  void stop();

 private:
  std::function<std::string()> reply_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
};

}  // namespace rkv::server
