// In-place x *= factor on host memory, for AVG (= SUM, then 1/size). 16-bit floats scale in fp32.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pycomm {

void scale_host(void* data, int64_t count, DType dtype, double factor);

}  // namespace pycomm
