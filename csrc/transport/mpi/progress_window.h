// Each rank's progress on one MPI communicator, readable by the other ranks without their help, so
// that a stall error names the ranks that have not reached its op. An RMA window (MPI_Win_allocate
// on the op-matching communicator, inside one passive epoch, MPI_Win_lock_all, for its whole life)
// holds {collectives submitted, seq and kind of the latest, a beat}: publishing is three stores to local
// memory. Reading posts MPI_Rget to every peer and polls for at most kAnswerWaitS, so diagnostics
// never hang; on one node Open MPI's osc/sm answers from shared memory even while the target sleeps,
// elsewhere a peer whose MPI does not answer in time is named as such. The beat, counted by one thread
// per process every kBeatS, tells a peer that is stuck inside the op (it beats) from one whose process
// is stopped or hung (its beat stands still between two reads kBeatWaitS apart).
// Never freed: MPI_Win_free is collective and transports are shut down in different orders on
// different ranks (it could deadlock); MPI_Finalize reclaims it. One small window per communicator.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "diagnostics/peer_progress.h"

namespace pycomm::mpi {

class ProgressWindow : public PeerProgress {
 public:
  static constexpr double kAnswerWaitS = 2.0;
  static constexpr double kBeatS = 0.1;      // how often every window's beat is counted
  static constexpr double kBeatWaitS = 0.5;  // between the two reads that compare a peer's beats

  // Collective over `comm` (rank and size are this rank's place in it). nullptr for one rank, or
  // when this MPI cannot make the window (no one-sided component): stall errors then name no ranks.
  static std::shared_ptr<ProgressWindow> create(MPI_Comm comm, int rank, int size);

  void publish(const OpInfo& latest) override;
  std::string laggards(const OpInfo& waited) override;

 private:
  // The window's slots, in order; `submitted` is written last.
  enum Slot { kSeq, kKind, kSubmitted, kBeat, kSlots };
  struct Read {  // one peer's slots; a read left pending by an earlier probe is polled, not reposted
    MPI_Request req = MPI_REQUEST_NULL;
    std::array<int64_t, kSlots> got{};
    bool answered = false;
  };

  ProgressWindow(MPI_Win win, int64_t* mine, int rank, int size)
      : win_(win), mine_(mine), rank_(rank), size_(size), reads_(static_cast<size_t>(size)) {}
  // Reads every peer's slots into reads_ (answered or not), for at most kAnswerWaitS.
  void read_peers();
  // Counts the beat of every window of this process from one thread, started with the first window.
  static void beat(int64_t* slots);

  MPI_Win win_;
  int64_t* mine_;  // this rank's kSlots slots of the window
  int rank_, size_;
  std::mutex read_mu_;  // stall errors on several threads at once
  std::vector<Read> reads_;
};

}  // namespace pycomm::mpi
