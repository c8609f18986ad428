// loom-hetero-bench's collectives (hetero_ops.hpp). Inputs, with p(i) = i % 7 + 1:
//   reductions    rank r holds (r + 1) * p(i): the sum is nranks * (nranks + 1) / 2 * p(i)
//   broadcast     the root holds 1 + root + (i % 1009) * nranks, the others -1
//   allgather     rank r's block holds 1 + r + (j % 1009) * nranks: block r of the output
// All are integers far below 2^24, exact in float32 whatever the order of summation.
#include "hetero_ops.hpp"

#include <algorithm>
#include <iterator>

namespace loom::tool {
namespace {

constexpr const char* kNames[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter"};

float pattern(size_t i) { return static_cast<float>(i % 7 + 1); }
float gathered(int rank, size_t j, int nranks) {
  return static_cast<float>(1 + rank + static_cast<long>(j % 1009) * nranks);
}

}  // namespace

bool parseHeteroOp(const std::string& name, HeteroOp* op) {
  for (int i = 0; i < static_cast<int>(std::size(kNames)); ++i)
    if (name == kNames[i]) {
      *op = static_cast<HeteroOp>(i);
      return true;
    }
  return false;
}

const char* heteroOpName(HeteroOp op) { return kNames[static_cast<int>(op)]; }

const char* heteroOpBytes(HeteroOp op) {
  switch (op) {
    case HeteroOp::kAllGather:
      return "the gathered buffer each rank receives (nranks x sendcount x 4)";
    case HeteroOp::kReduceScatter:
      return "the buffer each rank sends (nranks x recvcount x 4)";
    default:
      return "the buffer (count x 4)";
  }
}

size_t OpShape::inputElems() const {
  return op == HeteroOp::kReduceScatter ? count * nranks : count;
}

size_t OpShape::outputElems() const { return op == HeteroOp::kAllGather ? count * nranks : count; }

size_t OpShape::bytes() const { return std::max(inputElems(), outputElems()) * sizeof(float); }

size_t OpShape::sendElems(int rank) const {
  if (op == HeteroOp::kBroadcast && rank != root) return 0;
  return inputElems();
}

size_t OpShape::recvElems(int rank) const {
  if (op == HeteroOp::kBroadcast && rank == root) return 0;
  if (op == HeteroOp::kReduce && rank != root) return 0;
  return outputElems();
}

OpShape shapeFor(HeteroOp op, size_t bytes, int nranks, int root) {
  OpShape s;
  s.op = op;
  s.nranks = nranks;
  s.root = root;
  const size_t elems = bytes / sizeof(float);
  if (op == HeteroOp::kAllGather || op == HeteroOp::kReduceScatter)
    s.count = std::max<size_t>(1, elems / nranks);
  else
    s.count = elems;
  return s;
}

loomResult_t runOp(const OpShape& s, const void* send, void* recv, loomComm_t comm,
                   loomStream_t stream) {
  switch (s.op) {
    case HeteroOp::kAllReduce:
      return loomAllReduce(send, recv, s.count, loomFloat32, loomSum, comm, stream);
    case HeteroOp::kBroadcast:
      return loomBroadcast(send, recv, s.count, loomFloat32, s.root, comm, stream);
    case HeteroOp::kReduce:
      return loomReduce(send, recv, s.count, loomFloat32, loomSum, s.root, comm, stream);
    case HeteroOp::kAllGather:
      return loomAllGather(send, recv, s.count, loomFloat32, comm, stream);
    case HeteroOp::kReduceScatter:
      return loomReduceScatter(send, recv, s.count, loomFloat32, loomSum, comm, stream);
  }
  return loomInvalidArgument;
}

void fillInput(const OpShape& s, int rank, float* in) {
  const size_t n = s.inputElems();
  for (size_t i = 0; i < n; ++i) {
    if (s.reduces())
      in[i] = static_cast<float>(rank + 1) * pattern(i);
    else if (s.op == HeteroOp::kBroadcast)
      in[i] = rank == s.root ? gathered(s.root, i, s.nranks) : -1.0f;
    else
      in[i] = gathered(rank, i, s.nranks);
  }
}

long countWrong(const OpShape& s, int rank, const float* out) {
  if (s.recvElems(rank) == 0 && !(s.op == HeteroOp::kBroadcast && rank == s.root)) return 0;
  const float total = static_cast<float>(s.nranks) * (s.nranks + 1) / 2;
  long bad = 0;
  const size_t n = s.outputElems();
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    switch (s.op) {
      case HeteroOp::kAllReduce:
      case HeteroOp::kReduce:
        want = total * pattern(i);
        break;
      case HeteroOp::kReduceScatter:
        want = total * pattern(rank * s.count + i);
        break;
      case HeteroOp::kBroadcast:
        want = gathered(s.root, i, s.nranks);
        break;
      case HeteroOp::kAllGather:
        want = gathered(static_cast<int>(i / s.count), i % s.count, s.nranks);
        break;
    }
    bad += out[i] != want;
  }
  return bad;
}

}  // namespace loom::tool
