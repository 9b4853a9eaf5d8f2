#include "diagnostics/op_validation.h"

#include <stdexcept>
#include <string>

namespace pycomm {
namespace {

void check_buffer(const Buffer& b, const char* op, const char* arg) {
  if (b.count < 0) throw std::invalid_argument(std::string(op) + ": " + arg + " has a negative element count");
  if (b.count > 0 && b.ptr == nullptr)
    throw std::invalid_argument(std::string(op) + ": " + arg + " has a null data pointer");
}

void check_pair(const Buffer& out, const Buffer& in, const char* op) {
  check_buffer(out, op, "out");
  check_buffer(in, op, "tensor");
  if (out.dtype != in.dtype)
    throw std::invalid_argument(std::string(op) + ": out has dtype " + dtype_name(out.dtype) + " but tensor has " +
                                dtype_name(in.dtype) + "; they must match");
  if (out.device != in.device)
    throw std::invalid_argument(std::string(op) + ": out and tensor must be on the same device");
}

void check_reduction(ReduceOp op, DType dtype, const char* what) {
  int code = static_cast<int>(op);
  if (code < 0 || code > static_cast<int>(ReduceOp::MIN))
    throw std::invalid_argument(std::string(what) + ": unknown reduce op " + std::to_string(code) +
                                "; expected SUM, AVG, MAX or MIN");
  if (op == ReduceOp::AVG && !is_floating(dtype))
    throw std::invalid_argument(std::string(what) + ": AVG needs a floating dtype, got " + dtype_name(dtype) +
                                " (use SUM and divide, choosing the rounding you want)");
}

OpInfo base(const char* name, const Buffer& b) {
  OpInfo info;
  info.name = name;
  info.count = b.count;
  info.dtype = b.dtype;
  info.bytes = b.bytes();
  return info;
}

}  // namespace

OpInfo allreduce_info(const Buffer& buf, ReduceOp op, int size, int bucket) {
  check_buffer(buf, "allreduce", "tensor");
  check_reduction(op, buf.dtype, "allreduce");
  OpInfo info = base("allreduce", buf);
  info.redop = static_cast<int>(op);
  info.bucket = bucket;
  info.bus_factor = bus_factor("allreduce", size);
  return info;
}

OpInfo broadcast_info(const Buffer& buf, int root, int size) {
  check_buffer(buf, "broadcast", "tensor");
  if (root < 0 || root >= size)
    throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is out of range [0, " +
                                std::to_string(size) + ")");
  OpInfo info = base("broadcast", buf);
  info.peer = root;
  info.bus_factor = bus_factor("broadcast", size);
  return info;
}

OpInfo allgather_info(const Buffer& out, const Buffer& in, int size) {
  check_pair(out, in, "allgather");
  if (out.count != in.count * size)
    throw std::invalid_argument("allgather: out has " + std::to_string(out.count) + " elements; expected size * " +
                                "tensor.numel() = " + std::to_string(in.count * size));
  OpInfo info = base("allgather", in);
  info.bytes = out.bytes();
  info.bus_factor = bus_factor("allgather", size);
  return info;
}

OpInfo reduce_scatter_info(const Buffer& out, const Buffer& in, ReduceOp op, int size) {
  check_pair(out, in, "reduce_scatter");
  check_reduction(op, in.dtype, "reduce_scatter");
  if (in.count != out.count * size)
    throw std::invalid_argument("reduce_scatter: tensor has " + std::to_string(in.count) +
                                " elements; expected size * out.numel() = " + std::to_string(out.count * size));
  OpInfo info = base("reduce_scatter", in);
  info.redop = static_cast<int>(op);
  info.bus_factor = bus_factor("reduce_scatter", size);
  return info;
}

OpInfo alltoall_info(const Buffer& out, const Buffer& in, int size) {
  check_pair(out, in, "alltoall");
  if (out.count != in.count)
    throw std::invalid_argument("alltoall: out has " + std::to_string(out.count) + " elements but tensor has " +
                                std::to_string(in.count) + "; they must match");
  if (in.count % size != 0)
    throw std::invalid_argument("alltoall: tensor has " + std::to_string(in.count) +
                                " elements, not divisible by the communicator size " + std::to_string(size));
  OpInfo info = base("alltoall", in);
  info.bus_factor = bus_factor("alltoall", size);
  return info;
}

OpInfo p2p_info(const char* name, const Buffer& buf, int peer, int tag, int size, int max_tag) {
  check_buffer(buf, name, "tensor");
  const bool send = std::string(name) == "send";
  const bool any = !send && peer == kAnySource;  // receives may take any source
  if (!any && (peer < 0 || peer >= size))
    throw std::invalid_argument(std::string(name) + ": " + (send ? "dst " : "src ") + std::to_string(peer) +
                                " is out of range [0, " + std::to_string(size) + ")" +
                                (send ? "" : " (or ANY_SOURCE, -1)"));
  if (tag < 0 || tag > max_tag)
    throw std::invalid_argument(std::string(name) + ": tag must be in [0, " + std::to_string(max_tag) +
                                "] (the transport's largest tag), got " + std::to_string(tag));
  OpInfo info = base(name, buf);
  info.peer = peer;
  info.tag = tag;
  info.collective = false;
  info.bus_factor = bus_factor(name, size);
  return info;
}

OpInfo barrier_info() {
  OpInfo info;
  info.name = "barrier";
  info.bus_factor = bus_factor("barrier", 1);
  return info;
}

OpInfo match_info(const std::string& name, const Buffer& buf, ReduceOp op) {
  if (name != "allreduce_quantized" && name != "allreduce_coalesced")
    throw std::invalid_argument("match: unknown compound op '" + name +
                                "'; expected allreduce_quantized or allreduce_coalesced");
  if (buf.count < 0) throw std::invalid_argument(name + ": negative element count " + std::to_string(buf.count));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::MIN))
    throw std::invalid_argument(name + ": unknown reduce op " + std::to_string(static_cast<int>(op)));
  OpInfo info = base(name.c_str(), buf);
  info.redop = static_cast<int>(op);
  info.bus_factor = bus_factor(name, 1);  // 0: moves no data itself
  return info;
}

OpInfo split_info(const char* name) {
  OpInfo info;
  info.name = name;
  info.bus_factor = bus_factor(name, 1);
  return info;
}

}  // namespace pycomm
