#include "base/dtype.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/error.hpp"

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace loom {
namespace {

// An independent description of each narrow format, used to compute expected values with
// double arithmetic (ldexp / nearbyint) instead of bit tricks.
struct Format {
  const char* name;
  int mantBits;
  int minExp;  // exponent of the smallest normal
  double maxFinite;
  bool saturates;  // overflow clamps to maxFinite instead of going to inf
  int codes;       // 256 or 65536
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
};

const Format kFormats[] = {
    {"half", 10, -14, 65504.0, false, 65536, [](uint32_t c) { return halfToFloat(c); },
     [](float f) -> uint32_t { return floatToHalf(f); }},
    {"bfloat16", 7, -126, std::ldexp(255.0, 120), false, 65536,
     [](uint32_t c) { return bf16ToFloat(c); }, [](float f) -> uint32_t { return floatToBf16(f); }},
    {"fp8e4m3", 3, -6, 448.0, true, 256, [](uint32_t c) { return e4m3ToFloat(c); },
     [](float f) -> uint32_t { return floatToE4m3(f); }},
    {"fp8e5m2", 2, -14, 57344.0, false, 256, [](uint32_t c) { return e5m2ToFloat(c); },
     [](float f) -> uint32_t { return floatToE5m2(f); }},
    {"fp8e4m3b15", 3, -14, 1.875, true, 256, [](uint32_t c) { return e4m3b15ToFloat(c); },
     [](float f) -> uint32_t { return floatToE4m3b15(f); }},
};

// The value a correct round-to-nearest-even conversion of x must produce.
double expectedRounding(const Format& fmt, double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return fmt.saturates ? std::copysign(fmt.maxFinite, x) : x;
  if (x == 0) return x;
  const int exp = std::max(std::ilogb(x), fmt.minExp);
  const double step = std::ldexp(1.0, exp - fmt.mantBits);
  double r = std::nearbyint(x / step) * step;  // default rounding mode: ties to even
  if (std::fabs(r) > fmt.maxFinite) {
    r = fmt.saturates ? std::copysign(fmt.maxFinite, x) : std::copysign(INFINITY, x);
  }
  // A result of zero keeps the sign of x.
  return r == 0 ? std::copysign(0.0, x) : r;
}

void checkRounding(const Format& fmt, float x) {
  const uint32_t code = fmt.encode(x);
  const float got = fmt.decode(code);
  if (std::isnan(x)) {
    if (fmt.name == std::string("fp8e4m3b15")) {
      ASSERT_EQ(code, 0u) << fmt.name;
    } else {
      ASSERT_TRUE(std::isnan(got)) << fmt.name;
    }
    return;
  }
  const double want = expectedRounding(fmt, x);
  ASSERT_TRUE(got == want && std::signbit(got) == std::signbit(want))
      << fmt.name << ": x=" << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << std::dec
      << ") got " << got << " want " << want;
}

TEST(DtypeInfo, SizesNamesAndValidity) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1, 1};
  for (int t = 0; t < loomNumTypes; ++t) {
    const auto type = static_cast<loomDataType_t>(t);
    EXPECT_EQ(dtypeSize(type), sizes[t]);
    EXPECT_TRUE(dtypeValid(t));
    ASSERT_TRUE(dtypeFromName(dtypeName(type)).has_value()) << dtypeName(type);
    EXPECT_EQ(*dtypeFromName(dtypeName(type)), type);
    EXPECT_EQ(dtypeIsFloat(type), t >= loomFloat16) << t;
    EXPECT_EQ(dtypeIsNarrowFloat(type), dtypeIsFloat(type) && t != loomFloat && t != loomDouble);
  }
  EXPECT_STREQ(dtypeName(loomHalf), "half");
  EXPECT_STREQ(dtypeName(loomBfloat16), "bfloat16");
  EXPECT_STREQ(dtypeName(loomFloat8e4m3b15), "fp8e4m3b15");
  EXPECT_STREQ(dtypeName(static_cast<loomDataType_t>(99)), "unknown");
  EXPECT_FALSE(dtypeValid(-1));
  EXPECT_FALSE(dtypeValid(loomNumTypes));
  EXPECT_FALSE(dtypeIsFloat(static_cast<loomDataType_t>(loomNumTypes)));
  try {
    dtypeSize(static_cast<loomDataType_t>(loomNumTypes));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
  }
}

