#include "base/reduce.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {
namespace {

// ---- A deliberately plain reference: one element at a time, sources in index order. ----

enum class RefAccum { kNative, kFp16, kFp32, kFp64 };

template <typename T>
T getAs(const void* buf, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void putAs(void* buf, size_t i, T v) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));
}

// Float ops: NaN from either side wins (the earlier one if both); ties keep the earlier value.
template <typename F>
F refFloatOp(loomRedOp_t op, F a, F b) {
  switch (op) {
    case loomSum:
      return a + b;
    case loomProd:
      return a * b;
    default:
      break;
  }
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (op == loomMax) return b > a ? b : a;
  return b < a ? b : a;
}

template <typename T>
T refIntOp(loomRedOp_t op, T a, T b) {
  // Wrapping arithmetic done in 64 bits and truncated, which is the same modulo 2^bits.
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case loomSum:
      return static_cast<T>(ua + ub);
    case loomProd:
      return static_cast<T>(ua * ub);
    case loomMax:
      return std::max(a, b);
    default:
      return std::min(a, b);
  }
}

float narrowToFloat(loomDataType_t t, const void* buf, size_t i) {
  switch (t) {
    case loomFloat16:
      return halfToFloat(getAs<uint16_t>(buf, i));
    case loomBfloat16:
      return bf16ToFloat(getAs<uint16_t>(buf, i));
    case loomFloat8e4m3:
      return e4m3ToFloat(getAs<uint8_t>(buf, i));
    case loomFloat8e5m2:
      return e5m2ToFloat(getAs<uint8_t>(buf, i));
    default:
      return e4m3b15ToFloat(getAs<uint8_t>(buf, i));
  }
}

void floatToNarrow(loomDataType_t t, void* buf, size_t i, float f) {
  switch (t) {
    case loomFloat16:
      return putAs(buf, i, floatToHalf(f));
    case loomBfloat16:
      return putAs(buf, i, floatToBf16(f));
    case loomFloat8e4m3:
      return putAs(buf, i, floatToE4m3(f));
    case loomFloat8e5m2:
      return putAs(buf, i, floatToE5m2(f));
    default:
      return putAs(buf, i, floatToE4m3b15(f));
  }
}

// The nearest value of type t (t narrow).
float roundTo(loomDataType_t t, float f) {
  uint8_t tmp[2];
  floatToNarrow(t, tmp, 0, f);
  return narrowToFloat(t, tmp, 0);
}

template <typename T>
void refInt(void* dst, const std::vector<const void*>& srcs, size_t i, loomRedOp_t op,
            int divisor) {
  T acc = getAs<T>(srcs[0], i);
  for (size_t k = 1; k < srcs.size(); ++k) acc = refIntOp(op, acc, getAs<T>(srcs[k], i));
  if (divisor != 1) acc = static_cast<T>(acc / divisor);  // C++ integer division
  putAs(dst, i, acc);
}

template <typename F>
void refWide(void* dst, const std::vector<const void*>& srcs, size_t i, loomRedOp_t op,
             int divisor) {
  F acc = getAs<F>(srcs[0], i);
  for (size_t k = 1; k < srcs.size(); ++k) acc = refFloatOp(op, acc, getAs<F>(srcs[k], i));
  if (divisor != 1) acc = acc / static_cast<F>(divisor);
  putAs(dst, i, acc);
}

void refNarrow(void* dst, const std::vector<const void*>& srcs, size_t i, loomDataType_t t,
               loomRedOp_t op, RefAccum accum, int divisor) {
  if (accum == RefAccum::kFp64) {
    double acc = narrowToFloat(t, srcs[0], i);
    for (size_t k = 1; k < srcs.size(); ++k) {
      acc = refFloatOp<double>(op, acc, narrowToFloat(t, srcs[k], i));
    }
    if (divisor != 1) acc /= divisor;
    storeFromDouble(dst, i, t, acc);  // one rounding, checked in dtype_test
    return;
  }
  // The value is kept in float and rounded to the accumulation type after every step.
  auto step = [&](float v) {
    if (accum == RefAccum::kNative) return roundTo(t, v);
    if (accum == RefAccum::kFp16) return halfToFloat(floatToHalf(v));
    return v;
  };
  float acc = step(narrowToFloat(t, srcs[0], i));
  for (size_t k = 1; k < srcs.size(); ++k) {
    acc = step(refFloatOp(op, acc, narrowToFloat(t, srcs[k], i)));
  }
  if (divisor != 1) acc = step(acc / static_cast<float>(divisor));
  floatToNarrow(t, dst, i, acc);
}

