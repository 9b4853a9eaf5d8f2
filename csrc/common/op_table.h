// The op table: what each op's byte count measures and its bus factor, defined once for the transports'
// OpInfo (diagnostics/op_validation), the stats, the benchmarks and the docs (pycomm._C.op_table()).
#pragma once

#include <string>

namespace pycomm {

// One row per op, the one definition of what its byte count measures and of its bus factor (nccl-tests'
// PERFORMANCE.md): busbw = bytes * bus_factor(size) / seconds, with
// bus_factor(n) = ring_multiple * (n - 1) / n + constant. The *_info functions (diagnostics/op_validation), the gloo
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
