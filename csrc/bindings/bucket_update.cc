// Python entry point of the multi-tensor bucket update (averaging apply, elastic pull, lerp);
// pycomm/kernels/averaging.py and elastic.py validate the tensors.
#include "kernels/bucket_update.h"

#include <pybind11/stl.h>

#include <vector>

#include "bindings/bindings.h"
#include "bindings/device.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

void bucket_update_entry(const std::vector<uintptr_t>& ptrs, const std::vector<int64_t>& offsets,
                         const std::vector<int64_t>& numels, int tensor_dtype, uintptr_t y, uintptr_t z,
                         int64_t bucket_numel, int bucket_dtype, double alpha, double beta, double gamma, int device,
                         uintptr_t stream) {
  const char* what = "bucket_update";
  require_gpu_build(device, what);
  BucketUpdateArgs a;
  a.segs = make_segments(ptrs, offsets, numels, bucket_numel, what);
  a.tensor_dtype = dtype_from_int(tensor_dtype, what);
  a.y = reinterpret_cast<const void*>(y);
  a.z = reinterpret_cast<const void*>(z);
  a.bucket_dtype = dtype_from_int(bucket_dtype, what);
  a.alpha = alpha;
  a.beta = beta;
  a.gamma = gamma;
  PYCOMM_RUN_KERNEL(what, segment_bytes(a.segs, a.tensor_dtype), bucket_update_cpu, bucket_update_gpu, a, device,
                    stream);
}

}  // namespace

void register_bucket_update(py::module_& m) {
  m.def("bucket_update", &bucket_update_entry, py::arg("ptrs"), py::arg("offsets"), py::arg("numels"),
        py::arg("tensor_dtype"), py::arg("y"), py::arg("z"), py::arg("bucket_numel"), py::arg("bucket_dtype"),
        py::arg("alpha"), py::arg("beta"), py::arg("gamma"), py::arg("device"), py::arg("stream"),
        "x_k = alpha * x_k + (beta * y[off_k:] + gamma * z[off_k:]) for every tensor; z = 0 means none");
}

}  // namespace pycomm::bind
