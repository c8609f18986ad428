#include "base/coll_args.hpp"

#include <algorithm>

#include "base/dtype.hpp"

namespace loom {

CallExtents callExtents(const CollArgs& a, int rank, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  const size_t es = dtypeSize(a.dtype);
  const size_t bytes = a.count * es;
  const bool isRoot = rank == a.root;
  switch (a.func) {
    case loomFuncAllReduce:
      return {bytes, bytes};
    case loomFuncBroadcast:
      return {isRoot ? bytes : 0, bytes};
    case loomFuncReduce:
      return {bytes, isRoot ? bytes : 0};
    case loomFuncAllGather:
      return {bytes, bytes * n};
    case loomFuncGather:
      return {bytes, isRoot ? bytes * n : 0};
    case loomFuncReduceScatter:
      return {bytes * n, bytes};
    case loomFuncScatter:
      return {isRoot ? bytes * n : 0, bytes};
    case loomFuncAllToAll:
      return {bytes * n, bytes * n};
    case loomFuncAllToAllv: {
      CallExtents e;
      for (size_t i = 0; i < n; ++i) {
        if (a.sendCounts[i] > 0)
          e.sendBytes = std::max(e.sendBytes, (a.sendDispls[i] + a.sendCounts[i]) * es);
        if (a.recvCounts[i] > 0)
          e.recvBytes = std::max(e.recvBytes, (a.recvDispls[i] + a.recvCounts[i]) * es);
      }
      return e;
    }
    default:
      return {};
  }
}

}  // namespace loom
