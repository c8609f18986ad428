// Inputs for collective tests whose exact results are representable in every data type whatever
// the reduction order, so results compare bit for bit with an independent reference computed in
// double (fold in rank order, then one conversion to the data type).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/dtype.hpp"
#include "loom/loom.h"

namespace loom::test {

// Values repeat with this period so that the reference is computed once per call, not per element;
// it is prime, so no chunk or slice boundary lines up with it.
constexpr size_t kPeriod = 1021;

inline bool isUnsigned(loomDataType_t t) {
  return t == loomUint8 || t == loomUint32 || t == loomUint64;
}

// The value rank `rank` contributes at index i for a reduction `op` (sum also for non-reductions).
inline double inputValue(loomDataType_t t, loomRedOp_t op, int rank, size_t i) {
  size_t k = i % kPeriod;
  double scale = t == loomFloat8e4m3b15 ? 0.125 : 1.0;
  if (op == loomProd) {
    bool two = (k + rank) % 7 == 0;
    bool negative = !isUnsigned(t) && (k * 3 + rank) % 5 == 0;
    if (t == loomFloat8e4m3b15) return two ? 0.5 : (negative ? -1.0 : 1.0);
    return (two ? 2.0 : 1.0) * (negative ? -1.0 : 1.0);
  }
  long span = (t == loomFloat8e5m2 || t == loomFloat8e4m3b15) ? 3 : 5;  // [-1,1] or [-2,2]
  long v = static_cast<long>((rank * 7 + k * 13 + (k * k) % 11) % span);
  if (!isUnsigned(t)) v -= span / 2;
  return static_cast<double>(v) * scale;
}

inline double foldRanks(loomDataType_t t, loomRedOp_t op, int nranks, size_t i) {
  double acc = inputValue(t, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(t, op, r, i);
    switch (op) {
      case loomProd:
        acc *= v;
        break;
      case loomMax:
        acc = std::max(acc, v);
        break;
      case loomMin:
        acc = std::min(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == loomAvg) {
    if (!dtypeIsFloat(t)) return std::trunc(acc / nranks);
    if (t == loomFloat64) return acc / nranks;
    return static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks));
  }
  return acc;
}

// A periodic sequence of elements (one period encoded once), to fill inputs and check outputs
// without per-element conversions.
class Pattern {
 public:
  template <typename ValueAt>
  Pattern(loomDataType_t t, ValueAt&& valueAt) : esize_(dtypeSize(t)), period_(kPeriod * esize_) {
    for (size_t k = 0; k < kPeriod; ++k) storeFromDouble(period_.data(), k, t, valueAt(k));
  }
  static Pattern input(loomDataType_t t, loomRedOp_t op, int rank) {
    return Pattern(t, [&](size_t k) { return inputValue(t, op, rank, k); });
  }
  static Pattern reduced(loomDataType_t t, loomRedOp_t op, int nranks) {
    return Pattern(t, [&](size_t k) { return foldRanks(t, op, nranks, k); });
  }
  // Writes elements [first, first + count) of the sequence to dst.
  void fill(void* dst, size_t count, size_t first = 0) const {
    char* out = static_cast<char*>(dst);
    for (size_t i = 0; i < count;) {
      size_t k = (first + i) % kPeriod;
      size_t n = std::min(count - i, kPeriod - k);
      std::memcpy(out + i * esize_, period_.data() + k * esize_, n * esize_);
      i += n;
    }
  }
  // Index of the first element of actual that differs from [first, first + count), or -1.
  long firstMismatch(const void* actual, size_t count, size_t first = 0) const {
    const char* a = static_cast<const char*>(actual);
    for (size_t i = 0; i < count;) {
      size_t k = (first + i) % kPeriod;
      size_t n = std::min(count - i, kPeriod - k);
      if (std::memcmp(a + i * esize_, period_.data() + k * esize_, n * esize_) != 0) {
        for (size_t j = 0; j < n; ++j)
          if (std::memcmp(a + (i + j) * esize_, period_.data() + (k + j) * esize_, esize_) != 0)
            return static_cast<long>(i + j);
      }
      i += n;
    }
    return -1;
  }

 private:
  size_t esize_;
  std::vector<char> period_;
};

// Whether a reduction test runs `op` at size `n`: every op at the small sizes, sum and avg at the
// large ones (over 5000 elements). An op's elementwise code is the same at any size; what a large
// size adds is chunks and pipelines, where a chunk reduced twice or missed shows in a sum and a
// divisor applied per chunk in an average (a max or min would hide the first, a product adds
// nothing over the sum).
inline bool atLargeSize(loomRedOp_t op, size_t n) {
  return n <= 5000 || op == loomSum || op == loomAvg;
}

// One type of each element size (1, 2, 4, 8 bytes; the 2-byte one accumulates in a wider type).
// Moving data (allgather, gather, broadcast, scatter, alltoall(v)) looks at a type only for its
// size: outside the reduction kernels and the MoE token code, src/ reads dtypeSize alone, so two
// types of one size move the same bytes the same way. The data-movement tests run these four.
inline constexpr loomDataType_t kTypePerSize[] = {loomUint8, loomBfloat16, loomFloat32,
                                                  loomFloat64};

}  // namespace loom::test
