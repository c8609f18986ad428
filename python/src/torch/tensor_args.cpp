#include "tensor_args.hpp"

#include <stdexcept>

namespace loom::torchbackend {

void unsupported(const std::string& what) {
  TORCH_CHECK(false, "Backend loom does not support ", what);
}

size_t loomCount(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * (t.is_complex() ? 2 : 1);
}

void checkComplexOp(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  if (!t.is_complex()) return;
  if (op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG ||
      op.op_ == c10d::ReduceOp::PREMUL_SUM)
    return;
  unsupported(std::string(what) + " of complex tensors with a reduction other than SUM or AVG");
}

loomDataType_t loomType(at::ScalarType type) {
  switch (type) {
    case at::kChar:
      return loomInt8;
    case at::kByte:
      return loomUint8;
    case at::kInt:
      return loomInt32;
    case at::kUInt32:
      return loomUint32;
    case at::kLong:
      return loomInt64;
    case at::kUInt64:
      return loomUint64;
    case at::kHalf:
      return loomFloat16;
    case at::kFloat:
      return loomFloat32;
    case at::kDouble:
      return loomFloat64;
    case at::kBFloat16:
      return loomBfloat16;
    case at::kFloat8_e4m3fn:
      return loomFloat8e4m3;
    case at::kFloat8_e5m2:
      return loomFloat8e5m2;
    case at::kComplexHalf:
      return loomFloat16;
    case at::kComplexFloat:
      return loomFloat32;
    case at::kComplexDouble:
      return loomFloat64;
    default:
      unsupported(std::string("dtype ") + c10::toString(type));
  }
}

loomRedOp_t loomOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return loomSum;
    case c10d::ReduceOp::AVG:
      return loomAvg;
    case c10d::ReduceOp::PRODUCT:
      return loomProd;
    case c10d::ReduceOp::MIN:
      return loomMin;
    case c10d::ReduceOp::MAX:
      return loomMax;
    default:
      unsupported("the bitwise reductions (BAND, BOR, BXOR)");
  }
}

void premultiply(at::Tensor& t, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor != nullptr, "PREMUL_SUM without a factor");
  if (factor->tensor_factor.defined()) {
    t.mul_(factor->tensor_factor);
  } else {
    t.mul_(factor->double_factor);
  }
}

int loomTimeoutMs(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 && timeout.count() < INT32_MAX ? static_cast<int>(timeout.count()) : 0;
}

void checkTensor(const at::Tensor& t, const char* what) {
#ifndef LOOM_TORCH_CUDA
  TORCH_CHECK(!t.device().is_cuda(), "ProcessGroupLoom: ", what,
              " is a CUDA tensor, and this build of loom has no CUDA support (built without nvcc "
              "or against a CPU-only torch)");
#endif
  if (t.is_sparse()) unsupported(std::string("sparse tensors in ") + what);
  TORCH_CHECK(t.is_contiguous(), "ProcessGroupLoom: ", what, " must be contiguous");
  loomType(t.scalar_type());
}

void checkOne(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "ProcessGroupLoom: ", what, " takes one tensor, got ",
              tensors.size());
  checkTensor(tensors[0], what);
}

at::Device commonDevice(const std::vector<at::Tensor>& tensors, const char* op) {
  if (tensors.empty()) return at::Device(at::kCPU);
  at::Device device = tensors[0].device();
  for (const at::Tensor& t : tensors)
    TORCH_CHECK(t.device() == device, "ProcessGroupLoom ", op,
                ": every tensor must be on one device, got ", device, " and ", t.device());
  return device;
}

void call(loomResult_t result, const char* op, loomComm_t comm, const std::string& group) {
  if (result == loomSuccess) return;
  // torch's backends word a timeout "Timed out ..." (its tests and tools match on it).
  const std::string timedOut = result == loomTimeout ? " Timed out (timeout):" : "";
  throw std::runtime_error(
      std::string("ProcessGroupLoom ") + op + (group.empty() ? "" : " on group '" + group + "'") +
      " failed (" + loomGetErrorString(result) + "):" + timedOut + " " + loomGetLastError(comm));
}

}  // namespace loom::torchbackend
