#include "transport/mpi/p2p_schedule.h"

#include <algorithm>
#include <utility>

#include "queue/spin.h"
#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {

namespace {

// Steps cut into messages of at most `seg` elements, empty ones dropped. Both ends of a message cut the
// same range the same way, so every (sender, receiver) pair sees the same sequence of messages.
std::vector<P2pStep> segmented(const std::vector<P2pStep>& steps, int64_t seg) {
  std::vector<P2pStep> out;
  for (const P2pStep& s : steps) {
    const int64_t longest = std::max(s.send_to >= 0 ? s.send_count : 0, s.recv_from >= 0 ? s.recv_count : 0);
    for (int64_t off = 0; off < longest; off += seg) {
      P2pStep part = s;
      part.group = static_cast<int>(&s - steps.data());
      part.send_begin += off;
      part.send_count = std::max<int64_t>(0, std::min(seg, s.send_count - off));
      part.recv_begin += off;
      part.recv_count = std::max<int64_t>(0, std::min(seg, s.recv_count - off));
      part.combine_begin += off;
      if (part.send_count == 0) part.send_to = -1;
      if (part.recv_count == 0) part.recv_from = -1;
      out.push_back(part);
    }
  }
  return out;
}

}  // namespace

P2pSchedule::P2pSchedule(const std::vector<P2pStep>& steps, void* buf, MPI_Datatype type, int64_t elem_size, MPI_Op op,
                         MPI_Comm comm, int tag, ScratchPool& pool)
    : P2pSchedule(steps, std::vector<void*>{buf}, type, elem_size, op, comm, tag, pool, kSegmentBytes) {}

P2pSchedule::P2pSchedule(const std::vector<P2pStep>& steps, std::vector<void*> bufs, MPI_Datatype type,
                         int64_t elem_size, MPI_Op op, MPI_Comm comm, int tag, ScratchPool& pool, int64_t segment_bytes)
    : steps_(segmented(steps, std::max<int64_t>(1, segment_bytes / elem_size))),
      bufs_(std::move(bufs)),
      type_(type),
      elem_size_(elem_size),
      op_(op),
      comm_(comm),
      tag_(tag),
      pool_(pool) {
  int64_t longest = 0;
  for (const P2pStep& s : steps_)
    if (s.reduce) longest = std::max(longest, s.recv_count);
  slot_bytes_ = static_cast<size_t>(longest * elem_size_);
  size_t widest = 1;  // the most messages of one step (no more are ever in flight)
  for (size_t i = 0, run = 0; i < steps_.size(); ++i) {
    run = i > 0 && steps_[i].group == steps_[i - 1].group ? run + 1 : 1;
    widest = std::max(widest, run);
  }
  // A copy-only schedule (longest == 0) takes the wide window without reading the machine's load.
  const bool wide = longest == 0 || node_oversubscribed() || machine_crowded();
  window_ = std::min(widest, wide ? kOversubscribedWindow : kWindow);
  reqs_.assign(2 * window_, MPI_REQUEST_NULL);
  if (longest > 0) scratch_ = pool_.take(window_ * slot_bytes_);
}

P2pSchedule::~P2pSchedule() {
  for (MPI_Request r : reqs_)
    if (r != MPI_REQUEST_NULL) {
      (void)scratch_.release();  // abandoned with requests pending: MPI may still write the scratch
      return;
    }
  if (scratch_) pool_.give_back(std::move(scratch_));
}

void P2pSchedule::post(size_t i, const char* what) {
  const P2pStep& s = steps_[i];
  const size_t slot = i % window_;
  if (s.recv_from >= 0) {
    void* dst = s.reduce ? static_cast<void*>(scratch_->data() + slot * slot_bytes_) : at(s.recv_buf, s.recv_begin);
    check(MPI_Irecv(dst, static_cast<int>(s.recv_count), type_, s.recv_from, tag_, comm_, &reqs_[2 * slot]), what);
  }
  if (s.send_to >= 0)
    check(MPI_Isend(at(s.send_buf, s.send_begin), static_cast<int>(s.send_count), type_, s.send_to, tag_, comm_,
                    &reqs_[2 * slot + 1]),
          what);
}

void P2pSchedule::post_ready(const char* what) {
  // Up to window_ messages of one step in flight: a rank that is descheduled (more ranks than
  // cores) then holds up the others once per window, not once per message.
  while (next_ < steps_.size() && next_ - done_ < window_ &&
         (next_ == done_ || steps_[next_].group == steps_[done_].group))
    post(next_++, what);
}

bool P2pSchedule::poll(const char* what) {
  while (true) {
    post_ready(what);
    if (done_ == steps_.size()) return true;
    const size_t slot = done_ % window_;
    int done = 0;
    check(MPI_Testall(2, &reqs_[2 * slot], &done, MPI_STATUSES_IGNORE), what);
    if (!done) return false;
    const P2pStep& s = steps_[done_++];
    if (s.reduce && s.recv_count > 0)
      check(MPI_Reduce_local(scratch_->data() + slot * slot_bytes_, at(s.recv_buf, s.recv_begin),
                             static_cast<int>(s.recv_count), type_, op_),
            "allreduce (MPI_Reduce_local)");
    else if (s.combine_buf >= 0 && s.recv_count > 0)
      check(MPI_Reduce_local(at(s.combine_buf, s.combine_begin), at(s.recv_buf, s.recv_begin),
                             static_cast<int>(s.recv_count), type_, op_),
            "reduce (MPI_Reduce_local)");
  }
}

}  // namespace pycomm::mpi