TEST(DtypeInfo, Aliases) {
  EXPECT_EQ(dtypeFromName("float32"), loomFloat32);
  EXPECT_EQ(dtypeFromName("fp32"), loomFloat32);
  EXPECT_EQ(dtypeFromName("float16"), loomFloat16);
  EXPECT_EQ(dtypeFromName("fp16"), loomFloat16);
  EXPECT_EQ(dtypeFromName("bf16"), loomBfloat16);
  EXPECT_EQ(dtypeFromName("float64"), loomFloat64);
  EXPECT_EQ(dtypeFromName("fp64"), loomFloat64);
  EXPECT_EQ(dtypeFromName("int"), loomInt32);
  EXPECT_EQ(dtypeFromName("char"), loomInt8);
  EXPECT_EQ(dtypeFromName("FP32"), loomFloat32);
  EXPECT_FALSE(dtypeFromName("").has_value());
  EXPECT_FALSE(dtypeFromName("float8").has_value());
  EXPECT_FALSE(dtypeFromName("int3").has_value());
}

TEST(DtypeInfo, Ops) {
  const char* names[] = {"sum", "prod", "max", "min", "avg"};
  for (int op = 0; op < loomNumOps; ++op) {
    EXPECT_TRUE(opValid(op));
    EXPECT_STREQ(opName(static_cast<loomRedOp_t>(op)), names[op]);
    EXPECT_EQ(opFromName(names[op]), static_cast<loomRedOp_t>(op));
  }
  EXPECT_FALSE(opValid(-1));
  EXPECT_FALSE(opValid(loomNumOps));
  EXPECT_STREQ(opName(static_cast<loomRedOp_t>(7)), "unknown");
  EXPECT_FALSE(opFromName("mean").has_value());
}

TEST(Conversions, HalfAndBf16RoundTripAllCodes) {
  for (const Format& fmt : {kFormats[0], kFormats[1]}) {
    for (uint32_t c = 0; c < 65536; ++c) {
      const float f = fmt.decode(c);
      const uint32_t back = fmt.encode(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(fmt.decode(back))) << fmt.name << " " << c;
      } else {
        ASSERT_EQ(back, c) << fmt.name;
      }
    }
  }
}

TEST(Conversions, DecodeMatchesFieldFormula) {
  // {format, exponent bits, bias}
  struct Layout {
    const Format* fmt;
    int expBits;
    int bias;
  };
  const Layout layouts[] = {{&kFormats[0], 5, 15},
                            {&kFormats[1], 8, 127},
                            {&kFormats[2], 4, 7},
                            {&kFormats[3], 5, 15},
                            {&kFormats[4], 4, 15}};
  for (const Layout& l : layouts) {
    const int mant = l.fmt->mantBits;
    const int total = 1 + l.expBits + mant;
    for (uint32_t c = 0; c < static_cast<uint32_t>(l.fmt->codes); ++c) {
      const bool neg = (c >> (total - 1)) & 1;
      const int e = (c >> mant) & ((1 << l.expBits) - 1);
      const int m = c & ((1 << mant) - 1);
      const float got = l.fmt->decode(c);
      const bool allOnesExp = e == (1 << l.expBits) - 1;
      if (allOnesExp && l.fmt->codes == 65536) {
        ASSERT_EQ(std::isnan(got), m != 0) << l.fmt->name << " " << c;
        if (m == 0) {
          ASSERT_TRUE(std::isinf(got));
        }
        continue;
      }
      if (l.fmt == &kFormats[3] && allOnesExp) {
        ASSERT_EQ(std::isnan(got), m != 0);
        if (m == 0) {
          ASSERT_EQ(got, neg ? -INFINITY : INFINITY);
        }
        continue;
      }
      if (l.fmt == &kFormats[2] && allOnesExp && m == 7) {
        ASSERT_TRUE(std::isnan(got));
        continue;
      }
      double v = e == 0 ? std::ldexp(m, 1 - l.bias - mant)
                        : std::ldexp(m + (1 << mant), e - l.bias - mant);
      if (neg) v = -v;
      ASSERT_EQ(got, v) << l.fmt->name << " code " << c;
      ASSERT_EQ(std::signbit(got), neg);
    }
  }
}