void reference(void* dst, const std::vector<const void*>& srcs, size_t count, loomDataType_t t,
               loomRedOp_t op, RefAccum accum, int divisor) {
  const size_t size = dtypeSize(t);
  if (srcs.size() == 1 && divisor == 1) {
    std::memcpy(dst, srcs[0], count * size);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case loomInt8:
        refInt<int8_t>(dst, srcs, i, op, divisor);
        break;
      case loomUint8:
        refInt<uint8_t>(dst, srcs, i, op, divisor);
        break;
      case loomInt32:
        refInt<int32_t>(dst, srcs, i, op, divisor);
        break;
      case loomUint32:
        refInt<uint32_t>(dst, srcs, i, op, divisor);
        break;
      case loomInt64:
        refInt<int64_t>(dst, srcs, i, op, divisor);
        break;
      case loomUint64:
        refInt<uint64_t>(dst, srcs, i, op, divisor);
        break;
      case loomFloat32:
        refWide<float>(dst, srcs, i, op, divisor);
        break;
      case loomFloat64:
        refWide<double>(dst, srcs, i, op, divisor);
        break;
      default:
        refNarrow(dst, srcs, i, t, op, accum, divisor);
        break;
    }
  }
}

// ---- Inputs and comparison ----

// Random values spread over many binades, subnormals included, so that sums round often.
void fillRandom(void* buf, size_t count, loomDataType_t t, std::mt19937_64& rng) {
  if (!dtypeIsFloat(t)) {
    for (size_t i = 0; i < count * dtypeSize(t); ++i) {
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(rng());
    }
    return;
  }
  int lo = -10, hi = 10;
  switch (t) {
    case loomFloat16:
      lo = -26, hi = 4;
      break;
    case loomBfloat16:
      lo = -30, hi = 4;
      break;
    case loomFloat8e4m3:
      lo = -10, hi = 4;
      break;
    case loomFloat8e5m2:
      lo = -17, hi = 4;
      break;
    case loomFloat8e4m3b15:
      lo = -18, hi = 1;
      break;
    default:
      break;
  }
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> exp(lo, hi);
  for (size_t i = 0; i < count; ++i) {
    storeFromDouble(buf, i, t, rng() % 50 == 0 ? 0.0 : std::ldexp(mant(rng), exp(rng)));
  }
}

bool isNanAt(const void* buf, size_t i, loomDataType_t t) {
  return dtypeIsFloat(t) && t != loomFloat8e4m3b15 && std::isnan(loadAsDouble(buf, i, t));
}

// Bit-for-bit, except that any NaN matches any NaN (payloads are not specified).
::testing::AssertionResult sameBits(const void* want, const void* got, size_t count,
                                    loomDataType_t t) {
  const size_t size = dtypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    const char* w = static_cast<const char*>(want) + i * size;
    const char* g = static_cast<const char*>(got) + i * size;
    if (std::memcmp(w, g, size) == 0) continue;
    if (isNanAt(want, i, t) && isNanAt(got, i, t)) continue;
    return ::testing::AssertionFailure() << "element " << i << ": want " << loadAsDouble(want, i, t)
                                         << " got " << loadAsDouble(got, i, t);
  }
  return ::testing::AssertionSuccess();
}

