#include "transport/mpi/progress_window.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "diagnostics/op_check.h"

namespace pycomm::mpi {
namespace {

// The windows whose beat the beating thread counts. MPI_Finalize frees the windows' memory, whoever calls
// it (pycomm or mpi4py): it first deletes MPI_COMM_SELF's attributes, and the one set here empties the list
// and ends the thread, so no beat lands in freed memory.
std::mutex beat_mu;
std::vector<int64_t*>* beating = nullptr;

int stop_beating(MPI_Comm, int, void*, void*) {
  std::lock_guard<std::mutex> lk(beat_mu);
  if (beating != nullptr) beating->clear();
  return MPI_SUCCESS;
}

std::string join(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

std::shared_ptr<ProgressWindow> ProgressWindow::create(MPI_Comm comm, int rank, int size) {
  if (size < 2) return nullptr;
  int64_t* mine = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  // Errors return (comm's handler is MPI_ERRORS_RETURN): without a one-sided component, no window.
  if (MPI_Win_allocate(kSlots * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, comm, &mine, &win) != MPI_SUCCESS)
    return nullptr;
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  for (int i = 0; i < kSlots; ++i) mine[i] = 0;
  if (MPI_Win_lock_all(MPI_MODE_NOCHECK, win) != MPI_SUCCESS) return nullptr;  // leaked, as every window is
  beat(mine);
  return std::shared_ptr<ProgressWindow>(new ProgressWindow(win, mine, rank, size));
}

void ProgressWindow::beat(int64_t* slots) {
  std::lock_guard<std::mutex> lk(beat_mu);
  if (beating == nullptr) {
    int key = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_beating, &key, nullptr) != MPI_SUCCESS ||
        MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) != MPI_SUCCESS)
      return;  // no beat: a stopped rank is then reported as stuck inside the op, as before
    beating = new std::vector<int64_t*>();
    std::thread([] {  // detached: it ends when MPI_Finalize empties the list (stop_beating)
      for (;;) {
        {
          std::lock_guard<std::mutex> inner(beat_mu);
          if (beating->empty()) return;
          for (int64_t* w : *beating) __atomic_add_fetch(&w[kBeat], 1, __ATOMIC_RELAXED);
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(kBeatS));
      }
    })
        .detach();
  }
  beating->push_back(slots);
}

void ProgressWindow::publish(const OpInfo& latest) {
  // Plain stores to this rank's window memory (readers use MPI_Rget; Open MPI's windows are
  // MPI_WIN_UNIFIED, so the stores become visible to them); `submitted` last, released.
  __atomic_store_n(&mine_[kSeq], static_cast<int64_t>(latest.seq), __ATOMIC_RELAXED);
  __atomic_store_n(&mine_[kKind], op_kind_code(latest.name), __ATOMIC_RELAXED);
  __atomic_store_n(&mine_[kSubmitted], latest.collective_index + 1, __ATOMIC_RELEASE);
}

void ProgressWindow::read_peers() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kAnswerWaitS));
  for (int r = 0; r < size_; ++r) {
    Read& rd = reads_[static_cast<size_t>(r)];
    rd.answered = false;
    if (r == rank_ || rd.req != MPI_REQUEST_NULL) continue;  // a pending read keeps its buffer
    if (MPI_Rget(rd.got.data(), kSlots, MPI_INT64_T, r, 0, kSlots, MPI_INT64_T, win_, &rd.req) != MPI_SUCCESS)
      rd.req = MPI_REQUEST_NULL;
  }
  for (;;) {
    bool pending = false;
    for (int r = 0; r < size_; ++r) {
      Read& rd = reads_[static_cast<size_t>(r)];
      if (rd.req == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&rd.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;  // left pending: unanswered
      if (done)
        rd.answered = true;
      else
        pending = true;
    }
    if (!pending || Clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string ProgressWindow::laggards(const OpInfo& waited) {
  std::lock_guard<std::mutex> lk(read_mu_);
  read_peers();
  // A second read kBeatWaitS later: a peer whose beat stood still is stopped or hung, not merely slow.
  std::vector<int64_t> first_beat(static_cast<size_t>(size_), -1);
  for (int r = 0; r < size_; ++r) {
    const Read& rd = reads_[static_cast<size_t>(r)];
    if (rd.answered) first_beat[static_cast<size_t>(r)] = rd.got[kBeat];
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(kBeatWaitS));
  read_peers();
  const std::string op = waited.name + " #" + std::to_string(waited.seq);
  std::vector<int> waiting;
  std::string details;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Read& rd = reads_[static_cast<size_t>(r)];
    const std::string latest = rd.got[kSubmitted] == 0
                                   ? std::string("it has submitted no collective on this communicator")
                                   : "its latest collective is " + std::string(op_kind_name(rd.got[kKind])) + " #" +
                                         std::to_string(rd.got[kSeq]);
    std::string detail;
    if (!rd.answered) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", kAnswerWaitS);
      detail = "rank " + std::to_string(r) + " did not answer within " + secs + " s";
    } else if (rd.got[kBeat] == first_beat[static_cast<size_t>(r)]) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", kBeatWaitS);
      detail = "rank " + std::to_string(r) + " stood still for " + secs + " s (" + latest +
               "; its process is stopped or hung" +
               (rd.got[kSubmitted] > waited.collective_index ? ", inside " + op : std::string()) + ")";
    } else if (rd.got[kSubmitted] <= waited.collective_index) {
      detail = "rank " + std::to_string(r) + " has not reached " + op + " (" + latest + ")";
    } else {
      continue;
    }
    waiting.push_back(r);
    details += (details.empty() ? "" : "; ") + detail;
  }
  if (waiting.empty()) return "every other rank has reached " + op + " (one may be stuck inside it)";
  return std::string(waiting.size() == 1 ? "waiting for rank " : "waiting for ranks ") + join(waiting) + ": " + details;
}

}  // namespace pycomm::mpi
