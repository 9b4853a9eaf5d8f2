// Naming of ops for errors, NVTX and stats (declared in transport/transport.h).
#include <sstream>

#include "runtime/errors.h"

#include "transport/transport.h"

namespace pycomm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::MIN: return "MIN";
  }
  return "unknown";
}

std::string OpInfo::describe() const {
  std::ostringstream s;
  s << name << " #" << seq << " (count " << count << ", " << dtype_name(dtype) << ", " << bytes << " bytes";
  if (redop >= 0) s << ", op " << reduce_op_name(static_cast<ReduceOp>(redop));
  if (peer >= 0) s << ", " << (name == "broadcast" ? "root " : "peer ") << peer;
  if (tag >= 0) s << ", tag " << tag;
  if (bucket >= 0) s << ", bucket " << bucket;
  s << ")";
  return s.str();
}

void Transport::unsupported(const char* what) const {
  std::string why = backend() == "nccl"
                        ? " (NCCL has no any-source receive and no message header to learn a shape or probe from)"
                        : "";
  throw PycommError(std::string(what) + ": backend '" + backend() + "' does not support it" + why +
                    "; use send/recv into a tensor of known shape from a known rank, or an MPI communicator "
                    "(pycomm.init(backend='mpi')) for such messages");
}

}  // namespace pycomm
