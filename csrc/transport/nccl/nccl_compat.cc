#include "transport/nccl/nccl_compat.h"

#include <stdexcept>

namespace pycomm::nccl {

ncclDataType_t datatype(DType t, const char* what) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
#if PYCOMM_NCCL_HAS_AVG_BF16
      return ncclBfloat16;
#else
      throw std::invalid_argument(std::string(what) + ": bfloat16 needs NCCL >= 2.10; this build has " +
                                  library_version());
#endif
    case DType::I8:
      return ncclInt8;
    case DType::U8:
      return ncclUint8;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
  }
  throw std::invalid_argument(std::string(what) + ": unknown dtype");
}

ncclRedOp_t redop(ReduceOp op, const char* what) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::MAX:
      return ncclMax;
    case ReduceOp::MIN:
      return ncclMin;
    case ReduceOp::AVG:
#if PYCOMM_NCCL_HAS_AVG_BF16
      return ncclAvg;
#else
      throw std::invalid_argument(std::string(what) + ": AVG needs NCCL >= 2.10; this build has " + library_version());
#endif
  }
  throw std::invalid_argument(std::string(what) + ": unknown reduce op");
}

std::string library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (unknown version)";
  // Codes are X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  int major = v >= 10000 ? v / 10000 : v / 1000;
  int rest = v >= 10000 ? v % 10000 : v % 1000;
  return "NCCL " + std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

}  // namespace pycomm::nccl
