#include "common/dtype.h"

#include <stdexcept>
#include <string>

namespace pycomm {

DType dtype_from_int(int code, const char* what) {
  if (code < 0 || code > static_cast<int>(DType::I64)) {
    throw std::invalid_argument(std::string(what) + ": unknown dtype code " + std::to_string(code));
  }
  return static_cast<DType>(code);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::I8:
      return "int8";
    case DType::U8:
      return "uint8";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
  }
  return "unknown";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::I8:
    case DType::U8:
      return 1;
  }
  return 0;
}

void throw_bad_dtype(const char* what, DType got, const char* expected) {
  throw std::invalid_argument(std::string(what) + ": dtype " + dtype_name(got) + " is not supported; expected " +
                              expected);
}

void require_floating(const char* what, DType t) {
  if (!is_floating(t)) throw_bad_dtype(what, t, kFloatingDtypes);
}

}  // namespace pycomm
