// Facts about Loom's data types and reduction ops, and exact scalar conversions between float and
// the narrow floating-point formats (fp16, bf16, three fp8 flavours).
//
// The conversions are inline and written with selects instead of branches so that loops over
// them auto-vectorize; reduce.cpp builds its block codecs on them, and the tests check them
// against an independent reference.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "loom/loom.h"

// The scalar conversions below also run in CUDA kernels, so GPU reductions round exactly as the
// CPU reference does.
#ifdef __CUDACC__
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

namespace loom {

size_t dtypeSize(loomDataType_t t);  // throws loomInvalidArgument for an unknown type
bool dtypeValid(int t);
bool dtypeIsFloat(loomDataType_t t);        // fp16, fp32, fp64, bf16 and the three fp8
bool dtypeIsNarrowFloat(loomDataType_t t);  // fp16, bf16 and the three fp8
const char* dtypeName(loomDataType_t t);    // nccl-tests spelling; "unknown" for invalid values
// The names above plus a few aliases ("fp32", "bf16", "int", ...), case-insensitive.
std::optional<loomDataType_t> dtypeFromName(std::string_view name);

bool opValid(int op);
const char* opName(loomRedOp_t op);  // "unknown" for invalid values
std::optional<loomRedOp_t> opFromName(std::string_view name);

// Scalar conversions. Narrowing rounds to nearest, ties to even; a NaN stays a NaN where the
// format has one. The fp8 formats:
//   e4m3 (e4m3fn): bias 7, max +-448, no inf, NaN is S.1111.111; overflow and inf saturate.
//   e5m2: bias 15, IEEE-like inf and NaN; overflow goes to inf.
//   e4m3b15: bias 15, every code finite, max +-1.875; overflow saturates, NaN becomes 0.
LOOM_HOST_DEVICE float halfToFloat(uint16_t h);
LOOM_HOST_DEVICE uint16_t floatToHalf(float f);
LOOM_HOST_DEVICE float bf16ToFloat(uint16_t b);
LOOM_HOST_DEVICE uint16_t floatToBf16(float f);
float e4m3ToFloat(uint8_t v);
LOOM_HOST_DEVICE uint8_t floatToE4m3(float f);
float e5m2ToFloat(uint8_t v);
LOOM_HOST_DEVICE uint8_t floatToE5m2(float f);
float e4m3b15ToFloat(uint8_t v);
LOOM_HOST_DEVICE uint8_t floatToE4m3b15(float f);

// Element `index` of a buffer of type t, for tests and benchmarks (slow: switches per call).
double loadAsDouble(const void* buf, size_t index, loomDataType_t t);
// Narrow floats are rounded once, directly from the double. Integers clamp to their range and
// then truncate toward zero; NaN stores as 0.
void storeFromDouble(void* buf, size_t index, loomDataType_t t, double v);

namespace detail {

LOOM_HOST_DEVICE constexpr uint32_t floatBits(float f) { return std::bit_cast<uint32_t>(f); }
LOOM_HOST_DEVICE constexpr float bitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

// c ? x : y by masks. A ternary whose arm holds a float operation becomes a branch in GCC's IR,
// the operation is sunk into it, and with -ftrapping-math (the default) the branch can then not
// be turned back into a select: the loop around it no longer vectorizes.
LOOM_HOST_DEVICE constexpr uint32_t pick(bool c, uint32_t x, uint32_t y) {
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  return (x & mask) | (y & ~mask);
}

// Rounds a non-negative float, given by its bits `a`, to the code of a format with kMant
// mantissa bits and exponent bias kBias. The result is the unsigned code before any overflow
// handling: it may exceed the format's largest finite code, and is garbage for inf/NaN.
template <int kMant, int kBias>
LOOM_HOST_DEVICE constexpr uint32_t roundMagnitude(uint32_t a) {
  constexpr int kShift = 23 - kMant;
  // Normal results: round the float bits themselves at the target's last mantissa bit (a carry
  // into the exponent is the correct result), then move the exponent to the target's bias.
  const uint32_t rounded = (a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1)) >> kShift;
  const uint32_t normal = rounded - (static_cast<uint32_t>(127 - kBias) << kMant);
  // Subnormal results: adding a power of two whose ulp is the target's subnormal step makes the
  // FPU do the round-to-nearest-even; the low bits of the sum are then the code.
  constexpr uint32_t kMagic = static_cast<uint32_t>(127 + 24 - kBias - kMant) << 23;
  const uint32_t subnormal = floatBits(bitsFloat(a) + bitsFloat(kMagic)) - kMagic;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(128 - kBias) << 23;
  return pick(a < kMinNormal, subnormal, normal);
}

// Decodes the 7 magnitude bits of a 1-e-m fp8 code that is not a special value.
template <int kMant, int kBias>
constexpr float decodeFp8Magnitude(uint32_t mag) {
  const uint32_t exp = mag >> kMant;
  const uint32_t mant = mag & ((1u << kMant) - 1);
  if (exp == 0) {
    // mant * 2^(1 - bias - kMant), exact in float.
    return static_cast<float>(mant) *
           bitsFloat(static_cast<uint32_t>(127 + 1 - kBias - kMant) << 23);
  }
  return bitsFloat(((exp + 127 - kBias) << 23) | (mant << (23 - kMant)));
}

enum class Fp8Kind { kE4m3, kE5m2, kE4m3b15 };

template <Fp8Kind kKind>
constexpr float decodeFp8(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t mag = v & 0x7f;
  float f = 0;
  if constexpr (kKind == Fp8Kind::kE4m3) {
    f = mag == 0x7f ? bitsFloat(0x7fc00000) : decodeFp8Magnitude<3, 7>(mag);
  } else if constexpr (kKind == Fp8Kind::kE5m2) {
    // Exponent 31 is inf (mantissa 0) or NaN; keep the NaN payload like the IEEE formats do.
    f = mag >= 0x7c ? bitsFloat(0x7f800000 | ((mag & 3) << 21)) : decodeFp8Magnitude<2, 15>(mag);
  } else {
    f = decodeFp8Magnitude<3, 15>(mag);
  }
  return bitsFloat(floatBits(f) | sign);
}

template <Fp8Kind kKind>
constexpr std::array<float, 256> makeFp8Table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = decodeFp8<kKind>(static_cast<uint8_t>(i));
  return table;
}

