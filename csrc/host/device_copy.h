// Byte copies between buffers of one device (host memory, or one GPU after the caller's stream has
// produced the source), used where a transport moves data without a network.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pycomm {

// Synchronous: when it returns, dst holds the bytes. device < 0: host memory.
void copy_bytes(void* dst, const void* src, size_t bytes, int device, uintptr_t stream);

}  // namespace pycomm
