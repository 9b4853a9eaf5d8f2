// One op as a host queue executes it: prepared and started in submission order, then polled until
// complete. Several started ops may be in flight at once (nonblocking MPI requests), so an isend
// followed by an irecv cannot deadlock the queue.
#pragma once

#include <chrono>
#include <memory>

#include "common/transport.h"
#include "diagnostics/nvtx.h"
#include "queue/host_work.h"

namespace pycomm {

class QueuedOp {
 public:
  explicit QueuedOp(OpInfo info) : info(std::move(info)) {}
  virtual ~QueuedOp() = default;

  // Polled before start, only while this op is the next to start; true once it may start
  // (PYCOMM_DEBUG's op matching runs here). Throwing fails the op.
  virtual bool prepare() { return true; }
  // True: every earlier op must complete before this one starts (blocking calls such as split).
  virtual bool needs_drain() const { return false; }
  // True: the op may run on the thread that submitted it (queue/inline_run) when its caller
  // waits for it at once: then start() must post only nonblocking calls, so that the caller's
  // polling can enforce the stall deadline. Ops on MPI collectives also ask fits_inline().
  virtual bool can_run_inline() const { return false; }
  virtual void start() = 0;
  // Polls progress; true once the results are in place.
  virtual bool test() = 0;

  OpInfo info;
  std::shared_ptr<HostWork> work;        // set by OpQueue::submit
  std::shared_ptr<P2pMessage> received;  // receives: filled in by the op before it completes
  std::chrono::steady_clock::time_point started;
  bool on_caller_thread = false;  // set before start() when it runs on its caller's thread (stats)
  // Tracing and NVTX (queue/op_lifecycle.h): `observed` is set at submission while something observes
  // ops, and every later hook of the op tests it alone.
  bool observed = false;
  bool check_posted = false;  // observed: prepare() was polled once (this rank's op check went out)
  TraceComm trace_comm;
  NvtxOpRanges nvtx;
};

}  // namespace pycomm
