#include "bench_check.hpp"

#include <algorithm>
#include <cmath>

#include "base/dtype.hpp"

namespace loom::bench {
namespace {

// splitmix64's finalizer: cheap, and good enough that neighbouring (rank, index) pairs look
// unrelated, so a transposed or shifted block rarely matches by accident.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t salt, uint64_t a, uint64_t b) { return mix(salt ^ mix(a ^ mix(b))); }

// Every multiple of `unit` with at most `limit` units in magnitude is exact in the type, and
// `poison` lies beyond anything the check's inputs can produce.
struct Domain {
  double unit;
  int64_t limit;
  bool isUnsigned;
  bool isFloat;
  double poison;
};

Domain domainOf(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return {1, 100, false, false, 127};
    case loomUint8:
      return {1, 200, true, false, 255};
    case loomInt32:
      return {1, 1 << 20, false, false, 2147483647.0};
    case loomUint32:
      return {1, 1 << 20, true, false, 4294967295.0};
    case loomInt64:
      return {1, 1 << 20, false, false, 0x1p62};
    case loomUint64:
      return {1, 1 << 20, true, false, 0x1p63};
    case loomFloat16:
      return {1, 2048, false, true, 65504};  // 11 significant bits
    case loomFloat32:
      return {1, 1 << 24, false, true, 1e30};
    case loomFloat64:
      return {1, 1 << 24, false, true, 1e30};
    case loomBfloat16:
      return {1, 256, false, true, 1e30};  // 8 significant bits
    case loomFloat8e4m3:
      return {1, 16, false, true, 448};  // 4 significant bits
    case loomFloat8e5m2:
      return {1, 8, false, true, 57344};  // 3 significant bits
    // Saturates at 1.875: eighths up to 1.0 are exact and leave room for the poison.
    case loomFloat8e4m3b15:
      return {0.125, 8, false, true, 1.875};
    default:
      return {1, 1, false, false, 0};
  }
}

double roundToType(loomDataType_t dtype, double v) {
  alignas(8) unsigned char tmp[8];
  storeFromDouble(tmp, 0, dtype, v);
  return loadAsDouble(tmp, 0, dtype);
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

InputGenerator::InputGenerator(loomDataType_t dtype, loomRedOp_t redop, bool reduces, int nranks)
    : dtype_(dtype), redop_(redop), nranks_(nranks) {
  const Domain d = domainOf(dtype);
  unit_ = d.unit;
  unsigned_ = d.isUnsigned;
  stride_ = 1;
  avgDelta_ = 0;
  prodBig_ = dtype == loomFloat8e4m3b15 ? 0.5 : 2.0;
  // 2^6 keeps int8 and every fp8 exact; more factors would add nothing to the check.
  prodMaxBig_ = std::min(nranks, 6);
  salt_ = mix((static_cast<uint64_t>(dtype) << 8) | (reduces ? static_cast<uint64_t>(redop) : 15));
  const int64_t n = nranks;
  if (!reduces || redop == loomMax || redop == loomMin) {
    // Order-independent ops: use the widest exact range, to tell misplaced elements apart.
    pattern_ = Pattern::kSpread;
    magnitude_ = std::min<int64_t>(d.limit, 1 << 20);
  } else if (redop == loomProd) {
    pattern_ = Pattern::kProd;
    magnitude_ = 1;
  } else if (redop == loomAvg && d.isFloat) {
    // A float avg is exact only if the sum is a multiple of nranks; see avgFloatValue.
    // Partial sums stay within n * base + ceil(n / 2) * delta <= limit units.
    pattern_ = Pattern::kAvgFloat;
    magnitude_ = avgDelta_ = d.limit / (2 * n);
    if (magnitude_ == 0) magnitude_ = d.limit / n;  // no room for deltas
    // No room for a base either: at most ceil((n / 2) / stride) <= limit pairs contribute.
    if (magnitude_ == 0) stride_ = ceilDiv(std::max<int64_t>(n / 2, 1), d.limit);
  } else {
    // Sum, and integer avg (the truncated sum): every partial sum must stay within the limit.
    magnitude_ = std::min<int64_t>(2, d.limit / n);
    pattern_ = magnitude_ > 0 ? Pattern::kSum : Pattern::kSparseSum;
    if (magnitude_ == 0) stride_ = ceilDiv(n, d.limit);
  }
}

double InputGenerator::value(int rank, size_t index) const {
  const uint64_t h = hash(salt_, static_cast<uint64_t>(rank), index);
  switch (pattern_) {
    case Pattern::kSpread:
    case Pattern::kSum: {
      const uint64_t span = static_cast<uint64_t>(magnitude_);
      if (unsigned_) return unit_ * static_cast<double>(h % (span + 1));
      return unit_ * (static_cast<double>(h % (2 * span + 1)) - static_cast<double>(span));
    }
    case Pattern::kSparseSum: {
      // At most ceil(nranks / stride) <= limit ranks contribute a unit to each element.
      const uint64_t slot = (static_cast<uint64_t>(rank) + index) % static_cast<uint64_t>(stride_);
      if (slot != 0) return 0;
      if (unsigned_) return (h & 1) ? unit_ : 0;
      return (h & 1) ? unit_ : -unit_;
    }
    case Pattern::kAvgFloat:
      return avgFloatValue(rank, index);
    case Pattern::kProd:
      return prodValue(rank, index);
  }
  return 0;
}

// value = base(index) + delta, where the deltas of ranks 2p and 2p+1 cancel. The sum is then
// exactly nranks * base and the average exactly base, however the library divides.
double InputGenerator::avgFloatValue(int rank, size_t index) const {
  double base = 0;
  if (magnitude_ > 0) {
    const uint64_t span = static_cast<uint64_t>(magnitude_);
    base =
        static_cast<double>(hash(salt_, ~0ull, index) % (2 * span + 1)) - static_cast<double>(span);
  }
  const uint64_t pair = static_cast<uint64_t>(rank / 2);
  const bool paired = rank % 2 == 1 || rank + 1 < nranks_;
  const uint64_t hp = hash(salt_ ^ 0x5555, pair, index);
  double delta = 0;  // the last rank of an odd count has no partner and no delta
  if (paired && avgDelta_ > 0) {
    const uint64_t span = static_cast<uint64_t>(avgDelta_);
    delta = static_cast<double>(hp % (2 * span + 1)) - static_cast<double>(span);
  } else if (paired && magnitude_ == 0 && (pair + index) % static_cast<uint64_t>(stride_) == 0) {
    // Too many ranks for any non-zero base: a sparse set of pairs still moves data.
    delta = (hp & 1) ? 1 : -1;
  }
  if (rank % 2 == 1) delta = -delta;
  return unit_ * (base + delta);
}

// Factors are +-1 except for at most prodMaxBig_ ranks per element, which give prodBig_: every
// partial product is +-prodBig_^k with k <= 6, exact in every type.
double InputGenerator::prodValue(int rank, size_t index) const {
  const uint64_t hi = hash(salt_, ~0ull, index);
  const size_t bigCount = hi % static_cast<uint64_t>(prodMaxBig_ + 1);
  const size_t slot = (static_cast<size_t>(rank) + index) % static_cast<size_t>(nranks_);
  const bool positive = unsigned_ || (hash(salt_, static_cast<uint64_t>(rank), index) & 1);
  const double sign = positive ? 1.0 : -1.0;
  return slot < bigCount ? sign * prodBig_ : sign;
}

double InputGenerator::reduced(size_t index) const {
  double acc = value(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = value(r, index);
    switch (redop_) {
      case loomSum:
      case loomAvg:
        acc += v;
        break;
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
        break;
    }
  }
  if (redop_ == loomAvg) {
    if (domainOf(dtype_).isFloat) return acc / nranks_;
    return static_cast<double>(static_cast<int64_t>(acc) / nranks_);  // C truncation
  }
  return acc;
}

void InputGenerator::fill(int rank, size_t first, size_t elems, void* buf) const {
  for (size_t i = 0; i < elems; ++i) storeFromDouble(buf, i, dtype_, value(rank, first + i));
}

void fillPoison(loomDataType_t dtype, void* buf, size_t elems) {
  const double poison = domainOf(dtype).poison;
  for (size_t i = 0; i < elems; ++i) storeFromDouble(buf, i, dtype, poison);
}

void fillSendInput(const CheckSpec& spec, int rank, void* send) {
  const InputGenerator gen(spec.dtype, spec.redop, benchOpReduces(spec.op), spec.nranks);
  size_t sendElems = spec.count;
  if (spec.op == BenchOp::kReduceScatter || spec.op == BenchOp::kScatter ||
      spec.op == BenchOp::kAllToAll) {
    sendElems = spec.count * static_cast<size_t>(spec.nranks);
  }
  gen.fill(rank, 0, sendElems, send);
}

int64_t countWrong(const CheckSpec& spec, int rank, const void* recv) {
  const InputGenerator gen(spec.dtype, spec.redop, benchOpReduces(spec.op), spec.nranks);
  const size_t n = static_cast<size_t>(spec.nranks);
  const size_t count = spec.count;
  const int prev = (rank - 1 + spec.nranks) % spec.nranks;
  int64_t wrong = 0;
  auto expect = [&](size_t recvIndex, double want) {
    const double got = loadAsDouble(recv, recvIndex, spec.dtype);
    if (!(got == roundToType(spec.dtype, want))) ++wrong;
  };
  switch (spec.op) {
    case BenchOp::kAllReduce:
      for (size_t i = 0; i < count; ++i) expect(i, gen.reduced(i));
      break;
    case BenchOp::kReduce:
      if (rank != spec.root) break;
      for (size_t i = 0; i < count; ++i) expect(i, gen.reduced(i));
      break;
    case BenchOp::kReduceScatter:
      for (size_t i = 0; i < count; ++i) expect(i, gen.reduced(rank * count + i));
      break;
    case BenchOp::kBroadcast:
      for (size_t i = 0; i < count; ++i) expect(i, gen.value(spec.root, i));
      break;
    case BenchOp::kGather:
      if (rank != spec.root) break;
      [[fallthrough]];
    case BenchOp::kAllGather:
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          expect(r * count + i, gen.value(static_cast<int>(r), i));
        }
      }
      break;
    case BenchOp::kAllToAll:
      for (size_t p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          expect(p * count + i, gen.value(static_cast<int>(p), rank * count + i));
        }
      }
      break;
    case BenchOp::kScatter:
      for (size_t i = 0; i < count; ++i) expect(i, gen.value(spec.root, rank * count + i));
      break;
    case BenchOp::kSendRecv:
      for (size_t i = 0; i < count; ++i) expect(i, gen.value(prev, i));
      break;
  }
  return wrong;
}

}  // namespace loom::bench
