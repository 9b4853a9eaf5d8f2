#include "transport/mpi/p2p_matching.h"

namespace pycomm::mpi {
namespace {

bool matches(int want_src, int want_tag, int src, int tag) {
  return (want_src < 0 || want_src == src) && (want_tag < 0 || want_tag == tag);
}

}  // namespace

void RecvOrder::enqueue(int src, int tag, uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  waiting_[tag].emplace_back(seq, src);
}

bool RecvOrder::is_next(int src, int tag, uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = waiting_.find(tag);
  if (it == waiting_.end()) return false;
  for (const auto& [s, from] : it->second) {
    if (s == seq) return true;
    if (from < 0 || src < 0 || from == src) return false;  // an earlier receive could take it
  }
  return false;
}

void RecvOrder::remove(int tag, uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = waiting_.find(tag);
  if (it == waiting_.end()) return;
  auto& q = it->second;
  for (auto e = q.begin(); e != q.end(); ++e) {
    if (e->first == seq) {
      q.erase(e);
      break;
    }
  }
  if (q.empty()) waiting_.erase(it);
}

std::optional<StashedHeader> HeaderStash::take(int src, int tag) {
  for (auto it = headers_.begin(); it != headers_.end(); ++it) {
    if (matches(src, tag, it->source, it->tag)) {
      StashedHeader h = *it;
      headers_.erase(it);
      return h;
    }
  }
  return std::nullopt;
}

std::optional<StashedHeader> HeaderStash::peek(int src, int tag) const {
  for (const auto& h : headers_)
    if (matches(src, tag, h.source, h.tag)) return h;
  return std::nullopt;
}

}  // namespace pycomm::mpi
