// The server half of the TCP store: a key -> bytes map that rank 0 serves to every rank.
// One thread accepts connections and one thread serves each client (a job has one connection per
// rank); GET waits on the server side until the key is set or the request's timeout passes.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rendezvous/socket.h"
#include "rendezvous/store_protocol.h"

namespace pycomm::store {

class StoreServer {
 public:
  // Binds `host`:`port` now (port 0: any free port), so a bad address fails in the constructor.
  // linger_s: how long destruction waits for connected clients to hang up first.
  StoreServer(const std::string& host, int port, double linger_s);
  // Stops accepting, then waits (up to linger_s) until every client has disconnected, so that a
  // rank still finishing its last request is not cut off. Whoever is still connected then gets
  // Status::Closed on a waiting GET, or its connection closed; client threads are joined.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Client {
    std::shared_ptr<net::Socket> socket;
    std::thread thread;
  };

  void accept_loop();
  void serve(std::shared_ptr<net::Socket> socket);
  Reply handle(const Request& r);
  Reply get(const std::string& key, int64_t timeout_ms);
  Reply add(const std::string& key, const std::string& delta);

  net::Socket listener_;
  int port_ = 0;
  double linger_s_;
  std::thread acceptor_;

  std::mutex mu_;  // guards everything below
  std::condition_variable changed_;
  bool stopping_ = false;
  int connected_ = 0;  // clients whose serve() has not returned
  std::unordered_map<std::string, std::string> data_;
  std::vector<Client> clients_;
};

}  // namespace pycomm::store
