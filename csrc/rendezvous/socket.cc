#include "rendezvous/socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace pycomm::net {
namespace {

std::string address(const std::string& host, int port) { return host + ":" + std::to_string(port); }

std::string errno_text(int err) { return std::strerror(err); }

using AddrList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddrList resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw SocketError("cannot resolve " + address(host, port) + ": " + gai_strerror(rc));
  return AddrList(res, &freeaddrinfo);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Milliseconds left until `deadline` for poll(): -1 means wait forever.
int poll_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000 * 1000));
}

// Waits until `fd` is ready for `events`; throws SocketTimeout at the deadline.
void wait_ready(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw SocketError(what + ": poll failed: " + errno_text(errno));
    if (rc == 0 && Clock::now() >= deadline) throw SocketTimeout(what + ": timed out");
  }
}

// One non-retrying connect attempt; returns errno (0 on success) and sets `out`.
int try_connect(const addrinfo* ai, Socket& out) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!s.valid()) return errno;
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) return errno;
  set_nodelay(s.fd());
  out = std::move(s);
  return 0;
}

}  // namespace

Clock::time_point deadline_after(double seconds) {
  if (!(seconds < 1e9)) return Clock::time_point::max();  // also catches inf and NaN
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::shutdown_read() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RD);
}

Socket listen_on(const std::string& host, int port, int backlog) {
  AddrList addrs = resolve(host, port, true);
  std::string last = "no address";
  for (addrinfo* ai = addrs.get(); ai; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last = errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0) return s;
    last = errno_text(errno);
  }
  throw SocketError("cannot listen on " + address(host, port) + ": " + last);
}

int local_port(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw SocketError("getsockname failed: " + errno_text(errno));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

Socket accept_on(const Socket& listener) {
  for (;;) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return Socket();  // shut down (EINVAL) or out of resources: the caller stops accepting
  }
}

Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline) {
  auto backoff = std::chrono::milliseconds(10);
  std::string last = "no attempt made";
  for (;;) {
    try {
      AddrList addrs = resolve(host, port, false);
      for (addrinfo* ai = addrs.get(); ai; ai = ai->ai_next) {
        Socket s;
        int err = try_connect(ai, s);
        if (err == 0) return s;
        last = errno_text(err);
      }
    } catch (const SocketError& e) {
      last = e.what();  // a name that does not resolve yet (DNS start-up) is retried too
    }
    auto now = Clock::now();
    if (now >= deadline)
      throw SocketTimeout("could not connect to " + address(host, port) + " before the timeout: " + last);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

void send_all(const Socket& s, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    wait_ready(s.fd(), POLLOUT, deadline, what);
    ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw SocketError(what + ": send failed: " + errno_text(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    wait_ready(s.fd(), POLLIN, deadline, what);
    ssize_t k = ::recv(s.fd(), p, n, 0);
    if (k == 0) throw SocketError(what + ": connection closed by peer");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw SocketError(what + ": recv failed: " + errno_text(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace pycomm::net
