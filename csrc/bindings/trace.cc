// _C.trace_*: switching the core's trace on and off, reading its rings (diagnostics/trace.h), and
// recording events from Python (compound ops, the gloo transport). pycomm/tracing/__init__.py is the user.
#include "diagnostics/trace.h"

#include <pybind11/stl.h>

#include <cstddef>
#include <string>

#include "bindings/bindings.h"
#include "diagnostics/stall.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

// [(thread id, raw events as bytes)]: pycomm/tracing/__init__.py views them with a numpy dtype from trace_layout().
py::list as_python(const std::vector<TraceThreadEvents>& rings) {
  py::list out;
  for (const auto& r : rings)
    out.append(py::make_tuple(
        r.thread_id, py::bytes(reinterpret_cast<const char*>(r.events.data()), r.events.size() * sizeof(TraceEvent))));
  return out;
}

// Field name -> (byte offset, numpy type string).
py::dict layout() {
  py::dict d;
#define PYCOMM_FIELD(f, t) d[#f] = py::make_tuple(offsetof(TraceEvent, f), t)
  PYCOMM_FIELD(ts_ns, "<i8");
  PYCOMM_FIELD(seq, "<u8");
  PYCOMM_FIELD(collective_index, "<i8");
  PYCOMM_FIELD(count, "<i8");
  PYCOMM_FIELD(bytes, "<i8");
  PYCOMM_FIELD(wire_bytes, "<i8");
  PYCOMM_FIELD(comm_id, "<u4");
  PYCOMM_FIELD(comm_size, "<i4");
  PYCOMM_FIELD(rank, "<i4");
  PYCOMM_FIELD(peer, "<i4");
  PYCOMM_FIELD(tag, "<i4");
  PYCOMM_FIELD(bucket, "<i4");
  PYCOMM_FIELD(segment, "<i4");
  PYCOMM_FIELD(span_id, "<u4");
  PYCOMM_FIELD(dtype, "i1");
  PYCOMM_FIELD(redop, "i1");
  PYCOMM_FIELD(phase, "u1");
  PYCOMM_FIELD(flags, "u1");
  d["name"] = py::make_tuple(offsetof(TraceEvent, name), "S" + std::to_string(sizeof(TraceEvent::name)));
  d["algorithm"] = py::make_tuple(offsetof(TraceEvent, algorithm), "S" + std::to_string(sizeof(TraceEvent::algorithm)));
#undef PYCOMM_FIELD
  return d;
}

py::dict phases() {
  py::dict d;
  for (int p = 0; p <= static_cast<int>(TracePhase::kSpanEnd); ++p) d[trace_phase_name(static_cast<TracePhase>(p))] = p;
  return d;
}

// The Python function the stall hook calls (pycomm.tracing.flight_recorder.on_stall); leaked on purpose: the
// hook may run during interpreter shutdown, when destroying a Python object is no longer allowed.
py::object* g_on_stall = nullptr;

std::string call_on_stall(const std::string& message, uint32_t comm_id) {
  if (!Py_IsInitialized() || g_on_stall == nullptr) return "";
  py::gil_scoped_acquire gil;
  try {
    return (*g_on_stall)(message, comm_id).cast<std::string>();
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("pycomm flight recorder");
    return "";
  } catch (...) {
    return "";
  }
}

}  // namespace

void register_trace(py::module_& m) {
  m.def(
      "set_stall_hook",
      [](py::object fn) {
        if (fn.is_none()) {
          set_stall_hook(nullptr);
          return;
        }
        if (g_on_stall == nullptr) g_on_stall = new py::object();
        *g_on_stall = std::move(fn);
        set_stall_hook(&call_on_stall);
      },
      py::arg("fn"),
      "fn(message, comm_id) -> str, called before a StallError is raised; its result is appended to the message.");
  m.def("trace_enable", &trace_enable, py::arg("events_per_thread"),
        "Records trace events into per-thread rings of this many events (rounded up to a power of two).");
  m.def("trace_disable", &trace_disable);
  m.def("trace_enabled", &trace_enabled);
  m.def("trace_now_ns", &trace_now_ns, "The trace clock: steady clock (CLOCK_MONOTONIC) nanoseconds.");
  m.def("trace_new_comm_id", &trace_new_comm_id, "A communicator id for a transport written in Python.");
  m.def("trace_clear", &trace_clear, "Forgets the events recorded so far.");
  m.def(
      "trace_drain",
      [] {
        uint64_t dropped = 0;
        std::vector<TraceThreadEvents> rings;
        {
          py::gil_scoped_release nogil;
          rings = trace_drain(&dropped);
        }
        return py::make_tuple(as_python(rings), dropped);
      },
      "([(thread id, events as bytes)], dropped): events since the previous drain, and how many were overwritten "
      "first.");
  m.def(
      "trace_recent",
      [](size_t per_thread) {
        std::vector<TraceThreadEvents> rings;
        {
          py::gil_scoped_release nogil;
          rings = trace_recent(per_thread);
        }
        return as_python(rings);
      },
      py::arg("per_thread"), "The last events of every thread's ring, not consumed (the flight recorder).");
  m.def("trace_layout", &layout, "TraceEvent's fields: name -> (offset, numpy type).");
  m.attr("trace_event_size") = sizeof(TraceEvent);
  m.attr("trace_phases") = phases();
  m.def(
      "trace_record",
      [](const std::string& name, uint32_t comm_id, int rank, int size, uint64_t seq, int phase, int64_t ts_ns,
         int64_t count, int dtype, int64_t bytes, int64_t wire_bytes, int redop, const std::string& algorithm, int peer,
         int tag, int bucket, int segment, uint32_t span_id, bool collective, int64_t collective_index) {
        if (phase < 0 || phase > static_cast<int>(TracePhase::kSpanEnd))
          throw std::invalid_argument("trace_record: phase " + std::to_string(phase) + " is not a TracePhase");
        TraceEvent e{};
        e.ts_ns = ts_ns;
        e.seq = seq;
        e.collective_index = collective_index;
        e.count = count;
        e.bytes = bytes;
        e.wire_bytes = wire_bytes;
        e.comm_id = comm_id;
        e.comm_size = size;
        e.rank = rank;
        e.peer = peer;
        e.tag = tag;
        e.bucket = bucket;
        e.segment = segment;
        e.span_id = span_id;
        e.dtype = static_cast<int8_t>(dtype);
        e.redop = static_cast<int8_t>(redop);
        e.phase = static_cast<uint8_t>(phase);
        e.flags = collective ? kTraceCollective : 0;
        copy_label(e.name, sizeof e.name, name);
        copy_label(e.algorithm, sizeof e.algorithm, algorithm);
        trace_record(e);
      },
      py::arg("name"), py::arg("comm_id"), py::arg("rank"), py::arg("size"), py::arg("seq"), py::arg("phase"),
      py::arg("ts_ns"), py::arg("count") = 0, py::arg("dtype") = -1, py::arg("bytes") = 0, py::arg("wire_bytes") = 0,
      py::arg("redop") = -1, py::arg("algorithm") = "", py::arg("peer") = -1, py::arg("tag") = -1,
      py::arg("bucket") = -1, py::arg("segment") = -1, py::arg("span_id") = 0, py::arg("collective") = true,
      py::arg("collective_index") = -1,
      "Records one event from Python (a transport written in Python, a compound op's span) into this thread's ring.");
}

}  // namespace pycomm::bind
