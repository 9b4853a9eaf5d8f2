// The blocking host collectives on raw buffers as plain CPython fast calls: Communicator's common-call
// paths (a contiguous host tensor, async_op=False) call them for every small op. pybind11's dispatch
// (type lookups, argument casters, a call record) cost 0.27 us of a 1-rank 4-byte all-reduce's 0.82 us
// in the core (perf, before this file); these parse a few ints (0.07 us). Each call submits the op and
// waits for it with the GIL released once, no Work reaching Python.
#include <Python.h>

#include <climits>
#include <cstdint>
#include <memory>

#include "bindings/arguments.h"
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

// What each positional argument is: an address (any unsigned 64-bit value), an element count (any
// int64: the op's own checks name a negative one, as on every other entry point), or a C int.
enum class Arg { kPointer, kCount, kInt };

// Python ints into `out`, one per entry of `kinds`; false with the Python error set.
template <size_t N>
bool parse(const char* fn, PyObject* const* args, Py_ssize_t nargs, const Arg (&kinds)[N], int64_t (&out)[N]) {
  if (nargs != static_cast<Py_ssize_t>(N)) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", fn, static_cast<Py_ssize_t>(N), nargs);
    return false;
  }
  for (size_t i = 0; i < N; ++i) {
    if (!PyLong_Check(args[i])) {
      PyErr_Format(PyExc_TypeError, "%s: argument %zd must be an int, not %s", fn, static_cast<Py_ssize_t>(i),
                   Py_TYPE(args[i])->tp_name);
      return false;
    }
    if (kinds[i] == Arg::kPointer) {
      const unsigned long long p = PyLong_AsUnsignedLongLong(args[i]);
      if (p == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
      out[i] = static_cast<int64_t>(p);  // bits kept; read back as uintptr_t
      continue;
    }
    const long long v = PyLong_AsLongLong(args[i]);
    if (v == -1 && PyErr_Occurred()) return false;
    if (kinds[i] == Arg::kInt && (v < INT_MIN || v > INT_MAX)) {
      PyErr_Format(PyExc_OverflowError, "%s: argument %zd is %lld; expected a C int", fn, static_cast<Py_ssize_t>(i),
                   v);
      return false;
    }
    out[i] = v;
  }
  return true;
}

uintptr_t address(int64_t bits) { return static_cast<uintptr_t>(bits); }
int as_int(int64_t v) { return static_cast<int>(v); }

// The GIL released for a scope, restored on every exit (exceptions too, before they are set as errors).
class GilReleased {
 public:
  GilReleased() : saved_(PyEval_SaveThread()) {}
  ~GilReleased() { PyEval_RestoreThread(saved_); }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* saved_;
};

// Submits (on the caller's thread where the transport allows it) and waits, the GIL released for
// every part that may block, as Work.wait does; C++ exceptions become the Python ones every binding
// raises.
template <typename Submit>
PyObject* submit_and_wait(Transport& t, Submit submit) {
  try {
    const bool on_caller = t.may_run_on_caller();
    std::shared_ptr<Work> w;
    if (!on_caller) w = submit();  // the queue thread runs it: submitting never blocks
    GilReleased nogil;
    if (on_caller) w = submit();
    w->wait(0, stall_timeout_s());
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// One fast call: its arguments parsed as `kinds`, then `op(transport, args)` submitted and waited for.
template <size_t N, typename Op>
PyObject* blocking_call(const char* fn, const Arg (&kinds)[N], PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                        Op op) {
  int64_t a[N];
  if (!parse(fn, args, nargs, kinds, a)) return nullptr;
  Transport& t = transport_of(self);
  return submit_and_wait(t, [&] { return op(t, a); });
}

// allreduce_wait(ptr, count, dtype, op, bucket)
PyObject* allreduce_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static constexpr Arg kinds[] = {Arg::kPointer, Arg::kCount, Arg::kInt, Arg::kInt, Arg::kInt};
  return blocking_call("allreduce_wait", kinds, self, args, nargs, [](Transport& t, const int64_t* a) {
    return t.allreduce(buffer(address(a[0]), a[1], as_int(a[2]), -1, "allreduce"), reduce_op(a[3]), 0, as_int(a[4]),
                       true);
  });
}

// broadcast_wait(ptr, count, dtype, root)
PyObject* broadcast_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static constexpr Arg kinds[] = {Arg::kPointer, Arg::kCount, Arg::kInt, Arg::kInt};
  return blocking_call("broadcast_wait", kinds, self, args, nargs, [](Transport& t, const int64_t* a) {
    return t.broadcast(buffer(address(a[0]), a[1], as_int(a[2]), -1, "broadcast"), as_int(a[3]), 0, true);
  });
}

