// pycomm's own exception types. The bindings register them as pycomm.PycommError (base),
// pycomm.StallError and pycomm.MismatchError, so a transport only throws these C++ types.
#pragma once

#include <stdexcept>
#include <string>

namespace pycomm {

// Any failure of the communication runtime that is not bad input (bad input is std::invalid_argument).
class PycommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An op did not complete within PYCOMM_TIMEOUT seconds: a rank skipped, reordered or died.
class StallError : public PycommError {
 public:
  using PycommError::PycommError;
};

// PYCOMM_DEBUG=1 found ranks submitting different collectives at the same point.
class MismatchError : public PycommError {
 public:
  using PycommError::PycommError;
};

}  // namespace pycomm
