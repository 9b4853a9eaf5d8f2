// A small key-value store over TCP for bootstrapping ranks without MPI (srun --mpi=none,
// torchrun, `--nproc N` launches): rank 0 serves it at MASTER_ADDR:MASTER_PORT and every rank
// (rank 0 included) is a client. Used to hand out the NCCL unique id; usable for any small
// rendezvous (byte strings, counters, barriers). Every wait is bounded by the store's timeout and
// fails with net::SocketTimeout naming the address and what was awaited.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/socket.h"
#include "rendezvous/store_protocol.h"

namespace pycomm {
namespace store {
class StoreServer;
}  // namespace store

class TCPStore {
 public:
  // is_server: serve the store here (rank 0); the server binds `host` (the address the others
  // connect to), port 0 picks a free port (see port()). Clients retry connecting until timeout_s.
  TCPStore(const std::string& host, int port, int world_size, bool is_server, double timeout_s);
  ~TCPStore();
  // Disconnects; on the server, first waits (up to the timeout) for the other ranks to disconnect,
  // so none is cut off mid-request, then stops serving. Later requests throw net::SocketError.
  void close();
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until `key` is set (up to the store's timeout, or `timeout_s` when given >= 0).
  std::string get(const std::string& key, double timeout_s = -1);
  // Atomically adds `delta` to the integer at `key` (0 when unset); returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::string& key);
  // Waits until every key is set, within one timeout for all of them.
  void wait(const std::vector<std::string>& keys, double timeout_s = -1);
  // Returns once all world_size ranks have called barrier() the same number of times.
  void barrier(double timeout_s = -1);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  int world_size() const { return world_size_; }
  double timeout() const { return timeout_s_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  std::string round_trip(store::Command command, const std::string& key, const std::string& value,
                         net::Clock::time_point deadline, const std::string& what, bool* timed_out);
  std::string get_before(const std::string& key, net::Clock::time_point deadline, const std::string& what);
  std::string describe(const std::string& what) const;
  double resolve_timeout(double timeout_s) const { return timeout_s >= 0 ? timeout_s : timeout_s_; }

  std::string host_;
  int port_;
  int world_size_;
  double timeout_s_;
  std::unique_ptr<store::StoreServer> server_;  // rank 0 only
  std::mutex mu_;                               // one request at a time on conn_
  net::Socket conn_;
  bool closed_ = false;
  uint64_t barriers_ = 0;
};

}  // namespace pycomm
