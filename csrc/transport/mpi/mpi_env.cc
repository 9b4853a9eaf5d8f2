#include "transport/mpi/mpi_env.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support / MPIX_Query_rocm_support
#endif

#include "common/errors.h"
#include "common/settings.h"
#include "transport/mpi/mpi_reduce_ops.h"

namespace pycomm::mpi {
namespace {

std::mutex g_mu;
bool g_we_initialized = false;
bool g_ready = false;
std::set<Shutdownable*> g_live;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

}  // namespace

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw PycommError(std::string(what) + ": MPI error: " + std::string(msg, len));
}

void ensure_initialized() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_ready) {
    if (finalized())
      throw PycommError("MPI was finalized (pycomm.finalize() or MPI.Finalize()); it cannot be used again");
    return;
  }
  int done = 0;
  MPI_Finalized(&done);
  if (done) throw PycommError("MPI was already finalized before pycomm.init(); it cannot be initialised again");
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (inited) {
    MPI_Query_thread(&provided);
  } else {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_we_initialized = true;
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw PycommError(std::string("pycomm needs MPI_THREAD_MULTIPLE (its progress threads call MPI concurrently), "
                                  "but MPI provides ") +
                      thread_level_name(provided) +
                      (inited ? ". MPI was initialised before pycomm: let pycomm initialise it, or with mpi4py set "
                                "mpi4py.rc.thread_level = 'multiple' before `from mpi4py import MPI`."
                              : ". Use an MPI library built with thread support (Open MPI, MPICH)."));
  create_reduce_ops();
  g_ready = true;
}

bool initialized_by_pycomm() { return g_we_initialized; }

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

void register_live(Shutdownable* t) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_live.insert(t);
}

void unregister_live(Shutdownable* t) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_live.erase(t);
}

std::string finalize() {
  std::vector<Shutdownable*> live;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_ready || finalized()) return "";
    live.assign(g_live.begin(), g_live.end());
  }
  bool abandoned = false;
  for (Shutdownable* t : live) {
    t->shutdown();
    abandoned = abandoned || t->left_in_flight();
  }
  if (!g_we_initialized) return "";
  if (abandoned)
    return "MPI_Finalize skipped: a communicator still has an op in flight after a stall or failure; "
           "exit the process (os._exit) rather than waiting for its peers";
  free_reduce_ops();
  check(MPI_Finalize(), "MPI_Finalize");
  return "";
}

MPI_Datatype datatype(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::F16:
    case DType::BF16:
      return MPI_UINT16_T;  // reduced by our user ops
    case DType::I8:
      return MPI_INT8_T;
    case DType::U8:
      return MPI_UINT8_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
  }
  throw std::invalid_argument("no MPI datatype for this dtype");
}

MPI_Op reduce_op(ReduceOp op, DType t) {
  if (t == DType::F16 || t == DType::BF16) return half_reduce_op(op, t);
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return MPI_SUM;
    case ReduceOp::MAX:
      return MPI_MAX;
    case ReduceOp::MIN:
      return MPI_MIN;
  }
  throw std::invalid_argument("unknown reduce op");
}

bool gpu_aware() {
  if (int forced = settings().mpi_gpu_aware; forced >= 0) return forced == 1;
#if defined(PYCOMM_WITH_HIP) && defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1;
#elif defined(PYCOMM_WITH_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::string library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, len);
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace pycomm::mpi
