// The result check of loom-bench: deterministic inputs that every rank can regenerate for every
// other rank, and an independent double-precision model of what each op must produce.
//
// Inputs are small multiples of a per-type unit, chosen so that every partial result of the
// reduction is exactly representable in the type, whatever order the library reduces in and
// whatever type it accumulates in. The check can then demand exact equality, so any wrong
// element is a real bug and not a rounding difference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench_options.hpp"
#include "loom/loom.h"

namespace loom::bench {

// The value of element `index` of rank `rank`'s input for one (type, reduction, rank count).
class InputGenerator {
 public:
  InputGenerator(loomDataType_t dtype, loomRedOp_t redop, bool reduces, int nranks);

  double value(int rank, size_t index) const;
  // The exact result of reducing element `index` over all ranks, before rounding to the type
  // (integer avg is already truncated toward zero).
  double reduced(size_t index) const;
  // Writes elements [first, first + elems) of rank's input to buf[0..elems).
  void fill(int rank, size_t first, size_t elems, void* buf) const;

 private:
  enum class Pattern { kSpread, kSum, kSparseSum, kAvgFloat, kProd };

  double avgFloatValue(int rank, size_t index) const;
  double prodValue(int rank, size_t index) const;

  loomDataType_t dtype_;
  loomRedOp_t redop_;
  int nranks_;
  Pattern pattern_;
  uint64_t salt_;
  double unit_;        // every value is a multiple of this
  bool unsigned_;      // values stay >= 0
  int64_t magnitude_;  // values (avg: bases) lie in [-magnitude_, magnitude_] units
  int64_t avgDelta_;   // avg: the cancelling deltas lie in [-avgDelta_, avgDelta_] units
  int64_t stride_;     // sparse patterns: one rank (or pair) in stride_ contributes
  double prodBig_;     // the factor other than +-1 in products
  int prodMaxBig_;     // at most this many such factors per element
};

// Fills buf[0..elems) with a value the op can never produce for this type, so that an element
// the library forgot to write is counted as wrong.
void fillPoison(loomDataType_t dtype, void* buf, size_t elems);

struct CheckSpec {
  BenchOp op = BenchOp::kAllReduce;
  loomDataType_t dtype = loomFloat;
  loomRedOp_t redop = loomSum;
  int nranks = 1;
  int root = 0;
  size_t count = 0;  // the count argument of the call, see CallShape
};

// Fills this rank's send buffer (CallShape::sendElems elements) with its input.
void fillSendInput(const CheckSpec& spec, int rank, void* send);
// Number of elements of this rank's receive buffer that differ from the expected result;
// ranks whose buffer the op leaves undefined (non-roots of reduce and gather) count none.
int64_t countWrong(const CheckSpec& spec, int rank, const void* recv);

}  // namespace loom::bench
