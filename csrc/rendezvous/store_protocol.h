// The TCP store's wire format, shared by the server (store_server.cc) and the client (tcp_store.cc).
//   request: magic u32 | command u8 | key length u32 | key | value length u64 | value
//   reply:   status u8 | payload length u64 | payload
// GET carries its wait timeout (int64 milliseconds, < 0: forever) as the value, so the server can
// answer "not yet" and the connection stays in step; ADD carries an int64 delta and returns the sum.
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous/socket.h"

namespace pycomm::store {

constexpr uint32_t kMagic = 0x31534350;  // "PCS1": anything else on the port is not a pycomm client
constexpr uint32_t kMaxKeyBytes = 1 << 16;
constexpr uint64_t kMaxValueBytes = uint64_t(1) << 32;

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4 };
// Closed: the server is shutting down (rank 0 left) while the request waited. Error: a well-formed
// request the server cannot serve (ADD on a key that holds bytes, a counter overflow); the payload
// says why, and the connection stays in step and usable.
enum class Status : uint8_t { Ok = 0, Timeout = 1, Closed = 2, Error = 3 };

struct Request {
  Command command = Command::Set;
  std::string key;
  std::string value;
};

struct Reply {
  Status status = Status::Ok;
  std::string payload;
};

void write_request(const net::Socket& s, const Request& r, net::Clock::time_point deadline, const std::string& what);
// Reads one request; returns false when the client closed the connection between requests.
// Throws net::SocketError on a malformed request (bad magic, oversized key or value).
bool read_request(const net::Socket& s, Request& r);
void write_reply(const net::Socket& s, const Reply& r, net::Clock::time_point deadline);
Reply read_reply(const net::Socket& s, net::Clock::time_point deadline, const std::string& what);

std::string encode_i64(int64_t v);
int64_t decode_i64(const std::string& bytes, const std::string& what);

}  // namespace pycomm::store
