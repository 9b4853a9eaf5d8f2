// Checks a transport's arguments and describes the op (OpInfo: sizes, bytes, bus factor) in one
// place, so every transport rejects bad input the same way. Python checks first with torch-level
// messages; these guard direct callers of pycomm._C and raise std::invalid_argument.
#pragma once

#include <climits>
#include <string>

#include "common/transport.h"

namespace pycomm {

OpInfo allreduce_info(const Buffer& buf, ReduceOp op, int size, int bucket);
OpInfo broadcast_info(const Buffer& buf, int root, int size);
OpInfo allgather_info(const Buffer& out, const Buffer& in, int size);
OpInfo reduce_scatter_info(const Buffer& out, const Buffer& in, ReduceOp op, int size);
OpInfo alltoall_info(const Buffer& out, const Buffer& in, int size);
// "send" / "recv" (src may be kAnySource); tag in [0, max_tag].
OpInfo p2p_info(const char* name, const Buffer& buf, int peer, int tag, int size, int max_tag = INT_MAX);
OpInfo barrier_info();
// A compound op's matching entry (Transport::match): "allreduce_quantized" or "allreduce_coalesced".
OpInfo match_info(const std::string& name, const Buffer& buf, ReduceOp op);
OpInfo split_info(const char* name);  // "split" / "split_shared" / "dup"

// One row per op, the one definition of what its byte count measures and of its bus factor (nccl-tests'
// PERFORMANCE.md): busbw = bytes * bus_factor(size) / seconds, with
// bus_factor(n) = ring_multiple * (n - 1) / n + constant. The *_info functions above, the gloo
// transport's stats (Python), the benchmarks and docs/api.md read it (pycomm._C.op_table()).
struct OpRow {
  const char* name;
  const char* bytes;     // the buffer OpInfo::bytes counts: "tensor", "out" or "" (moves no data)
  double ring_multiple;  // of (n - 1) / n
  double constant;
  const char* arguments;  // the transport's arguments and their roles, in order
};
const OpRow* op_rows(int* count);
// The bus factor of op `name` on `size` ranks; std::invalid_argument naming the known ops for another name.
double bus_factor(const std::string& name, int size);

}  // namespace pycomm
