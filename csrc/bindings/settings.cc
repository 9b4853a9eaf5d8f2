// _C.apply_settings / _C.settings: the PYCOMM_* values pycomm/settings.py parsed, keyed by variable
// name, in the types that module gives them (None where a setting is "auto" / "OpenMP's default").
#include "common/settings.h"

#include <pybind11/stl.h>

#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "bindings/bindings.h"
#include "diagnostics/trace.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

// Reads d[name] as T and marks it seen; a missing key is an error (Python always sends them all).
template <typename T>
T take(const py::dict& d, const char* name, std::set<std::string>& seen) {
  if (!d.contains(name)) throw std::invalid_argument(std::string("apply_settings: missing ") + name);
  seen.insert(name);
  return d[name].cast<T>();
}

// "choice" settings arrive as one of their accepted strings; anything else is a bug in the caller.
bool is_choice(const std::string& value, const char* name, const char* yes, const char* no) {
  if (value == yes) return true;
  if (value == no) return false;
  throw std::invalid_argument(std::string("apply_settings: ") + name + "='" + value + "', expected '" + yes + "' or '" +
                              no + "'");
}

Settings from_dict(const py::dict& d) {
  std::set<std::string> seen;
  Settings s;
  s.debug = take<bool>(d, "PYCOMM_DEBUG", seen);
  s.timeout_s = take<double>(d, "PYCOMM_TIMEOUT", seen);
  s.inline_bytes = take<int64_t>(d, "PYCOMM_INLINE_BYTES", seen);
  s.spin_us = take<int64_t>(d, "PYCOMM_SPIN_US", seen);
  s.eager_bytes = take<int64_t>(d, "PYCOMM_EAGER_BYTES", seen);
  s.cpu_isa_generic = is_choice(take<std::string>(d, "PYCOMM_CPU_ISA", seen), "PYCOMM_CPU_ISA", "generic", "auto");
  auto threads = take<std::optional<int>>(d, "PYCOMM_NUM_THREADS", seen);
  s.num_threads = threads.value_or(0);
  s.nccl_split_init = is_choice(take<std::string>(d, "PYCOMM_NCCL_SPLIT", seen), "PYCOMM_NCCL_SPLIT", "init", "split");
  s.mpi_nonblocking = take<bool>(d, "PYCOMM_MPI_NONBLOCKING", seen);
  auto aware = take<std::optional<bool>>(d, "PYCOMM_MPI_GPU_AWARE", seen);
  s.mpi_gpu_aware = aware ? int(*aware) : -1;
  auto crowded = take<std::optional<bool>>(d, "PYCOMM_OVERSUBSCRIBED", seen);
  s.oversubscribed = crowded ? int(*crowded) : -1;
  s.nvtx_tool = take<bool>(d, "NVTX_INJECTION64_PATH", seen);
  for (const auto& item : d) {
    auto key = item.first.cast<std::string>();
    if (!seen.count(key)) throw std::invalid_argument("apply_settings: " + key + " is not a setting of the core");
  }
  return s;
}

py::dict to_dict(const Settings& s) {
  py::dict d;
  d["PYCOMM_DEBUG"] = s.debug;
  d["PYCOMM_TIMEOUT"] = s.timeout_s;
  d["PYCOMM_INLINE_BYTES"] = s.inline_bytes;
  d["PYCOMM_SPIN_US"] = s.spin_us;
  d["PYCOMM_EAGER_BYTES"] = s.eager_bytes;
  d["PYCOMM_CPU_ISA"] = s.cpu_isa_generic ? "generic" : "auto";
  d["PYCOMM_NUM_THREADS"] = s.num_threads > 0 ? py::object(py::int_(s.num_threads)) : py::object(py::none());
  d["PYCOMM_NCCL_SPLIT"] = s.nccl_split_init ? "init" : "split";
  d["PYCOMM_MPI_NONBLOCKING"] = s.mpi_nonblocking;
  d["PYCOMM_MPI_GPU_AWARE"] = s.mpi_gpu_aware < 0 ? py::object(py::none()) : py::object(py::bool_(s.mpi_gpu_aware));
  d["PYCOMM_OVERSUBSCRIBED"] = s.oversubscribed < 0 ? py::object(py::none()) : py::object(py::bool_(s.oversubscribed));
  d["NVTX_INJECTION64_PATH"] = s.nvtx_tool;
  return d;
}

}  // namespace

void register_settings(py::module_& m) {
  m.def(
      "apply_settings",
      [](const py::dict& d) {
        Settings s = from_dict(d);
        apply_settings(s);
        observe_nvtx(s.nvtx_tool);  // ops are observed while a tool attaches (diagnostics/trace.h)
      },
      "Hands the core the PYCOMM_* values pycomm.settings parsed (every core setting, by variable name).");
  m.def(
      "settings", [] { return to_dict(settings()); },
      "The PYCOMM_* values the core holds, as apply_settings took them.");
  m.attr("EAGER_BYTES_DEFAULT") = kEagerBytesDefault;  // pycomm/settings.py declares the same default
}

}  // namespace pycomm::bind