// The same decoding as the tables, by arithmetic and selects only, for block loops: a table
// lookup per element does not vectorize well (x86 has no cheap 256-entry float lookup).
template <Fp8Kind kKind>
LOOM_HOST_DEVICE inline float decodeFp8Arith(uint8_t v) {
  constexpr int kMant = kKind == Fp8Kind::kE5m2 ? 2 : 3;
  constexpr uint32_t kBias = kKind == Fp8Kind::kE4m3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t mag = v & 0x7f;
  const uint32_t normal = (mag << (23 - kMant)) + ((127 - kBias) << 23);
  // Subnormals: 2^(1-bias) * (1 + m/2^kMant) - 2^(1-bias) is exactly m * 2^(1-bias-kMant).
  const float sub = bitsFloat(normal + (1u << 23)) - bitsFloat((128 - kBias) << 23);
  uint32_t bits = pick(mag < (1u << kMant), floatBits(sub), normal);
  if constexpr (kKind == Fp8Kind::kE4m3) {
    bits = pick(mag == 0x7f, 0x7fc00000u, bits);
  } else if constexpr (kKind == Fp8Kind::kE5m2) {
    bits = pick(mag >= 0x7c, 0x7f800000u | ((mag & 3) << 21), bits);
  }
  return bitsFloat(bits | sign);
}

