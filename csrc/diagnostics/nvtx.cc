#include "diagnostics/nvtx.h"

#include <string>

#include "common/settings.h"

#if defined(PYCOMM_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#elif defined(PYCOMM_WITH_ROCTX)
#include <roctx.h>
#endif

namespace pycomm {
namespace {

#if defined(PYCOMM_WITH_NVTX) || defined(PYCOMM_WITH_ROCTX)
std::string bytes_label(const char* prefix, const OpInfo& info) {
  std::string s = prefix;
  s += info.name + " #" + std::to_string(info.seq) + " " + std::to_string(info.bytes) + "B";
  return s;
}

std::string op_label(const OpInfo& info, const TraceComm& comm) {
  std::string s = bytes_label("", info);
  s += " count=" + std::to_string(info.count) + " " + dtype_name(info.dtype);
  if (info.redop >= 0) s += std::string(" op=") + reduce_op_name(static_cast<ReduceOp>(info.redop));
  if (info.algorithm && *info.algorithm) s += std::string(" algo=") + info.algorithm;
  s += " comm=" + std::to_string(comm.id) + " rank=" + std::to_string(comm.rank) + "/" + std::to_string(comm.size);
  if (info.peer >= 0) s += " peer=" + std::to_string(info.peer);
  if (info.bucket >= 0) s += " bucket " + std::to_string(info.bucket);
  return s;
}
#endif

#if defined(PYCOMM_WITH_NVTX)
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = [] {
    nvtxDomainHandle_t h = nvtxDomainCreateA("pycomm");
    for (auto p : {TracePhase::kQueued, TracePhase::kOpCheck, TracePhase::kWaitPeers, TracePhase::kWire})
      nvtxDomainNameCategoryA(h, 1 + static_cast<uint32_t>(p), trace_phase_name(p));
    return h;
  }();
  return d;
}

nvtxEventAttributes_t attributes(const std::string& message, int64_t bytes, uint32_t category = 0) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message.c_str();  // NVTX copies the string during the call
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = bytes;
  return a;
}

uint64_t range_start(const std::string& message, const OpInfo& info, uint32_t category) {
  nvtxEventAttributes_t a = attributes(message, info.bytes, category);
  return nvtxDomainRangeStartEx(domain(), &a);
}
void range_end(uint64_t id) { nvtxDomainRangeEnd(domain(), id); }
void range_push(const std::string& message, int64_t bytes) {
  nvtxEventAttributes_t a = attributes(message, bytes);
  nvtxDomainRangePushEx(domain(), &a);
}
void range_pop() { nvtxDomainRangePop(domain()); }
#elif defined(PYCOMM_WITH_ROCTX)
// roctx has no domains, categories or payloads: the same messages carry the facts.
uint64_t range_start(const std::string& message, const OpInfo&, uint32_t) { return roctxRangeStartA(message.c_str()); }
void range_end(uint64_t id) { roctxRangeStop(id); }
void range_push(const std::string& message, int64_t) { roctxRangePushA(message.c_str()); }
void range_pop() { roctxRangePop(); }
#endif

}  // namespace

#if defined(PYCOMM_WITH_NVTX) || defined(PYCOMM_WITH_ROCTX)
// A profiler attaches through NVTX_INJECTION64_PATH (nvtxInit.h's search; its other route, static
// injection, needs a library linked into this module; pycomm/settings.py reads the variable). Without
// one every range call is a no-op, so the ranges skip building their messages (string formatting was
// a visible share of a small op's profile).
void NvtxOpRanges::phase(const OpInfo& info, const TraceComm& comm, TracePhase phase) {
  if (!nvtx_tool_attached() && !op_open_) return;
  if (phase_open_) {
    range_end(phase_);
    phase_open_ = false;
  }
  if (phase == TracePhase::kDone || phase == TracePhase::kFailed) {
    end();
    return;
  }
  if (!op_open_) {
    op_ = range_start(op_label(info, comm), info, 0);
    op_open_ = true;
  }
  phase_ = range_start(bytes_label((std::string(trace_phase_name(phase)) + " ").c_str(), info), info,
                       1 + static_cast<uint32_t>(phase));
  phase_open_ = true;
}

void NvtxOpRanges::end() {
  if (phase_open_) range_end(phase_);
  if (op_open_) range_end(op_);
  phase_open_ = op_open_ = false;
}

NvtxScope::NvtxScope(const char* what, const OpInfo& info) : on_(nvtx_tool_attached()) {
  if (on_) range_push(bytes_label(what, info), info.bytes);
}
NvtxScope::~NvtxScope() {
  if (on_) range_pop();
}
// A kernel call: "<kernel> <bytes>B cpu|gpuN" (tests/infra/test_nvtx_ranges.py reads these).
NvtxScope::NvtxScope(const char* kernel, int64_t bytes, int device) : on_(nvtx_tool_attached()) {
  if (on_)
    range_push(std::string(kernel) + " " + std::to_string(bytes) + "B " +
                   (device < 0 ? std::string("cpu") : "gpu" + std::to_string(device)),
               bytes);
}
#else
void NvtxOpRanges::phase(const OpInfo&, const TraceComm&, TracePhase) {}
void NvtxOpRanges::end() {}
NvtxScope::NvtxScope(const char*, const OpInfo&) {}
NvtxScope::~NvtxScope() {}
NvtxScope::NvtxScope(const char*, int64_t, int) {}
#endif

}  // namespace pycomm
