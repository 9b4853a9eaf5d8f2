#include "common/op_table.h"

#include <stdexcept>
#include <string>

namespace pycomm {
namespace {

constexpr OpRow kOps[] = {
    {"allreduce", "tensor", 2.0, 0.0, "tensor: input and output; op: SUM, AVG, MAX or MIN"},
    {"broadcast", "tensor", 0.0, 1.0, "tensor: root's input, every other rank's output; root"},
    {"allgather", "out", 1.0, 0.0, "out: size * tensor.numel() elements; tensor: this rank's input"},
    {"reduce_scatter", "tensor", 1.0, 0.0, "out: this rank's chunk; tensor: size * out.numel() elements; op"},
    {"alltoall", "tensor", 1.0, 0.0, "out: chunk i from rank i; tensor: chunk j to rank j (same numel)"},
    {"send", "tensor", 0.0, 1.0, "tensor: input; dst; tag"},
    {"recv", "tensor", 0.0, 1.0, "tensor: output; src (or ANY_SOURCE); tag"},
    // The shape-carrying point-to-point ops as the gloo transport (Python) names them; the core's count as
    // send / recv.
    {"send_tensor", "tensor", 0.0, 1.0, "tensor of any shape: input; dst; tag"},
    {"recv_tensor", "tensor", 0.0, 1.0, "src (or ANY_SOURCE); tag; returns a new tensor"},
    {"barrier", "", 0.0, 0.0, ""},
    // A compound op's matching entry (Transport::match) moves no data itself.
    {"allreduce_quantized", "", 0.0, 0.0, "count, dtype and op of the compound op, matched across ranks"},
    {"allreduce_coalesced", "", 0.0, 0.0, "count, dtype and op of the compound op, matched across ranks"},
    {"split", "", 0.0, 0.0, "color; key"},
    {"split_shared", "", 0.0, 0.0, "key"},
    {"dup", "", 0.0, 0.0, ""},
};

const OpRow& row(const std::string& name) {
  for (const OpRow& r : kOps)
    if (name == r.name) return r;
  std::string known;
  for (const OpRow& r : kOps) known += (known.empty() ? "" : ", ") + std::string(r.name);
  throw std::invalid_argument("op table: unknown op '" + name + "'; expected one of " + known);
}

}  // namespace

const OpRow* op_rows(int* count) {
  *count = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));
  return kOps;
}

double bus_factor(const std::string& name, int size) {
  const OpRow& r = row(name);
  return size > 0 ? r.ring_multiple * (size - 1) / size + r.constant : 0.0;
}

}  // namespace pycomm