TEST(Conversions, Fp8RoundTripAllCodes) {
  for (int i = 2; i < 5; ++i) {
    const Format& fmt = kFormats[i];
    for (uint32_t c = 0; c < 256; ++c) {
      const float f = fmt.decode(c);
      if (std::isnan(f)) {
        EXPECT_TRUE(std::isnan(fmt.decode(fmt.encode(f)))) << fmt.name << " " << c;
      } else {
        EXPECT_EQ(fmt.encode(f), c) << fmt.name;
      }
    }
  }
  for (uint32_t c = 0; c < 256; ++c) EXPECT_FALSE(std::isnan(e4m3b15ToFloat(c))) << c;
  for (uint32_t c = 0; c < 256; ++c) EXPECT_FALSE(std::isinf(e4m3b15ToFloat(c))) << c;
}

TEST(Conversions, ArithmeticFp8DecodeMatchesTables) {
  for (uint32_t c = 0; c < 256; ++c) {
    const auto v = static_cast<uint8_t>(c);
    EXPECT_EQ(std::bit_cast<uint32_t>(detail::decodeFp8Arith<detail::Fp8Kind::kE4m3>(v)),
              std::bit_cast<uint32_t>(e4m3ToFloat(v)));
    EXPECT_EQ(std::bit_cast<uint32_t>(detail::decodeFp8Arith<detail::Fp8Kind::kE5m2>(v)),
              std::bit_cast<uint32_t>(e5m2ToFloat(v)));
    EXPECT_EQ(std::bit_cast<uint32_t>(detail::decodeFp8Arith<detail::Fp8Kind::kE4m3b15>(v)),
              std::bit_cast<uint32_t>(e4m3b15ToFloat(v)));
  }
}

