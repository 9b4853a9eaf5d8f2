// Naming of ops for errors, NVTX and stats (declared in common/transport.h).
#include <string>

#include "common/errors.h"
#include "common/transport.h"

namespace pycomm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::MIN:
      return "MIN";
  }
  return "unknown";
}

// No iostream: formatting a number through a stream goes through its locale's facets, global state of
// libstdc++ that a module carrying its own copy of libstdc++ shares badly with the process's (the GPU
// machine's build crashed here, in Work.info and on a receive's progress thread); std::to_string has none.
std::string OpInfo::describe() const {
  std::string s = name + " #" + std::to_string(seq) + " (count " + std::to_string(count) + ", " + dtype_name(dtype) +
                  ", " + std::to_string(bytes) + " bytes";
  if (redop >= 0) s += std::string(", op ") + reduce_op_name(static_cast<ReduceOp>(redop));
  if (peer >= 0) s += (name == "broadcast" ? ", root " : ", peer ") + std::to_string(peer);
  if (tag >= 0) s += ", tag " + std::to_string(tag);
  if (bucket >= 0) s += ", bucket " + std::to_string(bucket);
  s += ")";
  return s;
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
