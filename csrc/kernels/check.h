// Argument checks of the kernels: a failed one throws std::invalid_argument naming the kernel,
// which pybind11 turns into a Python ValueError.
#pragma once

#include <stdexcept>
#include <string>

namespace pycomm {

inline void require(bool ok, const char* what, const std::string& msg) {
  if (!ok) throw std::invalid_argument(std::string(what) + ": " + msg);
}

}  // namespace pycomm
