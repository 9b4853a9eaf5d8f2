#include "diagnostics/nvtx.h"

#include <string>

namespace pycomm {

#ifdef PYCOMM_WITH_NVTX
namespace {

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("pycomm");
  return d;
}

nvtxEventAttributes_t attributes(const std::string& message, const OpInfo& info) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message.c_str();  // NVTX copies the string during the call
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = info.bytes;
  return a;
}

std::string label(const char* prefix, const OpInfo& info) {
  std::string s = prefix;
  s += info.name + " #" + std::to_string(info.seq) + " " + std::to_string(info.bytes) + "B";
  if (info.bucket >= 0) s += " bucket " + std::to_string(info.bucket);
  return s;
}

}  // namespace

NvtxOpRange::NvtxOpRange(const OpInfo& info) {
  std::string msg = label("", info);
  nvtxEventAttributes_t a = attributes(msg, info);
  id_ = nvtxDomainRangeStartEx(domain(), &a);
}
NvtxOpRange::~NvtxOpRange() { nvtxDomainRangeEnd(domain(), id_); }

NvtxScope::NvtxScope(const char* what, const OpInfo& info) {
  std::string msg = label(what, info);
  nvtxEventAttributes_t a = attributes(msg, info);
  nvtxDomainRangePushEx(domain(), &a);
}
NvtxScope::~NvtxScope() { nvtxDomainRangePop(domain()); }
#else
NvtxOpRange::NvtxOpRange(const OpInfo&) {}
NvtxOpRange::~NvtxOpRange() {}
NvtxScope::NvtxScope(const char*, const OpInfo&) {}
NvtxScope::~NvtxScope() {}
#endif

}  // namespace pycomm
