#include "runtime/op_check.h"

#include <cstdlib>
#include <cstring>

#include "runtime/errors.h"

namespace pycomm {
namespace {

// Op kinds travel as an index into this table (a name cannot go through an integer allgather).
const char* const kKinds[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall",
                              "barrier", "split", "split_shared", "send", "recv"};
constexpr int kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);

int64_t kind_code(const std::string& name) {
  for (int i = 0; i < kNumKinds; ++i)
    if (name == kKinds[i]) return i;
  return kNumKinds;  // unknown kinds still compare equal to themselves
}

OpInfo from_signature(const int64_t* s) {
  OpInfo info;
  info.name = s[0] >= 0 && s[0] < kNumKinds ? kKinds[s[0]] : "unknown op";
  info.count = s[1];
  info.dtype = static_cast<DType>(s[2]);
  info.peer = static_cast<int>(s[3]);
  info.redop = static_cast<int>(s[4]);
  info.seq = static_cast<uint64_t>(s[5]);
  info.bytes = s[1] * static_cast<int64_t>(dtype_size(info.dtype));
  return info;
}

}  // namespace

bool debug_checks_enabled() {
  const char* v = std::getenv("PYCOMM_DEBUG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

OpSignature op_signature(const OpInfo& info) {
  return {kind_code(info.name), info.count, static_cast<int64_t>(info.dtype), info.peer, info.redop,
          static_cast<int64_t>(info.seq)};
}

void check_signatures(const int64_t* all, int size, int my_rank, const std::string& comm_label) {
  const int64_t* mine = all + static_cast<int64_t>(my_rank) * kSignatureLen;
  for (int r = 0; r < size; ++r) {
    const int64_t* theirs = all + static_cast<int64_t>(r) * kSignatureLen;
    // The sequence number (last field) is reported but not compared: send/recv count there too.
    if (std::memcmp(mine, theirs, (kSignatureLen - 1) * sizeof(int64_t)) == 0) continue;
    throw MismatchError("PYCOMM_DEBUG: ranks submitted different collectives on the " + comm_label + ": rank " +
                        std::to_string(my_rank) + " submitted " + from_signature(mine).describe() + " but rank " +
                        std::to_string(r) + " submitted " + from_signature(theirs).describe());
  }
}

}  // namespace pycomm
