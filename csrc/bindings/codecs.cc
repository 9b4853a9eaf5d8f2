// Python entry points of the compression kernels (int8 and int4 blockwise, 1-bit sign). Buffers arrive raw
// from pycomm/kernels/quantize.py, int4.py and onebit.py, which validate the torch tensors; 0 is a null pointer.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/device.h"
#include "diagnostics/nvtx.h"
#include "kernels/onebit.h"
#include "kernels/quantize.h"
#include "kernels/reduce_encode.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

template <typename T>
T* as_ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// names of the fused reduce steps: their Python entry points and NVTX ranges
constexpr char kReduceQuantize[] = "reduce_quantize_int8";
constexpr char kReduceSign[] = "reduce_sign_compress";

// The fields both encoders share: input, block layout, scales and the error-feedback residual.
template <typename Args>
Args encode_args(uintptr_t x, int x_dtype, int64_t numel, int64_t block, uintptr_t scales, uintptr_t residual,
                 const char* what) {
  Args a;
  a.x = as_ptr<const void>(x);
  a.x_dtype = dtype_from_int(x_dtype, what);
  a.numel = numel;
  a.block = block;
  a.scales = as_ptr<float>(scales);
  a.residual = as_ptr<float>(residual);
  return a;
}

// The fields both decoders share.
template <typename Args>
Args decode_args(uintptr_t scales, int64_t numel, int64_t block, uintptr_t out, int out_dtype, bool accumulate,
                 const char* what) {
  Args a;
  a.scales = as_ptr<const float>(scales);
  a.numel = numel;
  a.block = block;
  a.out = as_ptr<void>(out);
  a.out_dtype = dtype_from_int(out_dtype, what);
  a.accumulate = accumulate;
  return a;
}

// Each format's kernels, with the GIL released (overloads on the format's arguments); each call's NVTX
// range carries the kernel's name and the bytes of its floating-point side.
void run(const QuantizeArgs& a, int device, uintptr_t stream) {
  PYCOMM_RUN_KERNEL("quantize_int8", a.numel * int64_t(dtype_size(a.x_dtype)), quantize_int8_cpu, quantize_int8_gpu, a,
                    device, stream);
}
void run(const Int4QuantizeArgs& a, int device, uintptr_t stream) {
  PYCOMM_RUN_KERNEL("quantize_int4", a.numel * int64_t(dtype_size(a.x_dtype)), quantize_int4_cpu, quantize_int4_gpu, a,
                    device, stream);
}
void run(const DequantizeArgs& a, int device, uintptr_t stream) {
  PYCOMM_RUN_KERNEL(a.accumulate ? "dequantize_int8_accumulate" : "dequantize_int8",
                    a.numel * int64_t(dtype_size(a.out_dtype)), dequantize_int8_cpu, dequantize_int8_gpu, a, device,
                    stream);
}
void run(const Int4DequantizeArgs& a, int device, uintptr_t stream) {
  PYCOMM_RUN_KERNEL(a.accumulate ? "dequantize_int4_accumulate" : "dequantize_int4",
                    a.numel * int64_t(dtype_size(a.out_dtype)), dequantize_int4_cpu, dequantize_int4_gpu, a, device,
                    stream);
}

// quantize_int8 / quantize_int4 (Data: int8_t / uint8_t), `q` the format's levels; `what` names the entry.
template <typename Data, const char* kWhat>
void quantize_entry(uintptr_t x, int x_dtype, int64_t numel, int64_t block, uintptr_t q, uintptr_t scales,
                    uintptr_t residual, bool stochastic, uint64_t seed, int device, uintptr_t stream) {
  require_gpu_build(device, kWhat);
  auto a = encode_args<AbsmaxQuantizeArgs<Data>>(x, x_dtype, numel, block, scales, residual, kWhat);
  a.q = as_ptr<Data>(q);
  a.stochastic = stochastic;
  a.seed = seed;
  run(a, device, stream);
}

template <typename Data, const char* kWhat>
void dequantize_entry(uintptr_t q, uintptr_t scales, int64_t numel, int64_t block, uintptr_t out, int out_dtype,
                      bool accumulate, int device, uintptr_t stream) {
  require_gpu_build(device, kWhat);
  auto a = decode_args<AbsmaxDequantizeArgs<Data>>(scales, numel, block, out, out_dtype, accumulate, kWhat);
  a.q = as_ptr<const Data>(q);
  run(a, device, stream);
}

constexpr char kQuantizeInt8[] = "quantize_int8", kDequantizeInt8[] = "dequantize_int8";
constexpr char kQuantizeInt4[] = "quantize_int4", kDequantizeInt4[] = "dequantize_int4";
constexpr char kReduceQuantizeInt4[] = "reduce_quantize_int4";

