#include "rendezvous/store_protocol.h"

#include <cstring>

namespace pycomm::store {
namespace {

constexpr auto kForever = net::Clock::time_point::max();

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(const net::Socket& s, net::Clock::time_point deadline, const std::string& what) {
  T v;
  net::recv_all(s, &v, sizeof(T), deadline, what);
  return v;
}

std::string get_bytes(const net::Socket& s, uint64_t n, net::Clock::time_point deadline, const std::string& what) {
  std::string out(n, '\0');
  if (n) net::recv_all(s, out.data(), n, deadline, what);
  return out;
}

}  // namespace

void write_request(const net::Socket& s, const Request& r, net::Clock::time_point deadline, const std::string& what) {
  std::string msg;
  msg.reserve(17 + r.key.size() + r.value.size());
  put<uint32_t>(msg, kMagic);
  put<uint8_t>(msg, static_cast<uint8_t>(r.command));
  put<uint32_t>(msg, static_cast<uint32_t>(r.key.size()));
  msg += r.key;
  put<uint64_t>(msg, r.value.size());
  msg += r.value;
  net::send_all(s, msg.data(), msg.size(), deadline, what);
}

bool read_request(const net::Socket& s, Request& r) {
  uint32_t magic;
  try {
    net::recv_all(s, &magic, sizeof(magic), kForever, "store request");
  } catch (const net::SocketError&) {
    return false;  // closed between requests: a normal disconnect
  }
  if (magic != kMagic) throw net::SocketError("store request: bad magic (not a pycomm store client)");
  const std::string what = "store request";
  uint8_t cmd = get<uint8_t>(s, kForever, what);
  if (cmd < static_cast<uint8_t>(Command::Set) || cmd > static_cast<uint8_t>(Command::Check))
    throw net::SocketError("store request: unknown command " + std::to_string(cmd));
  r.command = static_cast<Command>(cmd);
  uint32_t key_len = get<uint32_t>(s, kForever, what);
  if (key_len > kMaxKeyBytes) throw net::SocketError("store request: key of " + std::to_string(key_len) + " bytes");
  r.key = get_bytes(s, key_len, kForever, what);
  uint64_t value_len = get<uint64_t>(s, kForever, what);
  if (value_len > kMaxValueBytes)
    throw net::SocketError("store request: value of " + std::to_string(value_len) + " bytes");
  r.value = get_bytes(s, value_len, kForever, what);
  return true;
}

void write_reply(const net::Socket& s, const Reply& r, net::Clock::time_point deadline) {
  std::string msg;
  put<uint8_t>(msg, static_cast<uint8_t>(r.status));
  put<uint64_t>(msg, r.payload.size());
  msg += r.payload;
  net::send_all(s, msg.data(), msg.size(), deadline, "store reply");
}

Reply read_reply(const net::Socket& s, net::Clock::time_point deadline, const std::string& what) {
  Reply r;
  r.status = static_cast<Status>(get<uint8_t>(s, deadline, what));
  uint64_t n = get<uint64_t>(s, deadline, what);
  if (n > kMaxValueBytes) throw net::SocketError(what + ": reply of " + std::to_string(n) + " bytes");
  r.payload = get_bytes(s, n, deadline, what);
  return r;
}

std::string encode_i64(int64_t v) {
  std::string out;
  put<int64_t>(out, v);
  return out;
}

int64_t decode_i64(const std::string& bytes, const std::string& what) {
  if (bytes.size() != sizeof(int64_t))
    throw net::SocketError(what + ": expected an 8-byte integer, got " + std::to_string(bytes.size()) + " bytes");
  int64_t v;
  std::memcpy(&v, bytes.data(), sizeof(v));
  return v;
}

}  // namespace pycomm::store
