// pycomm._C.op_table(): the op table of common/op_table (bytes counted, bus factor, argument
// roles), so Python's stats, the benchmarks and the docs define none of it again.
#include "common/op_table.h"

#include <pybind11/pybind11.h>

#include "bindings/bindings.h"

namespace py = pybind11;

namespace pycomm::bind {

void register_op_table(py::module_& m) {
  m.def(
      "op_table",
      [] {
        int count = 0;
        const OpRow* rows = op_rows(&count);
        py::list out;
        for (int i = 0; i < count; ++i) {
          py::dict row;
          row["name"] = rows[i].name;
          row["bytes"] = rows[i].bytes;
          row["ring_multiple"] = rows[i].ring_multiple;
          row["constant"] = rows[i].constant;
          row["arguments"] = rows[i].arguments;
          out.append(std::move(row));
        }
        return out;
      },
      "One dict per op: name; bytes (the buffer its byte count measures: 'tensor', 'out' or '' for none); "
      "ring_multiple and constant (bus factor on n ranks = ring_multiple * (n - 1) / n + constant, "
      "busbw = bytes * bus factor / seconds, as nccl-tests); arguments (the transport's, with their roles).");
  m.def(
      "bus_factor", [](const std::string& name, int size) { return bus_factor(name, size); }, py::arg("op"),
      py::arg("size"), "The bus factor of op `name` on `size` ranks (see op_table); ValueError for an unknown op.");
}

}  // namespace pycomm::bind