TEST(Conversions, KnownValues) {
  EXPECT_EQ(floatToE4m3(448.0f), 0x7e);
  EXPECT_EQ(e4m3ToFloat(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0xff)));
  EXPECT_EQ(floatToE4m3(449.0f), 0x7e);
  EXPECT_EQ(floatToE4m3(1e9f), 0x7e);
  EXPECT_EQ(floatToE4m3(-1e9f), 0xfe);
  EXPECT_EQ(floatToE4m3(INFINITY), 0x7e);
  EXPECT_EQ(floatToE4m3(-INFINITY), 0xfe);
  EXPECT_EQ(floatToE4m3(NAN), 0x7f);
  EXPECT_EQ(e4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(floatToE4m3(std::ldexp(1.0f, -10)), 0x00);  // tie with 0 -> even (0)
  EXPECT_EQ(floatToE4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(floatToE4m3(-0.0f), 0x80);

  EXPECT_EQ(e5m2ToFloat(0x7b), 57344.0f);
  EXPECT_EQ(floatToE5m2(57344.0f), 0x7b);
  EXPECT_EQ(e5m2ToFloat(0x7c), INFINITY);
  EXPECT_EQ(e5m2ToFloat(0xfc), -INFINITY);
  EXPECT_EQ(floatToE5m2(INFINITY), 0x7c);
  EXPECT_EQ(floatToE5m2(61439.0f), 0x7b);  // below the midpoint 61440
  EXPECT_EQ(floatToE5m2(61440.0f), 0x7c);  // the midpoint rounds to the even code: inf
  EXPECT_EQ(floatToE5m2(1e9f), 0x7c);
  EXPECT_TRUE(std::isnan(e5m2ToFloat(floatToE5m2(NAN))));
  EXPECT_EQ(e5m2ToFloat(0x01), std::ldexp(1.0f, -16));

  EXPECT_EQ(e4m3b15ToFloat(0x7f), 1.875f);
  EXPECT_EQ(floatToE4m3b15(1.875f), 0x7f);
  EXPECT_EQ(floatToE4m3b15(3.0f), 0x7f);
  EXPECT_EQ(floatToE4m3b15(-3.0f), 0xff);
  EXPECT_EQ(floatToE4m3b15(INFINITY), 0x7f);
  EXPECT_EQ(floatToE4m3b15(NAN), 0x00);
  EXPECT_EQ(floatToE4m3b15(-NAN), 0x00);
  EXPECT_EQ(e4m3b15ToFloat(0x01), std::ldexp(1.0f, -17));
  EXPECT_EQ(e4m3b15ToFloat(0x07), 7 * std::ldexp(1.0f, -17));
  EXPECT_EQ(e4m3b15ToFloat(0x08), std::ldexp(1.0f, -14));
  EXPECT_EQ(floatToE4m3b15(std::ldexp(1.0f, -18)), 0x00);  // tie -> even
  EXPECT_EQ(floatToE4m3b15(std::ldexp(3.0f, -18)), 0x02);  // tie 1.5 ulp -> 2
  EXPECT_EQ(e4m3b15ToFloat(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3b15ToFloat(0x80)));

  // fp16 ties at 1: the step is 2^-10.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // 1 + 2^-9
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(1023.5f, -24)), 0x0400);  // carries into the normals
  EXPECT_EQ(halfToFloat(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
  EXPECT_EQ(halfToFloat(0x7c00), INFINITY);
  EXPECT_EQ(floatToHalf(NAN) & 0x7e00, 0x7e00);

  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(bf16ToFloat(0x7f80), INFINITY);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(Conversions, MidpointsAndNeighbours) {
  // Every midpoint between adjacent codes, and the floats on either side of it.
  for (const Format& fmt : kFormats) {
    const uint32_t signBit = fmt.codes == 256 ? 0x80 : 0x8000;
    for (uint32_t c = 0; c + 1 < signBit; ++c) {
      const double lo = fmt.decode(c), hi = fmt.decode(c + 1);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(lo) || std::isinf(hi)) continue;
      for (double s : {1.0, -1.0}) {
        const float mid = static_cast<float>(s * (lo + hi) / 2);
        ASSERT_EQ(static_cast<double>(mid), s * (lo + hi) / 2);  // the midpoint is exact
        checkRounding(fmt, mid);
        checkRounding(fmt, std::nextafter(mid, INFINITY));
        checkRounding(fmt, std::nextafter(mid, -INFINITY));
        checkRounding(fmt, static_cast<float>(s * lo));
      }
    }
    // Just past the largest finite value.
    const float max = static_cast<float>(fmt.maxFinite);
    for (float f = max; f < max * 4; f = std::nextafter(f * 1.001f, INFINITY)) {
      checkRounding(fmt, f);
      checkRounding(fmt, -f);
    }
  }
}

TEST(Conversions, StridedSweepOfAllFloats) {
  // A prime stride visits every exponent and many mantissa patterns, NaNs and infs included.
  for (const Format& fmt : kFormats) {
    for (uint64_t u = 0; u <= 0xffffffffull; u += 2039)
      checkRounding(fmt, std::bit_cast<float>(static_cast<uint32_t>(u)));
  }
}

#ifdef __F16C__
TEST(Conversions, ScalarHalfMatchesF16c) {
  std::mt19937 rng(1);
  for (int i = 0; i < 1 << 20; ++i) {
    const uint32_t u = rng();
    const float f = std::bit_cast<float>(u);
    const uint16_t hw = _mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), 0), 0);
    ASSERT_EQ(floatToHalf(f), hw) << std::hex << u;
    const float back = _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(u))));
    const float mine = halfToFloat(static_cast<uint16_t>(u));
    ASSERT_TRUE(std::bit_cast<uint32_t>(back) == std::bit_cast<uint32_t>(mine) ||
                (std::isnan(back) && std::isnan(mine)))
        << std::hex << (u & 0xffff);
  }
}
#endif

