// Python entry points of the compression kernels (int8 blockwise, 1-bit sign). Buffers arrive raw
// from pycomm/kernels/quantize.py and onebit.py, which validate the torch tensors; 0 is a null pointer.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bindings/bindings.h"
#include "bindings/device.h"
#include "kernels/onebit.h"
#include "kernels/quantize.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

template <typename T>
T* as_ptr(uintptr_t p) { return reinterpret_cast<T*>(p); }

void quantize_int8_entry(uintptr_t x, int x_dtype, int64_t numel, int64_t block, uintptr_t q, uintptr_t scales,
                         uintptr_t residual, bool stochastic, uint64_t seed, int device, uintptr_t stream) {
  const char* what = "quantize_int8";
  require_gpu_build(device, what);
  QuantizeArgs a;
  a.x = as_ptr<const void>(x);
  a.x_dtype = dtype_from_int(x_dtype, what);
  a.numel = numel;
  a.block = block;
  a.q = as_ptr<int8_t>(q);
  a.scales = as_ptr<float>(scales);
  a.residual = as_ptr<float>(residual);
  a.stochastic = stochastic;
  a.seed = seed;
  py::gil_scoped_release nogil;
#ifdef PYCOMM_WITH_GPU
  if (device >= 0) return quantize_int8_gpu(a, device, stream);
#endif
  quantize_int8_cpu(a);
}

void dequantize_int8_entry(uintptr_t q, uintptr_t scales, int64_t numel, int64_t block, uintptr_t out,
                           int out_dtype, bool accumulate, int device, uintptr_t stream) {
  const char* what = "dequantize_int8";
  require_gpu_build(device, what);
  DequantizeArgs a;
  a.q = as_ptr<const int8_t>(q);
  a.scales = as_ptr<const float>(scales);
  a.numel = numel;
  a.block = block;
  a.out = as_ptr<void>(out);
  a.out_dtype = dtype_from_int(out_dtype, what);
  a.accumulate = accumulate;
  py::gil_scoped_release nogil;
#ifdef PYCOMM_WITH_GPU
  if (device >= 0) return dequantize_int8_gpu(a, device, stream);
#endif
  dequantize_int8_cpu(a);
}

void sign_compress_entry(uintptr_t x, int x_dtype, int64_t numel, int64_t block, uintptr_t bits, uintptr_t scales,
                         uintptr_t residual, int device, uintptr_t stream) {
  const char* what = "sign_compress";
  require_gpu_build(device, what);
  SignCompressArgs a;
  a.x = as_ptr<const void>(x);
  a.x_dtype = dtype_from_int(x_dtype, what);
  a.numel = numel;
  a.block = block;
  a.bits = as_ptr<uint8_t>(bits);
  a.scales = as_ptr<float>(scales);
  a.residual = as_ptr<float>(residual);
  py::gil_scoped_release nogil;
#ifdef PYCOMM_WITH_GPU
  if (device >= 0) return sign_compress_gpu(a, device, stream);
#endif
  sign_compress_cpu(a);
}

void sign_decompress_entry(uintptr_t bits, uintptr_t scales, int64_t numel, int64_t block, uintptr_t out,
                           int out_dtype, bool accumulate, int device, uintptr_t stream) {
  const char* what = "sign_decompress";
  require_gpu_build(device, what);
  SignDecompressArgs a;
  a.bits = as_ptr<const uint8_t>(bits);
  a.scales = as_ptr<const float>(scales);
  a.numel = numel;
  a.block = block;
  a.out = as_ptr<void>(out);
  a.out_dtype = dtype_from_int(out_dtype, what);
  a.accumulate = accumulate;
  py::gil_scoped_release nogil;
#ifdef PYCOMM_WITH_GPU
  if (device >= 0) return sign_decompress_gpu(a, device, stream);
#endif
  sign_decompress_cpu(a);
}

}  // namespace

void register_codecs(py::module_& m) {
  m.def("quantize_int8", &quantize_int8_entry, py::arg("x"), py::arg("x_dtype"), py::arg("numel"), py::arg("block"),
        py::arg("q"), py::arg("scales"), py::arg("residual"), py::arg("stochastic"), py::arg("seed"),
        py::arg("device"), py::arg("stream"),
        "q = round(v / scale) per block, scale = max|v| / 127, v = x (+ residual, then updated)");
  m.def("dequantize_int8", &dequantize_int8_entry, py::arg("q"), py::arg("scales"), py::arg("numel"),
        py::arg("block"), py::arg("out"), py::arg("out_dtype"), py::arg("accumulate"), py::arg("device"),
        py::arg("stream"), "out (+)= q * scale");
  m.def("sign_compress", &sign_compress_entry, py::arg("x"), py::arg("x_dtype"), py::arg("numel"), py::arg("block"),
        py::arg("bits"), py::arg("scales"), py::arg("residual"), py::arg("device"), py::arg("stream"),
        "bits = (v >= 0), scale = mean|v| per block, v = x (+ residual, then updated)");
  m.def("sign_decompress", &sign_decompress_entry, py::arg("bits"), py::arg("scales"), py::arg("numel"),
        py::arg("block"), py::arg("out"), py::arg("out_dtype"), py::arg("accumulate"), py::arg("device"),
        py::arg("stream"), "out (+)= (bit ? scale : -scale)");
}

}  // namespace pycomm::bind
