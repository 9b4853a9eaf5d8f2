// The blocking host collectives on raw buffers as plain CPython fast calls: Communicator's common-call
// paths (a contiguous host tensor, async_op=False) call them for every small op. pybind11's dispatch
// (type lookups, argument casters, a call record) cost 0.27 us of a 0.82 us 1-rank 4-byte all-reduce
// (perf); these parse a few ints. Each call submits the op and waits for it with the GIL released once,
// no Work reaching Python.
#include <Python.h>

#include <climits>
#include <cstdint>
#include <memory>

#include "bindings/bindings.h"
#include "bindings/errors.h"
#include "common/transport.h"
#include "diagnostics/stall.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

constexpr const char* kCapsuleName = "pycomm._C.Transport";

// The capsule every call of one transport is bound to: it owns a reference to the transport.
Transport& transport_of(PyObject* capsule) {
  return **static_cast<std::shared_ptr<Transport>*>(PyCapsule_GetPointer(capsule, kCapsuleName));
}

// Python ints into `out` (n of them), each within [lo, hi]; false with the Python error set.
bool ints(const char* fn, PyObject* const* args, Py_ssize_t nargs, Py_ssize_t n, int64_t* out,
          const int64_t* lo, const int64_t* hi) {
  if (nargs != n) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", fn, n, nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(args[i]);
    if (v == -1 && PyErr_Occurred()) return false;
    if (v < lo[i] || v > hi[i]) {
      PyErr_Format(PyExc_OverflowError, "%s: argument %zd is %lld; expected %lld..%lld", fn, i, v,
                   static_cast<long long>(lo[i]), static_cast<long long>(hi[i]));
      return false;
    }
    out[i] = v;
  }
  return true;
}

Buffer host_buffer(int64_t ptr, int64_t count, int64_t dtype, const char* what) {
  Buffer b;
  b.ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  b.count = count;
  b.dtype = dtype_from_int(static_cast<int>(dtype), what);
  b.device = -1;
  return b;
}

ReduceOp reduce_op_of(int64_t op) {
  if (op < 0 || op > static_cast<int64_t>(ReduceOp::MIN))
    throw std::invalid_argument("op: unknown reduce op " + std::to_string(op) + "; expected SUM, AVG, MAX or MIN");
  return static_cast<ReduceOp>(op);
}

// Submits (on the caller's thread where the transport allows it, with the GIL released) and waits,
// as Work.wait does; C++ exceptions become the Python ones every binding raises.
template <typename Submit>
PyObject* submit_and_wait(Transport& t, Submit submit) {
  std::shared_ptr<Work> w;
  PyThreadState* saved = nullptr;
  try {
    if (!t.may_run_on_caller()) w = submit();  // the queue thread runs it: submitting never blocks
    saved = PyEval_SaveThread();
    if (!w) w = submit();
    w->wait(0, stall_timeout_s());
  } catch (...) {
    if (saved) PyEval_RestoreThread(saved);
    set_python_error(std::current_exception());
    return nullptr;
  }
  PyEval_RestoreThread(saved);
  Py_RETURN_NONE;
}

constexpr int64_t kMax = INT64_MAX;

// allreduce_wait(ptr, count, dtype, op, bucket)
PyObject* allreduce_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static const int64_t lo[] = {0, 0, 0, 0, -1}, hi[] = {kMax, kMax, INT_MAX, INT_MAX, INT_MAX};
  int64_t a[5];
  if (!ints("allreduce_wait", args, nargs, 5, a, lo, hi)) return nullptr;
  Transport& t = transport_of(self);
  return submit_and_wait(t, [&] {
    return t.allreduce(host_buffer(a[0], a[1], a[2], "allreduce"), reduce_op_of(a[3]), 0, static_cast<int>(a[4]),
                       true);
  });
}

// broadcast_wait(ptr, count, dtype, root)
PyObject* broadcast_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static const int64_t lo[] = {0, 0, 0, INT_MIN}, hi[] = {kMax, kMax, INT_MAX, INT_MAX};
  int64_t a[4];
  if (!ints("broadcast_wait", args, nargs, 4, a, lo, hi)) return nullptr;
  Transport& t = transport_of(self);
  return submit_and_wait(t, [&] {
    return t.broadcast(host_buffer(a[0], a[1], a[2], "broadcast"), static_cast<int>(a[3]), 0, true);
  });
}

// allgather_wait(out_ptr, out_count, in_ptr, in_count, dtype)
PyObject* allgather_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static const int64_t lo[] = {0, 0, 0, 0, 0}, hi[] = {kMax, kMax, kMax, kMax, INT_MAX};
  int64_t a[5];
  if (!ints("allgather_wait", args, nargs, 5, a, lo, hi)) return nullptr;
  Transport& t = transport_of(self);
  return submit_and_wait(t, [&] {
    return t.allgather(host_buffer(a[0], a[1], a[4], "allgather"), host_buffer(a[2], a[3], a[4], "allgather"), 0,
                       true);
  });
}

// reduce_scatter_wait(out_ptr, out_count, in_ptr, in_count, dtype, op)
PyObject* reduce_scatter_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static const int64_t lo[] = {0, 0, 0, 0, 0, 0}, hi[] = {kMax, kMax, kMax, kMax, INT_MAX, INT_MAX};
  int64_t a[6];
  if (!ints("reduce_scatter_wait", args, nargs, 6, a, lo, hi)) return nullptr;
  Transport& t = transport_of(self);
  return submit_and_wait(t, [&] {
    return t.reduce_scatter(host_buffer(a[0], a[1], a[4], "reduce_scatter"),
                            host_buffer(a[2], a[3], a[4], "reduce_scatter"), reduce_op_of(a[5]), 0, true);
  });
}

PyMethodDef g_calls[] = {
    {"allreduce_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allreduce_wait)), METH_FASTCALL,
     "allreduce_wait(ptr, count, dtype, op, bucket): a blocking host all-reduce in place."},
    {"broadcast_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(broadcast_wait)), METH_FASTCALL,
     "broadcast_wait(ptr, count, dtype, root): a blocking host broadcast."},
    {"allgather_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allgather_wait)), METH_FASTCALL,
     "allgather_wait(out_ptr, out_count, ptr, count, dtype): a blocking host all-gather."},
    {"reduce_scatter_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(reduce_scatter_wait)),
     METH_FASTCALL, "reduce_scatter_wait(out_ptr, out_count, ptr, count, dtype, op): a blocking host reduce-scatter."},
};

}  // namespace

void register_blocking_calls(py::module_& m) {
  m.def(
      "blocking_calls",
      [](std::shared_ptr<Transport> t) {
        py::capsule owner(new std::shared_ptr<Transport>(std::move(t)), kCapsuleName,
                          [](PyObject* c) { delete static_cast<std::shared_ptr<Transport>*>(PyCapsule_GetPointer(c, kCapsuleName)); });
        py::dict calls;
        for (PyMethodDef& def : g_calls) {
          PyObject* f = PyCFunction_New(&def, owner.ptr());
          if (!f) throw py::error_already_set();
          calls[def.ml_name] = py::reinterpret_steal<py::object>(f);
        }
        return calls;
      },
      py::arg("transport"),
      "The transport's blocking host collectives as fast calls, by name (allreduce_wait, broadcast_wait, "
      "allgather_wait, reduce_scatter_wait), each bound to it.");
}

}  // namespace pycomm::bind
