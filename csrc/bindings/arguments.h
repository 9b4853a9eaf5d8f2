// Python's raw arguments as the core's types, for every entry point (comm.cc's pybind11 methods and
// blocking_calls.cc's fast calls): one reading of a buffer and of a reduce op.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "common/transport.h"

namespace pycomm::bind {

inline Buffer buffer(uintptr_t ptr, int64_t count, int dtype, int device, const char* what) {
  Buffer b;
  b.ptr = reinterpret_cast<void*>(ptr);
  b.count = count;  // a negative count is refused by the op's own checks (diagnostics/op_validation)
  b.dtype = dtype_from_int(dtype, what);
  b.device = device;
  return b;
}

inline ReduceOp reduce_op(int64_t op) {
  if (op < 0 || op > static_cast<int64_t>(ReduceOp::MIN))
    throw std::invalid_argument("op: unknown reduce op " + std::to_string(op) + "; expected SUM, AVG, MAX or MIN");
  return static_cast<ReduceOp>(op);
}

}  // namespace pycomm::bind