RefAccum refAccumFor(loomDataType_t t, int accum) {
  if (!dtypeIsNarrowFloat(t) || accum < 0 || accum == t) return RefAccum::kNative;
  if (accum == loomFloat16) return RefAccum::kFp16;
  if (accum == loomFloat32) return RefAccum::kFp32;
  return RefAccum::kFp64;
}

enum class Alias { kNone, kFirst, kLast };

// Runs reduceManyAndScale on random data and compares with the reference.
void checkCase(loomDataType_t t, loomRedOp_t op, int nsrc, size_t count, int accum, Alias alias,
               int divisor, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << dtypeName(t) << " " << opName(op) << " nsrc=" << nsrc
                                    << " count=" << count << " accum=" << accum << " alias="
                                    << static_cast<int>(alias) << " divisor=" << divisor);
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::vector<char>> data(nsrc, std::vector<char>(bytes + 1));
  std::vector<const void*> srcs;
  for (auto& d : data) {
    fillRandom(d.data(), count, t, rng);
    srcs.push_back(d.data());
  }
  std::vector<char> want(bytes + 1);
  reference(want.data(), srcs, count, t, op, refAccumFor(t, accum), divisor);

  std::vector<char> separate(bytes + 1, 0x5a);
  void* dst = separate.data();
  if (alias == Alias::kFirst) dst = data[0].data();
  if (alias == Alias::kLast) dst = data[nsrc - 1].data();
  if (divisor == 1) {
    reduceMany(dst, srcs.data(), nsrc, count, t, op, accum);
  } else {
    reduceManyAndScale(dst, srcs.data(), nsrc, count, t, op, accum, divisor);
  }
  ASSERT_TRUE(sameBits(want.data(), dst, count, t));
  // Nothing past the end was written.
  ASSERT_EQ(static_cast<char*>(dst)[bytes], alias == Alias::kNone ? 0x5a : 0);
}

class ReduceAllTypes : public ::testing::TestWithParam<int> {
 protected:
  loomDataType_t dtype() const { return static_cast<loomDataType_t>(GetParam()); }
};

TEST_P(ReduceAllTypes, MatchesReference) {
  std::mt19937_64 rng(1234 + GetParam());
  for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
    for (int nsrc : {1, 2, 3, 4, 5, 6, 7, 8}) {
      for (size_t count : {0, 1, 7, 1000, 4099}) {
        for (int accum : {-1, static_cast<int>(loomFloat32)}) {
          for (Alias alias : {Alias::kNone, Alias::kFirst, Alias::kLast}) {
            checkCase(dtype(), op, nsrc, count, accum, alias, 1, rng);
          }
        }
      }
    }
  }
}

TEST_P(ReduceAllTypes, OtherAccumulators) {
  std::mt19937_64 rng(99 + GetParam());
  for (int accum : {static_cast<int>(loomFloat16), static_cast<int>(loomFloat64), GetParam()}) {
    for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
      for (int nsrc : {2, 3, 8}) {
        checkCase(dtype(), op, nsrc, 4099, accum, Alias::kNone, 1, rng);
        checkCase(dtype(), op, nsrc, 1000, accum, Alias::kFirst, 3, rng);
      }
    }
  }
}

TEST_P(ReduceAllTypes, ScaleMatchesReference) {
  std::mt19937_64 rng(7 + GetParam());
  for (int accum : {-1, static_cast<int>(loomFloat32), static_cast<int>(loomFloat64)}) {
    for (int divisor : {1, 2, 3, 7, 64, 1000003}) {
      for (int nsrc : {1, 2, 3, 8}) {
        for (size_t count : {0, 7, 4099}) {
          checkCase(dtype(), loomSum, nsrc, count, accum, Alias::kNone, divisor, rng);
          checkCase(dtype(), loomSum, nsrc, count, accum, Alias::kFirst, divisor, rng);
        }
      }
      checkCase(dtype(), loomMax, 3, 1000, accum, Alias::kLast, divisor, rng);
    }
  }
}