// allgather_wait(out_ptr, out_count, in_ptr, in_count, dtype)
PyObject* allgather_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static constexpr Arg kinds[] = {Arg::kPointer, Arg::kCount, Arg::kPointer, Arg::kCount, Arg::kInt};
  return blocking_call("allgather_wait", kinds, self, args, nargs, [](Transport& t, const int64_t* a) {
    return t.allgather(buffer(address(a[0]), a[1], as_int(a[4]), -1, "allgather"),
                       buffer(address(a[2]), a[3], as_int(a[4]), -1, "allgather"), 0, true);
  });
}

// reduce_scatter_wait(out_ptr, out_count, in_ptr, in_count, dtype, op)
PyObject* reduce_scatter_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static constexpr Arg kinds[] = {Arg::kPointer, Arg::kCount, Arg::kPointer, Arg::kCount, Arg::kInt, Arg::kInt};
  return blocking_call("reduce_scatter_wait", kinds, self, args, nargs, [](Transport& t, const int64_t* a) {
    return t.reduce_scatter(buffer(address(a[0]), a[1], as_int(a[4]), -1, "reduce_scatter"),
                            buffer(address(a[2]), a[3], as_int(a[4]), -1, "reduce_scatter"), reduce_op(a[5]), 0, true);
  });
}

// METH_FASTCALL functions are stored as PyCFunction (CPython's own convention for the cast).
PyCFunction fast(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

PyMethodDef g_calls[] = {
    {"allreduce_wait", fast(allreduce_wait), METH_FASTCALL,
     "allreduce_wait(ptr, count, dtype, op, bucket): a blocking host all-reduce in place."},
    {"broadcast_wait", fast(broadcast_wait), METH_FASTCALL,
     "broadcast_wait(ptr, count, dtype, root): a blocking host broadcast."},
    {"allgather_wait", fast(allgather_wait), METH_FASTCALL,
     "allgather_wait(out_ptr, out_count, ptr, count, dtype): a blocking host all-gather."},
    {"reduce_scatter_wait", fast(reduce_scatter_wait), METH_FASTCALL,
     "reduce_scatter_wait(out_ptr, out_count, ptr, count, dtype, op): a blocking host reduce-scatter."},
};

}  // namespace

void register_blocking_calls(py::module_& m) {
  m.def(
      "blocking_calls",
      [](std::shared_ptr<Transport> t) {
        py::capsule owner(new std::shared_ptr<Transport>(std::move(t)), kCapsuleName, [](PyObject* c) {
          delete static_cast<std::shared_ptr<Transport>*>(PyCapsule_GetPointer(c, kCapsuleName));
        });
        py::dict calls;
        for (PyMethodDef& def : g_calls) {
          PyObject* f = PyCFunction_New(&def, owner.ptr());
          if (!f) throw py::error_already_set();
          calls[def.ml_name] = py::reinterpret_steal<py::object>(f);
        }
        return calls;
      },
      py::arg("transport").none(false),
      "The transport's blocking host collectives as fast calls, by name (allreduce_wait, broadcast_wait, "
      "allgather_wait, reduce_scatter_wait), each bound to it.");
}

}  // namespace pycomm::bind
