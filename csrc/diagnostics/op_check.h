// Op matching: before a collective moves any data, every rank shares the signature of the op it is
// about to run (kind, count, dtype, root, reduce op); a difference raises MismatchError on every
// rank, naming both ranks' ops with their sequence numbers and what differs. The MPI transport does
// this for every collective (default mode: the exchange is one 56-byte allgather on a private
// communicator, which also keeps a larger message from ever reaching a smaller buffer); the NCCL
// transport only with PYCOMM_DEBUG=1 (its exchange goes through the host before each GPU launch).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/transport.h"

namespace pycomm {

constexpr int kSignatureLen = 7;
using OpSignature = std::array<int64_t, kSignatureLen>;

bool debug_checks_enabled();  // PYCOMM_DEBUG is set to a non-empty value other than 0
// An op's name as an integer that can travel between ranks, and back ("unknown op" for a bad code).
int64_t op_kind_code(const std::string& name);
const char* op_kind_name(int64_t code);
OpSignature op_signature(const OpInfo& info);
// `all` holds size signatures, rank by rank. Throws MismatchError if one differs from my_rank's.
void check_signatures(const int64_t* all, int size, int my_rank, const std::string& comm_label);

}  // namespace pycomm
