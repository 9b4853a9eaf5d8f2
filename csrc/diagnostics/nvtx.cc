#include "diagnostics/nvtx.h"

#include <string>

#include "common/settings.h"

namespace pycomm {

#ifdef PYCOMM_WITH_NVTX
namespace {

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("pycomm");
  return d;
}

nvtxEventAttributes_t attributes(const std::string& message, int64_t bytes) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message.c_str();  // NVTX copies the string during the call
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = bytes;
  return a;
}

std::string label(const char* prefix, const OpInfo& info) {
  std::string s = prefix;
  s += info.name + " #" + std::to_string(info.seq) + " " + std::to_string(info.bytes) + "B";
  if (info.bucket >= 0) s += " bucket " + std::to_string(info.bucket);
  return s;
}

}  // namespace

// A profiler attaches through NVTX_INJECTION64_PATH (nvtxInit.h's search; its other route, static
// injection, needs a library linked into this module; pycomm/settings.py reads the variable). Without
// one every range call is a no-op, so the ranges skip building their messages (string formatting was
// a visible share of a small op's profile).
NvtxOpRange::NvtxOpRange(const OpInfo& info) : on_(nvtx_tool_attached()) {
  if (!on_) return;
  std::string msg = label("", info);
  nvtxEventAttributes_t a = attributes(msg, info.bytes);
  id_ = nvtxDomainRangeStartEx(domain(), &a);
}
NvtxOpRange::~NvtxOpRange() {
  if (on_) nvtxDomainRangeEnd(domain(), id_);
}

NvtxScope::NvtxScope(const char* what, const OpInfo& info) : on_(nvtx_tool_attached()) {
  if (!on_) return;
  std::string msg = label(what, info);
  nvtxEventAttributes_t a = attributes(msg, info.bytes);
  nvtxDomainRangePushEx(domain(), &a);
}
NvtxScope::~NvtxScope() {
  if (on_) nvtxDomainRangePop(domain());
}

NvtxScope::NvtxScope(const char* kernel, int64_t bytes, int device) : on_(nvtx_tool_attached()) {
  if (!on_) return;
  std::string msg = std::string(kernel) + " " + std::to_string(bytes) + "B " +
                    (device < 0 ? std::string("cpu") : "gpu" + std::to_string(device));
  nvtxEventAttributes_t a = attributes(msg, bytes);
  nvtxDomainRangePushEx(domain(), &a);
}
#else
NvtxOpRange::NvtxOpRange(const OpInfo&) {}
NvtxOpRange::~NvtxOpRange() {}
NvtxScope::NvtxScope(const char*, const OpInfo&) {}
NvtxScope::~NvtxScope() {}
NvtxScope::NvtxScope(const char*, int64_t, int) {}
#endif

}  // namespace pycomm
