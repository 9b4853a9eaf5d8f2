// Blocking TCP sockets with deadlines: the plumbing under the TCP store (csrc/rendezvous/tcp_store.h).
// Every call that can wait takes a deadline, so a dead peer becomes an error instead of a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pycomm::net {

using Clock = std::chrono::steady_clock;

// A deadline passed before the peer answered (Python: TimeoutError).
struct SocketTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The connection failed or was closed by the peer (Python: ConnectionError).
struct SocketError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Clock::time_point deadline_after(double seconds);

// Owns one file descriptor; closes it on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Wakes any thread blocked on this socket (accept/recv return) without releasing the descriptor.
  void shutdown();
  // Ends the receiving side only: a blocked recv returns, but replies can still be sent.
  void shutdown_read();

 private:
  int fd_ = -1;
};

// A listening socket bound to `host`:`port` (port 0: the kernel picks one; see local_port).
Socket listen_on(const std::string& host, int port, int backlog);
int local_port(const Socket& s);
// Accepts one connection; returns an invalid Socket once `listener` has been shut down.
Socket accept_on(const Socket& listener);

// Connects to `host`:`port`, retrying refused/unreachable attempts (the server may not be up yet)
// until `deadline`; then throws SocketTimeout naming the address and the last error.
Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline);

// Send/receive exactly n bytes before `deadline` (Clock::time_point::max(): no deadline).
// `what` names the transfer in errors.
void send_all(const Socket& s, const void* data, size_t n, Clock::time_point deadline, const std::string& what);
void recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline, const std::string& what);

}  // namespace pycomm::net