// The fused reduce step of each codec (kernels/reduce_encode.h); `data` and `out_data` are the codec's
// int8 levels, packed int4 levels or sign bits.
template <void (*kKernel)(const ReduceEncodeArgs&), const char* kName>
void reduce_encode_entry(uintptr_t own, int64_t own_numel, uintptr_t own_residual, const std::vector<uintptr_t>& data,
                         const std::vector<uintptr_t>& scales, double factor, int64_t numel, int64_t block,
                         uintptr_t out_data, uintptr_t out_scales, uintptr_t residual, bool stochastic, uint64_t seed,
                         uintptr_t decoded_out) {
  if (data.size() != scales.size())
    throw std::invalid_argument("reduce step: data and scales must list the same sources (got " +
                                std::to_string(data.size()) + " and " + std::to_string(scales.size()) + ")");
  std::vector<const void*> ds;
  std::vector<const float*> ss;
  for (size_t s = 0; s < data.size(); ++s) {
    ds.push_back(as_ptr<const void>(data[s]));
    ss.push_back(as_ptr<const float>(scales[s]));
  }
  ReduceEncodeArgs a;
  a.own = as_ptr<const float>(own);
  a.own_numel = own_numel;
  a.own_residual = as_ptr<float>(own_residual);
  a.data = ds.data();
  a.scales = ss.data();
  a.sources = static_cast<int64_t>(ds.size());
  a.factor = static_cast<float>(factor);
  a.numel = numel;
  a.block = block;
  a.data_out = as_ptr<void>(out_data);
  a.scales_out = as_ptr<float>(out_scales);
  a.residual = as_ptr<float>(residual);
  a.stochastic = stochastic;
  a.seed = seed;
  a.decoded_out = as_ptr<float>(decoded_out);
  py::gil_scoped_release nogil;
  NvtxScope range(kName, numel * int64_t(sizeof(float)), -1);
  kKernel(a);
}

void sign_compress_entry(uintptr_t x, int x_dtype, int64_t numel, int64_t block, uintptr_t bits, uintptr_t scales,
                         uintptr_t residual, int device, uintptr_t stream) {
  require_gpu_build(device, "sign_compress");
  auto a = encode_args<SignCompressArgs>(x, x_dtype, numel, block, scales, residual, "sign_compress");
  a.bits = as_ptr<uint8_t>(bits);
  PYCOMM_RUN_KERNEL("sign_compress", numel * int64_t(dtype_size(a.x_dtype)), sign_compress_cpu, sign_compress_gpu, a,
                    device, stream);
}

void sign_decompress_entry(uintptr_t bits, uintptr_t scales, int64_t numel, int64_t block, uintptr_t out, int out_dtype,
                           bool accumulate, int device, uintptr_t stream) {
  require_gpu_build(device, "sign_decompress");
  auto a = decode_args<SignDecompressArgs>(scales, numel, block, out, out_dtype, accumulate, "sign_decompress");
  a.bits = as_ptr<const uint8_t>(bits);
  PYCOMM_RUN_KERNEL(accumulate ? "sign_decompress_accumulate" : "sign_decompress",
                    numel * int64_t(dtype_size(a.out_dtype)), sign_decompress_cpu, sign_decompress_gpu, a, device,
                    stream);
}

}  // namespace

void register_codecs(py::module_& m) {
  for (auto [name, entry, doc] :
       {std::tuple{kQuantizeInt8, &quantize_entry<int8_t, kQuantizeInt8>,
                   "q = round(v / scale) per block, scale = max|v| / 127, v = x (+ residual, then updated)"},
        std::tuple{kQuantizeInt4, &quantize_entry<uint8_t, kQuantizeInt4>,
                   "q = round(v / scale), two per byte, scale = max|v| / 7 per block, v = x (+ residual, then "
                   "updated)"}})
    m.def(name, entry, py::arg("x"), py::arg("x_dtype"), py::arg("numel"), py::arg("block"), py::arg("q"),
          py::arg("scales"), py::arg("residual"), py::arg("stochastic"), py::arg("seed"), py::arg("device"),
          py::arg("stream"), doc);
  for (auto [name, entry] : {std::pair{kDequantizeInt8, &dequantize_entry<int8_t, kDequantizeInt8>},
                             std::pair{kDequantizeInt4, &dequantize_entry<uint8_t, kDequantizeInt4>}})
    m.def(name, entry, py::arg("q"), py::arg("scales"), py::arg("numel"), py::arg("block"), py::arg("out"),
          py::arg("out_dtype"), py::arg("accumulate"), py::arg("device"), py::arg("stream"), "out (+)= q * scale");
  for (auto [name, entry] :
       {std::pair{kReduceQuantize, &reduce_encode_entry<reduce_quantize_int8_cpu, kReduceQuantize>},
        std::pair{kReduceQuantizeInt4, &reduce_encode_entry<reduce_quantize_int4_cpu, kReduceQuantizeInt4>},
        std::pair{kReduceSign, &reduce_encode_entry<reduce_sign_compress_cpu, kReduceSign>}})
    m.def(name, entry, py::arg("own"), py::arg("own_numel"), py::arg("own_residual"), py::arg("data"),
          py::arg("scales"), py::arg("factor"), py::arg("numel"), py::arg("block"), py::arg("out_data"),
          py::arg("out_scales"), py::arg("residual"), py::arg("stochastic"), py::arg("seed"), py::arg("decoded_out"),
          "encode((own (+ own_residual) + sum of the sources' decodes) * factor) in one pass per block (CPU); "
          "decoded_out (optional): the decode of the own elements' encoding");
  m.def("sign_compress", &sign_compress_entry, py::arg("x"), py::arg("x_dtype"), py::arg("numel"), py::arg("block"),
        py::arg("bits"), py::arg("scales"), py::arg("residual"), py::arg("device"), py::arg("stream"),
        "bits = (v >= 0), scale = mean|v| per block, v = x (+ residual, then updated)");
  m.def("sign_decompress", &sign_decompress_entry, py::arg("bits"), py::arg("scales"), py::arg("numel"),
        py::arg("block"), py::arg("out"), py::arg("out_dtype"), py::arg("accumulate"), py::arg("device"),
        py::arg("stream"), "out (+)= (bit ? scale : -scale)");
}

}  // namespace pycomm::bind
