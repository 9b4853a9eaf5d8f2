#include "rendezvous/store_server.h"

#include <chrono>
#include <cstdio>

namespace pycomm::store {
namespace {
constexpr double kReplyTimeoutS = 60.0;
}  // namespace

StoreServer::StoreServer(const std::string& host, int port, double linger_s)
    : listener_(net::listen_on(host, port, /*backlog=*/1024)), port_(net::local_port(listener_)), linger_s_(linger_s) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  listener_.shutdown();
  acceptor_.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_until(lock, net::deadline_after(linger_s_), [this] { return connected_ == 0; });
    stopping_ = true;
    for (Client& c : clients_) c.socket->shutdown_read();
  }
  changed_.notify_all();
  // The acceptor has stopped, so clients_ no longer grows; join without the lock (serve() takes it).
  for (Client& c : clients_) c.thread.join();
}

void StoreServer::accept_loop() {
  for (;;) {
    net::Socket conn = net::accept_on(listener_);
    if (!conn.valid()) return;
    std::lock_guard<std::mutex> lock(mu_);
    ++connected_;
    auto socket = std::make_shared<net::Socket>(std::move(conn));
    clients_.push_back({socket, std::thread([this, socket] { serve(socket); })});
  }
}

void StoreServer::serve(std::shared_ptr<net::Socket> socket) {
  try {
    Request r;
    // A client that stops reading must not pin this thread (and the server's shutdown) forever.
    while (read_request(*socket, r)) write_reply(*socket, handle(r), net::deadline_after(kReplyTimeoutS));
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    // A client that speaks garbage or vanishes mid-request is dropped; the others carry on.
    if (!stopping_) std::fprintf(stderr, "pycomm TCPStore server: dropping a client: %s\n", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);  // the destructor shuts sockets down under this lock
    socket->close();
    --connected_;
  }
  changed_.notify_all();
}

Reply StoreServer::handle(const Request& r) {
  switch (r.command) {
    case Command::Set: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        data_[r.key] = r.value;
      }
      changed_.notify_all();
      return {};
    }
    case Command::Get:
      return get(r.key, decode_i64(r.value, "store GET timeout"));
    case Command::Add:
      return add(r.key, r.value);
    case Command::Check: {
      std::lock_guard<std::mutex> lock(mu_);
      return {Status::Ok, std::string(1, data_.count(r.key) ? '\1' : '\0')};
    }
  }
  throw net::SocketError("store request: unhandled command");
}

Reply StoreServer::add(const std::string& key, const std::string& delta_bytes) {
  // A bad ADD is the caller's mistake, not a broken stream: answer Status::Error and keep serving.
  if (delta_bytes.size() != sizeof(int64_t))
    return {Status::Error, "add('" + key + "'): the delta is " + std::to_string(delta_bytes.size()) +
                               " bytes, expected an 8-byte integer"};
  int64_t delta = decode_i64(delta_bytes, "store ADD delta");
  int64_t sum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t current = 0;
    if (it != data_.end() && !it->second.empty()) {
      if (it->second.size() != sizeof(int64_t))
        return {Status::Error, "add('" + key + "'): the key holds a value of " + std::to_string(it->second.size()) +
                                   " bytes set by set(), not a counter (use another key for add())"};
      current = decode_i64(it->second, "store ADD");
    }
    if (__builtin_add_overflow(current, delta, &sum))
      return {Status::Error, "add('" + key + "'): " + std::to_string(current) + " + " + std::to_string(delta) +
                                 " overflows a 64-bit counter"};
    data_[key] = encode_i64(sum);
  }
  changed_.notify_all();
  return {Status::Ok, encode_i64(sum)};
}

Reply StoreServer::get(const std::string& key, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return stopping_ || data_.count(key) > 0; };
  if (timeout_ms < 0) {
    changed_.wait(lock, ready);
  } else if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    return {Status::Timeout, {}};
  }
  auto it = data_.find(key);
  if (it == data_.end()) return {Status::Closed, {}};  // woken by shutdown, not by a SET
  return {Status::Ok, it->second};
}

}  // namespace pycomm::store
