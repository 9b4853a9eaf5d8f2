#include "rendezvous/tcp_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "rendezvous/store_server.h"

namespace pycomm {
namespace {

// Extra time a client allows the server beyond a GET's own timeout before calling it dead.
constexpr double kReplyGraceS = 5.0;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", s);
  return buf;
}

int64_t millis_until(net::Clock::time_point deadline) {
  if (deadline == net::Clock::time_point::max()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
  return std::max<int64_t>(ms, 0);
}

}  // namespace

TCPStore::TCPStore(const std::string& host, int port, int world_size, bool is_server, double timeout_s)
    : host_(host), port_(port), world_size_(world_size), timeout_s_(timeout_s) {
  if (host.empty()) throw std::invalid_argument("TCPStore: host is empty (set MASTER_ADDR)");
  if (port < 0 || port > 65535 || (port == 0 && !is_server))
    throw std::invalid_argument("TCPStore: port must be in 1..65535 (0 only on the server), got " +
                                std::to_string(port));
  if (world_size < 1)
    throw std::invalid_argument("TCPStore: world_size must be >= 1, got " + std::to_string(world_size));
  if (!(timeout_s > 0)) throw std::invalid_argument("TCPStore: timeout must be > 0 seconds");
  if (is_server) {
    try {
      server_ = std::make_unique<store::StoreServer>(host, port, timeout_s);
    } catch (const net::SocketError& e) {
      throw net::SocketError(
          "TCPStore: rank 0 cannot serve the store (is MASTER_PORT free and MASTER_ADDR an "
          "address of this host?): " +
          std::string(e.what()));
    }
    port_ = server_->port();
  }
  try {
    conn_ = net::connect_with_retry(host_, port_, net::deadline_after(timeout_s_));
  } catch (const net::SocketTimeout& e) {
    throw net::SocketTimeout(
        "TCPStore: no store server at " + address() + " after " + seconds_text(timeout_s_) +
        " (is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?): " + e.what());
  }
}

TCPStore::~TCPStore() { close(); }

void TCPStore::close() {
  std::unique_ptr<store::StoreServer> server;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    conn_.close();
    server = std::move(server_);
  }
  server.reset();  // outside the lock: this may wait for the other ranks to hang up
}

std::string TCPStore::describe(const std::string& what) const { return "TCPStore " + address() + ": " + what; }

std::string TCPStore::round_trip(store::Command command, const std::string& key, const std::string& value,
                                 net::Clock::time_point deadline, const std::string& what, bool* timed_out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw net::SocketError(describe(what + ": the store was closed"));
  if (!conn_.valid()) throw net::SocketError(describe(what + ": the connection to the server was lost earlier"));
  store::Request req{command, key, value};
  store::Reply reply;
  try {
    store::write_request(conn_, req, deadline, describe(what));
    reply = store::read_reply(conn_, deadline, describe(what));
    if (reply.status == store::Status::Closed)
      throw net::SocketError(describe(what + ": the server (rank 0) shut down while this request waited"));
  } catch (...) {
    conn_.close();  // a half-finished exchange leaves the stream out of step: never reuse it
    throw;
  }
  // A refused request completed its exchange: the connection stays usable.
  if (reply.status == store::Status::Error) throw std::invalid_argument(describe(reply.payload));
  if (timed_out) *timed_out = reply.status == store::Status::Timeout;
  return reply.payload;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  round_trip(store::Command::Set, key, value, net::deadline_after(timeout_s_), "set('" + key + "')", nullptr);
}

std::string TCPStore::get_before(const std::string& key, net::Clock::time_point deadline, const std::string& what) {
  // The server waits until the deadline; we wait a little longer for its "timed out" answer.
  auto reply_deadline =
      deadline == net::Clock::time_point::max()
          ? deadline
          : deadline + std::chrono::duration_cast<net::Clock::duration>(std::chrono::duration<double>(kReplyGraceS));
  bool timed_out = false;
  std::string value =
      round_trip(store::Command::Get, key, store::encode_i64(millis_until(deadline)), reply_deadline, what, &timed_out);
  if (timed_out) throw net::SocketTimeout(describe(what + ": timed out waiting for key '" + key + "'"));
  return value;
}

std::string TCPStore::get(const std::string& key, double timeout_s) {
  double t = resolve_timeout(timeout_s);
  return get_before(key, net::deadline_after(t), "get('" + key + "') within " + seconds_text(t));
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  std::string sum = round_trip(store::Command::Add, key, store::encode_i64(delta), net::deadline_after(timeout_s_),
                               "add('" + key + "')", nullptr);
  return store::decode_i64(sum, describe("add('" + key + "')"));
}

bool TCPStore::check(const std::string& key) {
  std::string r =
      round_trip(store::Command::Check, key, {}, net::deadline_after(timeout_s_), "check('" + key + "')", nullptr);
  return !r.empty() && r[0] != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  double t = resolve_timeout(timeout_s);
  auto deadline = net::deadline_after(t);
  for (const std::string& key : keys) get_before(key, deadline, "wait() within " + seconds_text(t));
}

void TCPStore::barrier(double timeout_s) {
  double t = resolve_timeout(timeout_s);
  auto deadline = net::deadline_after(t);
  const std::string base = "pycomm/barrier/" + std::to_string(barriers_++);
  const std::string what = "barrier #" + base.substr(base.rfind('/') + 1) + " of " + std::to_string(world_size_) +
                           " ranks within " + seconds_text(t);
  if (add(base + "/arrived", 1) == world_size_) set(base + "/done", "");
  try {
    get_before(base + "/done", deadline, what);
  } catch (const net::SocketTimeout&) {
    int64_t arrived = add(base + "/arrived", 0);
    throw net::SocketTimeout(describe(what + ": timed out with " + std::to_string(arrived) + " of " +
                                      std::to_string(world_size_) + " ranks arrived"));
  }
}

}  // namespace pycomm
