// Python entry points of the communication runtime: Transport and Work on raw buffers (pycomm/communicator.py
// checks the torch tensors first; its blocking common calls go through blocking_calls.cc), the local
// transport, and stats.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <vector>

#include "bindings/arguments.h"
#include "bindings/bindings.h"
#include "common/transport.h"
#include "diagnostics/op_check.h"
#include "diagnostics/stall.h"
#include "diagnostics/stats.h"
#include "transport/local/local_transport.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

// Runs `submit` (an op of `t` given `caller_waits`). When the caller waits for the op at once, a
// host transport may run it right here: the GIL is released for that, as Work.wait releases it.
template <typename Submit>
std::shared_ptr<Work> submitted(const Transport& t, bool caller_waits, Submit submit) {
  if (!caller_waits || !t.may_run_on_caller()) return submit();
  py::gil_scoped_release nogil;
  return submit();
}

std::shared_ptr<Transport> shared(std::unique_ptr<Transport> t) { return std::shared_ptr<Transport>(std::move(t)); }

// A message as Python sees it: (source, tag, dtype code, count, shape or None, data or None).
py::object message(const P2pMessage& m) {
  py::object shape = m.ndim < 0 ? py::object(py::none()) : py::object(py::tuple(py::cast(m.shape)));
  py::object data = m.data ? py::cast(m.data) : py::object(py::none());
  return py::make_tuple(m.source, m.tag, static_cast<int>(m.dtype), m.count, shape, data);
}

py::dict op_info(const OpInfo& i) {
  py::dict d;
  d["name"] = i.name;
  d["seq"] = i.seq;
  d["count"] = i.count;
  d["dtype"] = dtype_name(i.dtype);
  d["bytes"] = i.bytes;
  d["peer"] = i.peer;
  d["bucket"] = i.bucket;
  d["describe"] = i.describe();
  return d;
}

void register_work(py::module_& m) {
  py::class_<Work, std::shared_ptr<Work>>(m, "Work", "Completion of one submitted op (see pycomm.Work).")
      .def("is_completed", &Work::is_completed, py::call_guard<py::gil_scoped_release>())
      .def("wait", &Work::wait, py::arg("stream"), py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>())
      .def("synchronize", &Work::synchronize, py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("info", [](const Work& w) { return op_info(w.info()); })
      .def_property_readonly(
          "received",
          [](Work& w) -> py::object {
            std::shared_ptr<const P2pMessage> m = w.received();
            return m ? message(*m) : py::none();
          },
          "A completed receive's message (see message()); None otherwise.");
  // A received payload in host memory: the buffer under recv_tensor's new tensor (torch.frombuffer).
  py::class_<HostBytes, std::shared_ptr<HostBytes>>(m, "HostBytes", py::buffer_protocol())
      .def_buffer([](HostBytes& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1, {b.size()}, {1}, false);
      })
      .def("__len__", &HostBytes::size);
}

