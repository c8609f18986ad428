// Torch tensors and options in Loom's terms: dtypes, reductions, argument checks, and the error a
// failed Loom call becomes. Shared by the CPU and CUDA halves of ProcessGroupLoom.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "loom/loom.h"

namespace loom::torchbackend {

// Raises "Backend loom does not support <what>" (torch's wording for a missing feature).
[[noreturn]] void unsupported(const std::string& what);
// Complex tensors travel as their real and imaginary parts (twice the elements of the part's type).
loomDataType_t loomType(at::ScalarType type);
size_t loomCount(const at::Tensor& t);
// Complex tensors reduce with SUM/AVG (element-wise on both parts) only, as Gloo.
void checkComplexOp(const at::Tensor& t, const c10d::ReduceOp& op, const char* what);
// PREMUL_SUM maps to a sum of inputs scaled first (premultiply).
loomRedOp_t loomOp(const c10d::ReduceOp& op);
void premultiply(at::Tensor& t, const c10d::ReduceOp& op);

// A communicator's timeout in Loom's terms (0: Loom's default).
int loomTimeoutMs(std::chrono::milliseconds timeout);

// A tensor Loom can take: dense, contiguous, a dtype Loom has; CUDA tensors only where this build
// serves them (another device's tensors are checked when its communicator is made).
void checkTensor(const at::Tensor& t, const char* what);
void checkOne(const std::vector<at::Tensor>& tensors, const char* what);
// Every tensor of one op on one device; returns it (CPU for an op without tensors).
at::Device commonDevice(const std::vector<at::Tensor>& tensors, const char* op);

// Throws (std::runtime_error) unless result is loomSuccess; the message names the op, the group
// and Loom's own words.
void call(loomResult_t result, const char* op, loomComm_t comm, const std::string& group);

}  // namespace loom::torchbackend
