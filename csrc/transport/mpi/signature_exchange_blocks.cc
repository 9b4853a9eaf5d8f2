// SignatureExchange's fused all-gather and reduce-scatter (fuse_blocks): which blocks each doubling step's
// message carries, packed and unpacked, and the data's way in from the caller's input and out to its output.
#include <cstring>

#include "transport/mpi/mpi_env.h"
#include "transport/mpi/signature_exchange.h"

namespace pycomm::mpi {
namespace {

// The blocks of rank `who`'s set at the doubling step of `mask`, in order: an all-gather's known blocks
// (who's aligned group of `mask`), a reduce-scatter's kept ones (those equal to who's below bit 2 * mask).
// A step sends its own set (all-gather) or its peer's (reduce-scatter) and receives the other.
template <typename Fn>
void for_each_block(SignatureExchange::Blocks kind, int mask, int who, int size, Fn fn) {
  if (kind == SignatureExchange::Blocks::kGather) {
    const int lo = who & ~(mask - 1);
    for (int b = lo; b < lo + mask; ++b) fn(b);
    return;
  }
  for (int b = who & (2 * mask - 1); b < size; b += 2 * mask) fn(b);
}

}  // namespace

void SignatureExchange::fuse_blocks(Blocks kind, const void* src, void* dst, int size, int64_t block_count,
                                    int64_t block_bytes, MPI_Datatype type, MPI_Op op) {
  if (kind == Blocks::kGather)
    fuse(dst, size * block_bytes, MPI_BYTE, MPI_BOR, size * block_bytes);
  else
    fuse(dst, size * block_count, type, op, size * block_bytes);
  blocks_ = kind;
  src_ = src;
  block_count_ = block_count;
  block_bytes_ = block_bytes;
}

void SignatureExchange::fill_data(int rank, int size) {
  char* data = reinterpret_cast<char*>(bufs_->out.data() + head_words(size));
  if (blocks_ == Blocks::kWhole) {
    std::memcpy(data, buf_, static_cast<size_t>(bytes_));
  } else if (blocks_ == Blocks::kScatter) {
    std::memcpy(data, src_, static_cast<size_t>(bytes_));
  } else {  // the whole buffer's OR needs zeros elsewhere; sent blocks overwrite the rest
    if (!sparse_) std::memset(data, 0, static_cast<size_t>(bytes_));
    std::memcpy(data + rank * block_bytes_, src_, static_cast<size_t>(block_bytes_));
  }
}

void SignatureExchange::deliver(int rank, int size) const {
  const char* data = reinterpret_cast<const char*>(bufs_->out.data() + head_words(size));
  if (blocks_ == Blocks::kScatter)
    std::memcpy(buf_, data + rank * block_bytes_, static_cast<size_t>(block_bytes_));
  else
    std::memcpy(buf_, data, static_cast<size_t>(bytes_));
}

int64_t SignatureExchange::phase_data_bytes(const Phase& ph, int size) const {
  if (!sparse_) return bytes_;
  return (blocks_ == Blocks::kGather ? ph.mask : size / (2 * ph.mask)) * block_bytes_;
}

void SignatureExchange::pack_blocks(const Phase& ph, int rank, int size) {
  const int64_t head = head_words(size), data = phase_data_bytes(ph, size);
  std::vector<int64_t>& msg = bufs_->packed;
  msg.resize(static_cast<size_t>(head + words_for(data)));
  std::memcpy(msg.data(), bufs_->out.data(), static_cast<size_t>(head * 8));
  msg[0] = head * 8 + data;
  const char* from = reinterpret_cast<const char*>(bufs_->out.data() + head);
  char* to = reinterpret_cast<char*>(msg.data() + head);
  for_each_block(blocks_, ph.mask, blocks_ == Blocks::kGather ? rank : ph.send_to, size, [&](int b) {
    std::memcpy(to, from + b * block_bytes_, static_cast<size_t>(block_bytes_));
    to += block_bytes_;
  });
}

void SignatureExchange::unpack_blocks(const Phase& ph, const char* data, int rank, int size) {
  char* acc = reinterpret_cast<char*>(bufs_->out.data() + head_words(size));
  for_each_block(blocks_, ph.mask, blocks_ == Blocks::kGather ? ph.recv_from : rank, size, [&](int b) {
    char* dst = acc + b * block_bytes_;
    if (blocks_ == Blocks::kGather)
      std::memcpy(dst, data, static_cast<size_t>(block_bytes_));
    else
      check(MPI_Reduce_local(data, dst, static_cast<int>(block_count_), type_, op_),
            "reduce_scatter (MPI_Reduce_local)");
    data += block_bytes_;
  });
}

}  // namespace pycomm::mpi