// Every op takes a last `caller_waits` flag (True for async_op=False): see submitted().
void register_transport(py::module_& m) {
  using T = Transport;
  py::class_<T, std::shared_ptr<T>>(m, "Transport", "A communicator's transport on raw buffers.")
      .def_property_readonly("rank", &T::rank)
      .def_property_readonly("size", &T::size)
      .def_property_readonly("local_rank", &T::local_rank)
      .def_property_readonly("local_size", &T::local_size)
      .def_property_readonly("backend", &T::backend)
      .def_property_readonly("oversubscribed", &T::oversubscribed)
      .def("gather_at_creation", &T::gather_at_creation, py::arg("mine"), py::call_guard<py::gil_scoped_release>(),
           "Every rank's `mine` (ints), rank by rank, outside the op queue and stats; None on NCCL. Collective.")
      .def_property_readonly("trace_comm_id", &T::trace_comm_id)
      .def("allreduce",
           [](T& t, uintptr_t p, int64_t n, int dt, int dev, int op, uintptr_t stream, int bucket, bool waits) {
             return submitted(t, waits, [&] {
               return t.allreduce(buffer(p, n, dt, dev, "allreduce"), reduce_op(op), stream, bucket, waits);
             });
           })
      .def("broadcast",
           [](T& t, uintptr_t p, int64_t n, int dt, int dev, int root, uintptr_t stream, bool waits) {
             return submitted(t, waits,
                              [&] { return t.broadcast(buffer(p, n, dt, dev, "broadcast"), root, stream, waits); });
           })
      .def("allgather",
           [](T& t, uintptr_t po, int64_t no, uintptr_t pi, int64_t ni, int dt, int dev, uintptr_t stream, bool waits) {
             return submitted(t, waits, [&] {
               return t.allgather(buffer(po, no, dt, dev, "allgather"), buffer(pi, ni, dt, dev, "allgather"), stream,
                                  waits);
             });
           })
      .def("reduce_scatter",
           [](T& t, uintptr_t po, int64_t no, uintptr_t pi, int64_t ni, int dt, int dev, int op, uintptr_t stream,
              bool waits) {
             return submitted(t, waits, [&] {
               return t.reduce_scatter(buffer(po, no, dt, dev, "reduce_scatter"),
                                       buffer(pi, ni, dt, dev, "reduce_scatter"), reduce_op(op), stream, waits);
             });
           })
      .def("alltoall",
           [](T& t, uintptr_t po, int64_t no, uintptr_t pi, int64_t ni, int dt, int dev, uintptr_t stream, bool waits) {
             return submitted(t, waits, [&] {
               return t.alltoall(buffer(po, no, dt, dev, "alltoall"), buffer(pi, ni, dt, dev, "alltoall"), stream,
                                 waits);
             });
           })
      .def("send",
           [](T& t, uintptr_t p, int64_t n, int dt, int dev, int dst, int tag, uintptr_t stream, bool waits) {
             return submitted(t, waits, [&] { return t.send(buffer(p, n, dt, dev, "send"), dst, tag, stream, waits); });
           })
      .def("recv",
           [](T& t, uintptr_t p, int64_t n, int dt, int dev, int src, int tag, uintptr_t stream, bool waits) {
             return submitted(t, waits, [&] { return t.recv(buffer(p, n, dt, dev, "recv"), src, tag, stream, waits); });
           })
      .def("send_shaped",
           [](T& t, uintptr_t p, int64_t n, int dt, int dev, const std::vector<int64_t>& shape, int dst, int tag,
              uintptr_t stream, bool waits) {
             return submitted(t, waits, [&] {
               return t.send_shaped(buffer(p, n, dt, dev, "send"), shape, dst, tag, stream, waits);
             });
           })
      .def("recv_new", [](T& t, int src, int tag,
                          bool waits) { return submitted(t, waits, [&] { return t.recv_new(src, tag, waits); }); })
      .def("probe",
           [](T& t, int src, int tag, bool block) -> py::object {
             std::optional<P2pMessage> m;
             {
               py::gil_scoped_release nogil;
               m = t.probe(src, tag, block);
             }
             return m ? message(*m) : py::none();
           })
      .def_property_readonly("max_tag", &T::max_tag)
      .def_property_readonly("any_source", &T::any_source)
      .def(
          "dup", [](T& t) { return shared(t.dup()); }, py::call_guard<py::gil_scoped_release>())
      .def("barrier", [](T& t, bool waits) { return submitted(t, waits, [&] { return t.barrier(waits); }); })
      .def("match", [](T& t, const std::string& name, int64_t n, int dt,
                       int op) { return t.match(name, buffer(0, n, dt, -1, name.c_str()), reduce_op(op)); })
      .def(
          "split", [](T& t, int color, int key) { return shared(t.split(color, key)); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "split_shared", [](T& t, int key) { return shared(t.split_shared(key)); },
          py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &T::shutdown, py::call_guard<py::gil_scoped_release>())
      .def("abort", &T::abort, py::arg("reason"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace

void register_comm(py::module_& m) {
  register_work(m);
  register_transport(m);
  m.def(
      "local_transport", [] { return std::shared_ptr<Transport>(std::make_shared<LocalTransport>()); },
      "A transport of one rank (no MPI or NCCL needed).");
  m.def("stall_timeout", &stall_timeout_s, "PYCOMM_TIMEOUT in seconds (<= 0: no stall check).");
  m.def("debug_checks", &debug_checks_enabled, "Whether PYCOMM_DEBUG asks for the full op matching.");
  // Op matching for transports written in Python (pycomm/gloo/matching.py): the same signature and the
  // same MismatchError as the MPI transport's exchange.
  m.attr("SIGNATURE_LEN") = kSignatureLen;
  m.def(
      "op_signature",
      [](const std::string& name, int64_t count, int dtype, int peer, int redop, int64_t bytes, uint64_t seq) {
        OpInfo info;
        info.name = name;
        info.count = count;
        info.dtype = dtype_from_int(dtype, name.c_str());
        info.peer = peer;
        info.redop = redop;
        info.bytes = bytes;
        info.seq = seq;
        const OpSignature s = op_signature(info);
        return std::vector<int64_t>(s.begin(), s.end());
      },
      "The op's signature (SIGNATURE_LEN int64: kind, count, dtype, root/peer, reduce op, bytes, seq), as ranks "
      "exchange it before a collective.");
  m.def(
      "check_signatures",
      [](const std::vector<int64_t>& all, int rank, const std::string& comm_label) {
        const int64_t size = static_cast<int64_t>(all.size()) / kSignatureLen;
        if (size * kSignatureLen != static_cast<int64_t>(all.size()) || rank < 0 || rank >= size)
          throw std::invalid_argument("check_signatures: expected size * SIGNATURE_LEN values and 0 <= rank < size");
        check_signatures(all.data(), static_cast<int>(size), rank, comm_label);
      },
      "Every rank's signature, rank by rank: raises MismatchError naming both ranks' ops where one differs "
      "from `rank`'s.");
  m.def("stats", [] {
    py::dict d;
    for (const auto& [name, c] : stats_snapshot()) {
      py::dict e;
      e["calls"] = c.calls;
      e["bytes"] = c.bytes;
      e["bus_bytes"] = c.bus_bytes;
      e["seconds"] = c.seconds;
      e["inline_calls"] = c.inline_calls;
      d[py::str(name)] = e;
    }
    return d;
  });
  m.def("stats_reset", &stats_reset);
}

}  // namespace pycomm::bind
