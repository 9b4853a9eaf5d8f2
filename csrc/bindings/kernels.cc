// Python entry points of the kernels. Arguments are raw buffers described by pycomm/kernels.py,
// which validates the torch tensors; here we re-check what C++ can see and release the GIL.
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/device.h"
#include "kernels/pack.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

PackArgs pack_args(const std::vector<uintptr_t>& ptrs, const std::vector<int64_t>& offsets,
                   const std::vector<int64_t>& numels, int tensor_dtype, uintptr_t bucket, int64_t bucket_numel,
                   int bucket_dtype, double scale, const char* what) {
  PackArgs a;
  a.segs = make_segments(ptrs, offsets, numels, bucket_numel, what);
  a.tensor_dtype = dtype_from_int(tensor_dtype, what);
  a.bucket = reinterpret_cast<void*>(bucket);
  a.bucket_dtype = dtype_from_int(bucket_dtype, what);
  a.scale = scale;
  return a;
}

template <bool kPack>
void pack_entry(const std::vector<uintptr_t>& ptrs, const std::vector<int64_t>& offsets,
                const std::vector<int64_t>& numels, int tensor_dtype, uintptr_t bucket, int64_t bucket_numel,
                int bucket_dtype, double scale, int device, uintptr_t stream) {
  const char* what = kPack ? "pack" : "unpack";
  require_gpu_build(device, what);
  PackArgs a = pack_args(ptrs, offsets, numels, tensor_dtype, bucket, bucket_numel, bucket_dtype, scale, what);
  py::gil_scoped_release nogil;
  NvtxScope range(what, segment_bytes(a.segs, a.tensor_dtype), device);
#ifdef PYCOMM_WITH_GPU
  if (device >= 0) return kPack ? pack_gpu(a, device, stream) : unpack_gpu(a, device, stream);
#endif
  (void)stream;
  kPack ? pack_cpu(a) : unpack_cpu(a);
}

}  // namespace

void register_kernels(py::module_& m) {
  m.def("pack", &pack_entry<true>, py::arg("ptrs"), py::arg("offsets"), py::arg("numels"), py::arg("tensor_dtype"),
        py::arg("bucket"), py::arg("bucket_numel"), py::arg("bucket_dtype"), py::arg("scale"), py::arg("device"),
        py::arg("stream"), "bucket[offset+j] = cast(tensor[j] * scale) for every tensor");
  m.def("unpack", &pack_entry<false>, py::arg("ptrs"), py::arg("offsets"), py::arg("numels"), py::arg("tensor_dtype"),
        py::arg("bucket"), py::arg("bucket_numel"), py::arg("bucket_dtype"), py::arg("scale"), py::arg("device"),
        py::arg("stream"), "tensor[j] = cast(bucket[offset+j] * scale)");
}

}  // namespace pycomm::bind
