// Multi-tensor update from flat buckets, fused with the unpack (no unpacked temporaries): for tensor
// k at bucket offset off_k,
//   x_k[j] = alpha * x_k[j] + (beta * y[off_k + j] + gamma * z[off_k + j])      (z optional)
// This one kernel serves the averaging apply x += avg - snapshot (alpha = beta = 1, gamma = -1: the
// multiplications are exact, so it computes x + (avg - snapshot)), the elastic pull
// x = (1 - a) x + a c (alpha = 1 - a, beta = a, no z) and lerps x += a (y - z).
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/segments.h"

namespace pycomm {

struct BucketUpdateArgs {
  std::vector<Segment> segs;  // the tensors x_k and their bucket offsets
  DType tensor_dtype = DType::F32;
  const void* y = nullptr;  // bucket
  const void* z = nullptr;  // optional second bucket, same dtype as y
  DType bucket_dtype = DType::F32;
  double alpha = 1.0, beta = 1.0, gamma = 0.0;
};

void check_bucket_update(const BucketUpdateArgs& a, const char* what);
void bucket_update_cpu(const BucketUpdateArgs& a);

#ifdef PYCOMM_WITH_GPU
void bucket_update_gpu(const BucketUpdateArgs& a, int device, uintptr_t stream);
#endif

}  // namespace pycomm
