// NCCL on CUDA builds, RCCL (same API) on HIP builds, and the mapping of pycomm's dtypes and
// reduce ops to theirs. Features by version: ncclAvg and ncclBfloat16 need NCCL >= 2.10,
// ncclCommSplit needs NCCL >= 2.18 (RCCL follows the NCCL version it tracks).
#pragma once

#include "common/gpu_compat.h"

#if defined(PYCOMM_WITH_HIP)
#include <rccl/rccl.h>
#else
#include <nccl.h>
#endif

#include <string>

#include "common/transport.h"

#define PYCOMM_NCCL_AT_LEAST(major, minor) (NCCL_VERSION_CODE >= NCCL_VERSION(major, minor, 0))
#define PYCOMM_NCCL_HAS_AVG_BF16 PYCOMM_NCCL_AT_LEAST(2, 10)
#define PYCOMM_NCCL_HAS_SPLIT PYCOMM_NCCL_AT_LEAST(2, 18)

namespace pycomm::nccl {

// Throws std::invalid_argument naming `what` for what this NCCL cannot carry.
ncclDataType_t datatype(DType t, const char* what);
ncclRedOp_t redop(ReduceOp op, const char* what);
// "NCCL 2.21.5" (the library loaded at run time, which may differ from the header's).
std::string library_version();

}  // namespace pycomm::nccl
