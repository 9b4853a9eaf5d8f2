// PYCOMM_DEBUG=1 op matching: before a collective starts, every rank shares the signature of the op
// it is about to run (kind, count, dtype, root, reduce op); a difference raises MismatchError on
// every rank naming both ranks' ops. The exchange itself is the transport's (MPI: an allgather on
// a shadow communicator, so it never interleaves with user ops).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "transport/transport.h"

namespace pycomm {

constexpr int kSignatureLen = 6;
using OpSignature = std::array<int64_t, kSignatureLen>;

bool debug_checks_enabled();  // PYCOMM_DEBUG is set to a non-empty value other than 0
OpSignature op_signature(const OpInfo& info);
// `all` holds size signatures, rank by rank. Throws MismatchError if one differs from my_rank's.
void check_signatures(const int64_t* all, int size, int my_rank, const std::string& comm_label);

}  // namespace pycomm
