// Checks a transport's arguments and describes the op (OpInfo: sizes, bytes, and the bus factor of the op
// table, common/op_table.h) in one place, so every transport rejects bad input the same way. Python
// checks first with torch-level messages; these guard direct callers of pycomm._C and raise
// std::invalid_argument.
#pragma once

#include <climits>
#include <string>

#include "common/op_table.h"
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

}  // namespace pycomm
