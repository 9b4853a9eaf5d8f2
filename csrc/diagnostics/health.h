// The shared state of one communicator that outlives its queue thread: whether it is broken (after
// a stall, a mismatch or a transport error, ranks are out of step and every later op must fail),
// which ops are in flight (named by stall errors), and where the other ranks are (PeerProgress).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/transport.h"
#include "diagnostics/peer_progress.h"
#include "diagnostics/trace.h"

namespace pycomm {

class CommHealth {
 public:
  // rank, size: this rank's place in the communicator (its trace events name them).
  CommHealth(std::string label, int rank, int size)
      : label_(std::move(label)), trace_comm_{trace_new_comm_id(), rank, size} {}
  const std::string& label() const { return label_; }  // "mpi communicator (rank 0 of 2)"
  const TraceComm& trace_comm() const { return trace_comm_; }

  bool broken() const;
  std::string broken_reason() const;
  // The first reason wins: it is the cause; later failures are consequences.
  void mark_broken(const std::string& reason);
  // Throws PycommError naming the reason when broken; `what` is the op being submitted.
  void check_usable(const char* what) const;

  // Started ops were dropped unfinished (their transport requests may still be live).
  void note_abandoned();
  bool has_abandoned() const;

  // `since`: when the op started (its caller read the clock already); defaults to now.
  void note_started(const OpInfo& info, std::chrono::steady_clock::time_point since);
  void note_started(const OpInfo& info) { note_started(info, std::chrono::steady_clock::now()); }
  void note_finished(uint64_t seq);
  // "oldest op in flight: allreduce #3 (...) for 5.0 s" or "no op in flight".
  std::string in_flight_summary() const;

  // Set once by the engine, before its first op; without it the peers' progress is unknown.
  void set_peer_progress(std::shared_ptr<PeerProgress> progress) { peer_progress_ = std::move(progress); }
  // A collective was submitted: published to PeerProgress (a few local stores).
  void note_submitted(const OpInfo& info) {
    if (peer_progress_ && info.collective) peer_progress_->publish(info);
  }
  // PeerProgress::laggards for `waited`, "" when unknown (no PeerProgress, or not a collective).
  std::string laggards(const OpInfo& waited) const;

 private:
  using Clock = std::chrono::steady_clock;
  const std::string label_;
  const TraceComm trace_comm_;
  mutable std::mutex mu_;
  bool broken_ = false;
  bool abandoned_ = false;
  std::string reason_;
  struct InFlight {
    OpInfo info;
    Clock::time_point since;
  };
  // In submission (seq) order, which is mostly completion order too (the oldest is found first); a
  // vector keeps its memory, where a map node per op cost an allocation and a free on every small op.
  std::vector<InFlight> in_flight_;
  std::shared_ptr<PeerProgress> peer_progress_;  // written once before the first op, then only read
};

}  // namespace pycomm