// Native accumulation: scaling in one pass equals reduceMany followed by divideInPlace.
TEST_P(ReduceAllTypes, ScaleEqualsReduceThenDivide) {
  std::mt19937_64 rng(5 + GetParam());
  const size_t count = 4099, bytes = count * dtypeSize(dtype());
  for (int divisor : {2, 3, 8}) {
    for (int nsrc : {1, 2, 5}) {
      std::vector<std::vector<char>> data(nsrc, std::vector<char>(bytes));
      std::vector<const void*> srcs;
      for (auto& d : data) {
        fillRandom(d.data(), count, dtype(), rng);
        srcs.push_back(d.data());
      }
      std::vector<char> twoPass(bytes), onePass(bytes);
      reduceMany(twoPass.data(), srcs.data(), nsrc, count, dtype(), loomSum, -1);
      divideInPlace(twoPass.data(), count, dtype(), divisor);
      reduceManyAndScale(onePass.data(), srcs.data(), nsrc, count, dtype(), loomSum, -1, divisor);
      ASSERT_TRUE(sameBits(twoPass.data(), onePass.data(), count, dtype()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, ReduceAllTypes, ::testing::Range(0, static_cast<int>(loomNumTypes)),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(dtypeName(static_cast<loomDataType_t>(info.param)));
                         });

void checkNanPropagation(loomDataType_t t) {
  std::mt19937_64 rng(3);
  const size_t count = 2000;
  const int nsrc = 4;
  std::vector<std::vector<char>> data(nsrc, std::vector<char>(count * dtypeSize(t)));
  std::vector<const void*> srcs;
  for (auto& d : data) {
    fillRandom(d.data(), count, t, rng);
    srcs.push_back(d.data());
  }
  // A NaN in one source (a different one for different elements) at every 7th element.
  for (size_t i = 0; i < count; i += 7) storeFromDouble(data[i % nsrc].data(), i, t, NAN);
  for (int accum : {-1, static_cast<int>(loomFloat32), static_cast<int>(loomFloat64)}) {
    for (loomRedOp_t op : {loomMax, loomMin}) {
      std::vector<char> want(count * dtypeSize(t)), got(count * dtypeSize(t));
      reference(want.data(), srcs, count, t, op, refAccumFor(t, accum), 1);
      reduceMany(got.data(), srcs.data(), nsrc, count, t, op, accum);
      EXPECT_TRUE(sameBits(want.data(), got.data(), count, t));
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(isNanAt(got.data(), i, t), i % 7 == 0) << opName(op) << " element " << i;
      }
    }
  }
}

TEST(Reduce, NanPropagatesThroughMaxAndMin) {
  for (loomDataType_t t :
       {loomFloat16, loomFloat32, loomFloat64, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2}) {
    SCOPED_TRACE(dtypeName(t));
    checkNanPropagation(t);
  }
}

// Every pair of fp8 codes (NaNs included) through every op, native and fp32 accumulation, and
// scaled: covers every rounding case of the fp8 step and final roundings.
TEST(Reduce, AllFp8Pairs) {
  std::vector<uint8_t> a(65536), b(65536), want(65536), got(65536);
  for (size_t i = 0; i < 65536; ++i) {
    a[i] = static_cast<uint8_t>(i);
    b[i] = static_cast<uint8_t>(i >> 8);
  }
  const std::vector<const void*> srcs = {a.data(), b.data()};
  for (loomDataType_t t : {loomFloat8e4m3, loomFloat8e5m2, loomFloat8e4m3b15}) {
    for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
      for (int accum : {-1, static_cast<int>(loomFloat16), static_cast<int>(loomFloat32)}) {
        for (int divisor : {1, 3}) {
          SCOPED_TRACE(::testing::Message() << dtypeName(t) << " " << opName(op)
                                            << " accum=" << accum << " divisor=" << divisor);
          reference(want.data(), srcs, 65536, t, op, refAccumFor(t, accum), divisor);
          reduceManyAndScale(got.data(), srcs.data(), 2, 65536, t, op, accum, divisor);
          ASSERT_TRUE(sameBits(want.data(), got.data(), 65536, t));
        }
      }
    }
  }
}

TEST(Reduce, HalfNativeSumIsPairwiseRounding) {
  // 2048 + 1 + 1 in fp16: each step rounds 2049 back to 2048 (ties to even), while float
  // accumulation gives 2050.
  const uint16_t a[] = {floatToHalf(2048.0f)}, b[] = {floatToHalf(1.0f)};
  const void* srcs[] = {a, b, b};
  uint16_t out;
  reduceMany(&out, srcs, 3, 1, loomFloat16, loomSum, -1);
  EXPECT_EQ(halfToFloat(out), 2048.0f);
  reduceMany(&out, srcs, 3, 1, loomFloat16, loomSum, loomFloat32);
  EXPECT_EQ(halfToFloat(out), 2050.0f);
}

TEST(Reduce, SignedZeroTiesKeepTheEarlierValue) {
  const float pz[] = {0.0f}, nz[] = {-0.0f};
  const void* srcs[] = {nz, pz};
  float out;
  reduceMany(&out, srcs, 2, 1, loomFloat32, loomMax, -1);
  EXPECT_TRUE(std::signbit(out));
  reduceMany(&out, srcs, 2, 1, loomFloat32, loomMin, -1);
  EXPECT_TRUE(std::signbit(out));
}

TEST(Reduce, IntegerWrapAndDivision) {
  const int8_t a[] = {127, -128, -7, 7}, b[] = {1, -1, 0, 0};
  const void* srcs[] = {a, b};
  int8_t out[4];
  reduceMany(out, srcs, 2, 4, loomInt8, loomSum, -1);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  divideInPlace(out, 4, loomInt8, 2);
  EXPECT_EQ(out[0], -64);
  EXPECT_EQ(out[2], -3);  // truncation toward zero
  EXPECT_EQ(out[3], 3);

  int32_t big[] = {INT32_MIN, INT32_MAX, -1};
  divideInPlace(big, 3, loomInt32, 3);
  EXPECT_EQ(big[0], INT32_MIN / 3);
  EXPECT_EQ(big[1], INT32_MAX / 3);
  EXPECT_EQ(big[2], 0);
  uint64_t u[] = {~0ull, 5};
  divideInPlace(u, 2, loomUint64, 2);
  EXPECT_EQ(u[0], ~0ull / 2);
  EXPECT_EQ(u[1], 2u);
  uint32_t u32[] = {~0u};
  divideInPlace(u32, 1, loomUint32, 7);
  EXPECT_EQ(u32[0], ~0u / 7);
}

TEST(Reduce, InvalidArguments) {
  float x[4] = {};
  const void* srcs[] = {x, x};
  auto expectInvalid = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), loomInvalidArgument);
    }
  };
  expectInvalid([&] { reduceMany(x, srcs, 2, 4, loomFloat32, loomAvg, -1); });
  expectInvalid([&] { reduceMany(x, srcs, 0, 4, loomFloat32, loomSum, -1); });
  expectInvalid([&] { reduceMany(x, srcs, 2, 4, static_cast<loomDataType_t>(13), loomSum, -1); });
  expectInvalid([&] { reduceMany(x, srcs, 2, 4, loomFloat16, loomSum, loomInt32); });
  expectInvalid([&] { reduceMany(x, srcs, 2, 4, loomBfloat16, loomSum, 42); });
  expectInvalid([&] { divideInPlace(x, 4, loomFloat32, 0); });
  expectInvalid([&] { reduceManyAndScale(x, srcs, 2, 4, loomFloat32, loomSum, -1, -2); });
  // accum is ignored for types that are not narrow floats.
  reduceMany(x, srcs, 2, 4, loomFloat32, loomSum, loomInt32);
  reduceMany(x, srcs, 2, 4, loomInt64, loomSum, 42);
  // count 0 touches nothing, even through null pointers.
  reduceMany(nullptr, srcs, 2, 0, loomFloat32, loomSum, -1);
}

}  // namespace
}  // namespace loom