inline constexpr std::array<float, 256> kE4m3Table = makeFp8Table<Fp8Kind::kE4m3>();
inline constexpr std::array<float, 256> kE5m2Table = makeFp8Table<Fp8Kind::kE5m2>();
inline constexpr std::array<float, 256> kE4m3b15Table = makeFp8Table<Fp8Kind::kE4m3b15>();

// Rounds a double to float with round-to-odd: an inexact result gets its last bit set. Rounding
// that float again to any format with at least two fewer significant bits then gives the same
// result as rounding the double directly, so double -> narrow float needs no code of its own.
LOOM_HOST_DEVICE inline float doubleToFloatRoundOdd(double d) {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t u = floatBits(f);
  // Step back to the truncated value when the conversion rounded away from zero.
  const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  if (af > (d < 0 ? -d : d)) --u;
  return bitsFloat(u | 1);
}

}  // namespace detail

LOOM_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = h & 0x7fff;
  // Rebias the exponent from 15 to 127; exponent 31 (inf/NaN) must land on 255.
  uint32_t bits = (em << 13) + (112u << 23);
  bits += detail::pick(em >= 0x7c00, 112u << 23, 0);
  // Subnormals: build 2^-14 * (1 + m/1024) and subtract 2^-14, leaving m * 2^-24 exactly.
  const float sub = detail::bitsFloat((em << 13) + (113u << 23)) - detail::bitsFloat(113u << 23);
  bits = detail::pick(em < 0x400, detail::floatBits(sub), bits);
  return detail::bitsFloat(bits | sign);
}

LOOM_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  const uint32_t u = detail::floatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & 0x7fffffff;
  const uint32_t code = std::min(detail::roundMagnitude<10, 15>(a), 0x7c00u);
  // NaN: keep the top payload bits and force the quiet bit, as F16C's vcvtps2ph does.
  const uint32_t nan = 0x7e00 | ((a >> 13) & 0x3ff);
  return static_cast<uint16_t>(sign | detail::pick(a > 0x7f800000, nan, code));
}

LOOM_HOST_DEVICE inline float bf16ToFloat(uint16_t b) {
  return detail::bitsFloat(static_cast<uint32_t>(b) << 16);
}

LOOM_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  const uint32_t u = detail::floatBits(f);
  // bf16 shares float's exponent, so rounding the bits is exact for subnormals and overflow too.
  const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40;
  return static_cast<uint16_t>(detail::pick((u & 0x7fffffff) > 0x7f800000, nan, rounded));
}

inline float e4m3ToFloat(uint8_t v) { return detail::kE4m3Table[v]; }
inline float e5m2ToFloat(uint8_t v) { return detail::kE5m2Table[v]; }
inline float e4m3b15ToFloat(uint8_t v) { return detail::kE4m3b15Table[v]; }

LOOM_HOST_DEVICE inline uint8_t floatToE4m3(float f) {
  const uint32_t u = detail::floatBits(f);
  const uint32_t a = u & 0x7fffffff;
  const uint32_t code = std::min(detail::roundMagnitude<3, 7>(a), 0x7eu) | ((u >> 24) & 0x80);
  return static_cast<uint8_t>(detail::pick(a > 0x7f800000, 0x7f, code));
}

LOOM_HOST_DEVICE inline uint8_t floatToE5m2(float f) {
  const uint32_t u = detail::floatBits(f);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & 0x7fffffff;
  const uint32_t code = std::min(detail::roundMagnitude<2, 15>(a), 0x7cu);
  return static_cast<uint8_t>(sign | detail::pick(a > 0x7f800000, 0x7e | ((a >> 21) & 1), code));
}

LOOM_HOST_DEVICE inline uint8_t floatToE4m3b15(float f) {
  const uint32_t u = detail::floatBits(f);
  const uint32_t a = u & 0x7fffffff;
  const uint32_t code = std::min(detail::roundMagnitude<3, 15>(a), 0x7fu) | ((u >> 24) & 0x80);
  return static_cast<uint8_t>(detail::pick(a > 0x7f800000, 0, code));
}

}  // namespace loom
