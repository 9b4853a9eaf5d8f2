#include "diagnostics/op_check.h"

#include <cstring>

#include "common/errors.h"
#include "common/settings.h"

namespace pycomm {
namespace {

// Op kinds travel as an index into this table (a name cannot go through an integer allgather).
// The last two are the compound ops of pycomm/quantized.py and pycomm/fusion.py, matched as one op
// on their communicator so that a mismatch names what the user called.
const char* const kKinds[] = {"allreduce",
                              "broadcast",
                              "allgather",
                              "reduce_scatter",
                              "alltoall",
                              "barrier",
                              "split",
                              "split_shared",
                              "send",
                              "recv",
                              "allreduce_quantized",
                              "allreduce_coalesced",
                              "dup"};
constexpr int kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);

// Signature fields, in order.
enum Field { kKind, kCount, kDtype, kPeer, kRedop, kBytes, kSeq };

bool valid_dtype(int64_t code) { return code >= 0 && code <= static_cast<int64_t>(DType::I64); }

OpInfo from_signature(const int64_t* s) {
  OpInfo info;
  info.name = op_kind_name(s[kKind]);
  info.count = s[kCount];
  info.dtype = valid_dtype(s[kDtype]) ? static_cast<DType>(s[kDtype]) : DType::U8;
  info.peer = static_cast<int>(s[kPeer]);
  info.redop = static_cast<int>(s[kRedop]);
  info.bytes = s[kBytes];
  info.seq = static_cast<uint64_t>(s[kSeq]);
  return info;
}

// What differs between two signatures, most fundamental first ("sizes differ: 40 vs 48 bytes").
std::string difference(const int64_t* mine, const int64_t* theirs) {
  if (mine[kKind] != theirs[kKind]) return "the ops differ";
  if (mine[kBytes] != theirs[kBytes])
    return "sizes differ: " + std::to_string(mine[kBytes]) + " vs " + std::to_string(theirs[kBytes]) + " bytes";
  if (mine[kDtype] != theirs[kDtype]) return "dtypes differ";
  if (mine[kCount] != theirs[kCount]) return "element counts differ";
  if (mine[kRedop] != theirs[kRedop]) return "reduce ops differ";
  return "roots differ";
}

}  // namespace

int64_t op_kind_code(const std::string& name) {
  for (int i = 0; i < kNumKinds; ++i)
    if (name == kKinds[i]) return i;
  return kNumKinds;  // unknown kinds still compare equal to themselves
}

const char* op_kind_name(int64_t code) { return code >= 0 && code < kNumKinds ? kKinds[code] : "unknown op"; }

bool debug_checks_enabled() { return settings().debug; }

OpSignature op_signature(const OpInfo& info) {
  return {
      op_kind_code(info.name),       info.count, static_cast<int64_t>(info.dtype), info.peer, info.redop, info.bytes,
      static_cast<int64_t>(info.seq)};
}

void check_signatures(const int64_t* all, int size, int my_rank, const std::string& comm_label) {
  const int64_t* mine = all + static_cast<int64_t>(my_rank) * kSignatureLen;
  for (int r = 0; r < size; ++r) {
    const int64_t* theirs = all + static_cast<int64_t>(r) * kSignatureLen;
    // The sequence number (last field) is reported but not compared: send/recv count there too.
    if (std::memcmp(mine, theirs, (kSignatureLen - 1) * sizeof(int64_t)) == 0) continue;
    throw MismatchError("ranks submitted different collectives on the " + comm_label + " (" + difference(mine, theirs) +
                        "): rank " + std::to_string(my_rank) + " submitted " + from_signature(mine).describe() +
                        " but rank " + std::to_string(r) + " submitted " + from_signature(theirs).describe() +
                        ". No data was exchanged; the communicator is now broken.");
  }
}

}  // namespace pycomm