TEST(Buffers, LoadAndStore) {
  std::vector<char> buf(64);
  storeFromDouble(buf.data(), 1, loomInt8, 300.0);
  EXPECT_EQ(loadAsDouble(buf.data(), 1, loomInt8), 127.0);
  storeFromDouble(buf.data(), 1, loomInt8, -2.9);
  EXPECT_EQ(loadAsDouble(buf.data(), 1, loomInt8), -2.0);
  storeFromDouble(buf.data(), 2, loomUint8, -5.0);
  EXPECT_EQ(loadAsDouble(buf.data(), 2, loomUint8), 0.0);
  storeFromDouble(buf.data(), 1, loomInt32, NAN);
  EXPECT_EQ(loadAsDouble(buf.data(), 1, loomInt32), 0.0);
  storeFromDouble(buf.data(), 1, loomInt64, 1e30);
  int64_t i64;
  std::memcpy(&i64, buf.data() + 8, 8);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
  storeFromDouble(buf.data(), 1, loomUint64, 1e30);
  uint64_t u64;
  std::memcpy(&u64, buf.data() + 8, 8);
  EXPECT_EQ(u64, std::numeric_limits<uint64_t>::max());
  storeFromDouble(buf.data(), 1, loomUint32, 4294967295.0);
  EXPECT_EQ(loadAsDouble(buf.data(), 1, loomUint32), 4294967295.0);
  storeFromDouble(buf.data(), 3, loomFloat64, 0.1);
  EXPECT_EQ(loadAsDouble(buf.data(), 3, loomFloat64), 0.1);
  storeFromDouble(buf.data(), 3, loomFloat32, 0.1);
  EXPECT_EQ(loadAsDouble(buf.data(), 3, loomFloat32), static_cast<double>(0.1f));

  // Narrow types round once from the double: 1 + 2^-11 + 2^-40 is just above an fp16 tie,
  // which going through float first (losing 2^-40) would round down.
  storeFromDouble(buf.data(), 0, loomFloat16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(loadAsDouble(buf.data(), 0, loomFloat16), 1.0 + std::ldexp(1.0, -10));
  storeFromDouble(buf.data(), 0, loomBfloat16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
  EXPECT_EQ(loadAsDouble(buf.data(), 0, loomBfloat16), 1.0 + std::ldexp(1.0, -7));
  storeFromDouble(buf.data(), 0, loomFloat8e4m3, 1e300);
  EXPECT_EQ(loadAsDouble(buf.data(), 0, loomFloat8e4m3), 448.0);
  storeFromDouble(buf.data(), 0, loomFloat8e5m2, 1e-300);
  EXPECT_EQ(loadAsDouble(buf.data(), 0, loomFloat8e5m2), 0.0);
  storeFromDouble(buf.data(), 0, loomFloat8e4m3b15, -1.0);
  EXPECT_EQ(loadAsDouble(buf.data(), 0, loomFloat8e4m3b15), -1.0);
  EXPECT_THROW(loadAsDouble(buf.data(), 0, static_cast<loomDataType_t>(13)), Error);
}

TEST(Buffers, StoreRoundsOnceForRandomDoubles) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(-2.0, 2.0);
  std::uniform_int_distribution<int> exp(-30, 18);
  const loomDataType_t types[] = {loomFloat16, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2,
                                  loomFloat8e4m3b15};
  char buf[8];
  for (int i = 0; i < 200000; ++i) {
    const double v = std::ldexp(mant(rng), exp(rng));
    for (int f = 0; f < 5; ++f) {
      storeFromDouble(buf, 0, types[f], v);
      const double want = expectedRounding(kFormats[f], v);
      ASSERT_EQ(loadAsDouble(buf, 0, types[f]), want) << kFormats[f].name << " " << v;
    }
  }
}

}  // namespace
}  // namespace loom
