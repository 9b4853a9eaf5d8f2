// Multi-tensor pack / unpack between many tensors and one flat bucket, with an optional scale
// (AVG divides by the world size here) and a dtype cast (fp32 <-> bf16/fp16 on the wire), in one pass.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/segments.h"

namespace pycomm {

struct PackArgs {
  std::vector<Segment> segs;
  DType tensor_dtype = DType::F32;
  void* bucket = nullptr;
  DType bucket_dtype = DType::F32;
  double scale = 1.0;
};

// bucket[offset + j] = cast(tensor[j] * scale)
void pack_cpu(const PackArgs& a);
// tensor[j] = cast(bucket[offset + j] * scale)
void unpack_cpu(const PackArgs& a);

#ifdef PYCOMM_WITH_GPU
void pack_gpu(const PackArgs& a, int device, uintptr_t stream);
void unpack_gpu(const PackArgs& a, int device, uintptr_t stream);
#endif

// Shared by both back ends: a same-dtype, unscaled copy works for any dtype; anything else needs
// floating types on both sides.
void check_pack_dtypes(const PackArgs& a, const char* what);
inline bool is_plain_copy(const PackArgs& a) { return a.tensor_dtype == a.bucket_dtype && a.scale == 1.0; }

}  // namespace pycomm
