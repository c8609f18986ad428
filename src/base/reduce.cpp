#include "base/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "base/dtype.hpp"
#include "base/error.hpp"

// Every kernel below is a plain loop over restrict pointers, left to the auto-vectorizer. They
// are force-inlined into a caller that passes the block length as a constant for full blocks:
// GCC's -O2 cost model only vectorizes loops whose trip count it knows to be a multiple of the
// vector width, and the tail block then runs the same loop with a runtime length.
#define LOOM_INLINE inline __attribute__((always_inline))

namespace loom {
namespace {

// A block of every source and the accumulator stay in L1 while the sources are folded in.
constexpr size_t kBlockBytes = 4096;
// Elements per block of the narrow float types, which accumulate as float (or double).
constexpr size_t kNarrowBlock = 1024;

// ---- Binary ops. `a` is the running value (earlier sources), `b` the next source. ----

struct SumOp {
#ifdef __F16C__
  static LOOM_INLINE __m256 apply8(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
#endif
  template <typename T>
  static LOOM_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned arithmetic: signed overflow would be undefined, and callers expect wrapping.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
#ifdef __F16C__
  static LOOM_INLINE __m256 apply8(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
#endif
  template <typename T>
  static LOOM_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};

// Float max/min propagate a NaN from either side; on ties (+0 vs -0) the earlier value stays.
struct MaxOp {
#ifdef __F16C__
  static LOOM_INLINE __m256 apply8(__m256 a, __m256 b) {
    const __m256 takeB =
        _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    return _mm256_blendv_ps(a, b, takeB);
  }
#endif
  template <typename T>
  static LOOM_INLINE T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (b > a || b != b) ? b : a;
    } else {
      return b > a ? b : a;
    }
  }
};

struct MinOp {
#ifdef __F16C__
  static LOOM_INLINE __m256 apply8(__m256 a, __m256 b) {
    const __m256 takeB =
        _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_LT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    return _mm256_blendv_ps(a, b, takeB);
  }
#endif
  template <typename T>
  static LOOM_INLINE T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (b < a || b != b) ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
};

// True when dst shares any byte with a source; the result must then be staged through a stack
// block, since restrict-qualified kernels may not write memory they also read.
bool overlapsAnySource(const void* dst, const void* const* srcs, int nsrc, size_t bytes) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  for (int k = 0; k < nsrc; ++k) {
    const auto s = reinterpret_cast<uintptr_t>(srcs[k]);
    if (d < s + bytes && s < d + bytes) return true;
  }
  return false;
}

// ---- Native types: integers, fp32, fp64. ----

// Folding two to four sources per pass keeps the accumulator's L1 traffic low.
template <typename Op, typename T>
LOOM_INLINE void fold2(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                       size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

template <typename Op, typename T>
LOOM_INLINE void fold3(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                       const T* __restrict__ c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(Op::apply(a[i], b[i]), c[i]);
}

template <typename Op, typename T>
LOOM_INLINE void fold4(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                       const T* __restrict__ c, const T* __restrict__ d, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(Op::apply(Op::apply(a[i], b[i]), c[i]), d[i]);
}

template <typename Op, typename T>
LOOM_INLINE void accumulate1(T* __restrict__ out, const T* __restrict__ a, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(out[i], a[i]);
}

template <typename Op, typename T>
LOOM_INLINE void accumulate2(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                             size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(Op::apply(out[i], a[i]), b[i]);
}

template <typename Op, typename T>
LOOM_INLINE void accumulate3(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                             const T* __restrict__ c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(Op::apply(Op::apply(out[i], a[i]), b[i]), c[i]);
}

template <typename T>
LOOM_INLINE void divideBlock(T* __restrict__ x, size_t n, int divisor) {
  if constexpr (std::is_same_v<T, float>) {
    const float d = static_cast<float>(divisor);
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / d;
  } else if constexpr (std::is_same_v<T, double>) {
    const double d = divisor;
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / d;
  } else if constexpr (sizeof(T) <= 4) {
    // Integer division does not vectorize. For |x| < 2^32 and 0 < d < 2^31 a non-integral
    // quotient is at least 2^-33 (relative) away from an integer, far more than a double's
    // rounding error, so truncating the double quotient is exactly C++'s integer division.
    const double d = divisor;
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) / d);
  } else {
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / d;
  }
}

template <typename Op, typename T>
LOOM_INLINE void nativeBlock(T* __restrict__ out, const void* const* srcs, int nsrc, size_t off,
                             size_t n, int divisor) {
  auto src = [&](int k) { return static_cast<const T*>(srcs[k]) + off; };
  int k = std::min(nsrc, 4);
  switch (k) {
    case 1:
      std::memcpy(out, src(0), n * sizeof(T));
      break;
    case 2:
      fold2<Op>(out, src(0), src(1), n);
      break;
    case 3:
      fold3<Op>(out, src(0), src(1), src(2), n);
      break;
    default:
      fold4<Op>(out, src(0), src(1), src(2), src(3), n);
      break;
  }
  while (k < nsrc) {
    switch (std::min(nsrc - k, 3)) {
      case 1:
        accumulate1<Op>(out, src(k), n);
        k += 1;
        break;
      case 2:
        accumulate2<Op>(out, src(k), src(k + 1), n);
        k += 2;
        break;
      default:
        accumulate3<Op>(out, src(k), src(k + 1), src(k + 2), n);
        k += 3;
        break;
    }
  }
  if (divisor != 1) divideBlock(out, n, divisor);
}

template <typename Op, typename T>
void reduceNative(void* dst, const void* const* srcs, int nsrc, size_t count, int divisor) {
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  const bool staged = overlapsAnySource(dst, srcs, nsrc, count * sizeof(T));
  alignas(64) T stage[kBlock];
  T* d = static_cast<T*>(dst);
  for (size_t off = 0; off < count; off += kBlock) {
    const size_t n = std::min(kBlock, count - off);
    T* out = staged ? stage : d + off;
    if (n == kBlock) {
      nativeBlock<Op>(out, srcs, nsrc, off, kBlock, divisor);
    } else {
      nativeBlock<Op>(out, srcs, nsrc, off, n, divisor);
    }
    if (staged) std::memcpy(d + off, stage, n * sizeof(T));
  }
}

// ---- Narrow floats: block codecs between the stored type and float. ----
// Each codec has decode/encode for blocks, round() (each float replaced by the nearest value of
// the type, i.e. decode(encode(x))), roundOne() for one float, and accumulate(), the fused inner
// step acc[i] = StepRound(acc[i] op decode(src[i])) that runs once per source.

// The fp32-accumulation StepRound.
struct NoRound {
  static LOOM_INLINE void round(float*, size_t) {}
  static LOOM_INLINE float roundOne(float x) { return x; }
};

// The per-source step from scalar pieces that the compiler vectorizes. Decoding in a loop of its
// own is deliberate: as one loop nested in the loop over sources, GCC's -O3 unroll-and-jam fuses
// two sources into one body, which then fails to vectorize (10x slower).
template <typename Op, typename Codec, typename StepRound>
LOOM_INLINE void accumulateScalar(float* __restrict__ acc,
                                  const typename Codec::Storage* __restrict__ src, size_t n) {
  alignas(64) float next[kNarrowBlock];
  for (size_t i = 0; i < n; ++i) next[i] = Codec::decodeOne(src[i]);
  for (size_t i = 0; i < n; ++i) acc[i] = StepRound::roundOne(Op::apply(acc[i], next[i]));
}

struct HalfCodec {
  using Storage = uint16_t;
  static LOOM_INLINE float decodeOne(uint16_t h) { return halfToFloat(h); }
  static LOOM_INLINE float roundOne(float x) { return halfToFloat(floatToHalf(x)); }

  static LOOM_INLINE void decode(const uint16_t* __restrict__ in, float* __restrict__ out,
                                 size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8(in + i));
#endif
    for (; i < n; ++i) out[i] = halfToFloat(in[i]);
  }
  static LOOM_INLINE void encode(const float* __restrict__ in, uint16_t* __restrict__ out,
                                 size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), 0);  // 0: nearest even
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
#endif
    for (; i < n; ++i) out[i] = floatToHalf(in[i]);
  }
  static LOOM_INLINE void round(float* __restrict__ x, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, round8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; ++i) x[i] = roundOne(x[i]);
  }

  template <typename Op, typename StepRound>
  static LOOM_INLINE void accumulate(float* __restrict__ acc, const uint16_t* __restrict__ src,
                                     size_t n) {
    size_t i = 0;
#ifdef __F16C__
    constexpr bool kRound = std::is_same_v<StepRound, HalfCodec>;
    if constexpr (kRound || std::is_same_v<StepRound, NoRound>) {
      for (; i + 8 <= n; i += 8) {
        __m256 a = Op::apply8(_mm256_loadu_ps(acc + i), load8(src + i));
        if constexpr (kRound) a = round8(a);
        _mm256_storeu_ps(acc + i, a);
      }
    }
#endif
    accumulateScalar<Op, HalfCodec, StepRound>(acc + i, src + i, n - i);
  }

 private:
#ifdef __F16C__
  static LOOM_INLINE __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static LOOM_INLINE __m256 round8(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, 0)); }
#endif
};

struct Bf16Codec {
  using Storage = uint16_t;
  static LOOM_INLINE float decodeOne(uint16_t b) { return bf16ToFloat(b); }
  static LOOM_INLINE float roundOne(float x) { return bf16ToFloat(floatToBf16(x)); }

  static LOOM_INLINE void decode(const uint16_t* __restrict__ in, float* __restrict__ out,
                                 size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(in[i]);
  }
  static LOOM_INLINE void encode(const float* __restrict__ in, uint16_t* __restrict__ out,
                                 size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = floatToBf16(in[i]);
  }
  static LOOM_INLINE void round(float* __restrict__ x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = roundOne(x[i]);
  }
  template <typename Op, typename StepRound>
  static LOOM_INLINE void accumulate(float* __restrict__ acc, const uint16_t* __restrict__ src,
                                     size_t n) {
    accumulateScalar<Op, Bf16Codec, StepRound>(acc, src, n);
  }
};

template <detail::Fp8Kind kKind, uint8_t (*kEncode)(float)>
struct Fp8Codec {
  using Storage = uint8_t;
  static LOOM_INLINE float decodeOne(uint8_t v) { return detail::decodeFp8Arith<kKind>(v); }

  // decode(encode(x)) without going through the code: round the float's own bits (or, for
  // subnormal results, let an FPU add round), then apply the format's overflow and NaN rules.
  static LOOM_INLINE float roundOne(float x) {
    constexpr int kMant = kKind == detail::Fp8Kind::kE5m2 ? 2 : 3;
    constexpr uint32_t kBias = kKind == detail::Fp8Kind::kE4m3 ? 7 : 15;
    constexpr int kShift = 23 - kMant;
    constexpr uint32_t kMagic = (127 + 24 - kBias - kMant) << 23;
    constexpr uint32_t kMinNormal = (128 - kBias) << 23;
    const uint32_t u = detail::floatBits(x);
    const uint32_t sign = u & 0x80000000u;
    const uint32_t a = u & 0x7fffffffu;
    const uint32_t normal =
        (a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1)) & ~((1u << kShift) - 1);
    const float magic = detail::bitsFloat(kMagic);
    const uint32_t sub = detail::floatBits((detail::bitsFloat(a) + magic) - magic);
    uint32_t r = detail::pick(a < kMinNormal, sub, normal);
    if constexpr (kKind == detail::Fp8Kind::kE4m3) {
      r = std::min(r, detail::floatBits(448.0f)) | sign;
      r = detail::pick(a > 0x7f800000u, 0x7fc00000u, r);  // every NaN encodes as 0x7f: +NaN
    } else if constexpr (kKind == detail::Fp8Kind::kE5m2) {
      r = detail::pick(r > detail::floatBits(57344.0f), 0x7f800000u, r) | sign;
      r = detail::pick(a > 0x7f800000u, sign | 0x7fc00000u | (a & (1u << 21)), r);
    } else {
      r = std::min(r, detail::floatBits(1.875f)) | sign;
      r = detail::pick(a > 0x7f800000u, 0, r);  // NaN encodes as +0
    }
    return detail::bitsFloat(r);
  }

  static LOOM_INLINE void decode(const uint8_t* __restrict__ in, float* __restrict__ out,
                                 size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = decodeOne(in[i]);
  }
  static LOOM_INLINE void encode(const float* __restrict__ in, uint8_t* __restrict__ out,
                                 size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = kEncode(in[i]);
  }
  static LOOM_INLINE void round(float* __restrict__ x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = roundOne(x[i]);
  }
  template <typename Op, typename StepRound>
  static LOOM_INLINE void accumulate(float* __restrict__ acc, const uint8_t* __restrict__ src,
                                     size_t n) {
    accumulateScalar<Op, Fp8Codec, StepRound>(acc, src, n);
  }
};

using E4m3Codec = Fp8Codec<detail::Fp8Kind::kE4m3, floatToE4m3>;
using E5m2Codec = Fp8Codec<detail::Fp8Kind::kE5m2, floatToE5m2>;
using E4m3b15Codec = Fp8Codec<detail::Fp8Kind::kE4m3b15, floatToE4m3b15>;

// Each source is read in short bursts (one block) with the other sources' bursts in between,
// which the hardware prefetchers follow poorly: ask for the source's next block while this one
// is being combined. A prefetch never faults, so running past the end is harmless.
template <typename S>
LOOM_INLINE void prefetchNextBlock(const S* blockStart) {
  const char* next = reinterpret_cast<const char*>(blockStart + kNarrowBlock);
  for (size_t line = 0; line < kNarrowBlock * sizeof(S); line += 64)
    __builtin_prefetch(next + line);
}

template <typename Op, typename A, typename B>
LOOM_INLINE void combine(A* __restrict__ acc, const B* __restrict__ x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], static_cast<A>(x[i]));
}

// Accumulates in float; StepRound rounds the running value after every step (the codec itself
// for native accumulation, HalfCodec for fp16, NoRound for fp32).
template <typename Op, typename Codec, typename StepRound>
LOOM_INLINE void narrowBlock(typename Codec::Storage* out, const void* const* srcs, int nsrc,
                             size_t off, size_t n, int divisor) {
  using S = typename Codec::Storage;
  alignas(64) float acc[kNarrowBlock];
  prefetchNextBlock(static_cast<const S*>(srcs[0]) + off);
  Codec::decode(static_cast<const S*>(srcs[0]) + off, acc, n);
  StepRound::round(acc, n);
  for (int k = 1; k < nsrc; ++k) {
    const S* src = static_cast<const S*>(srcs[k]) + off;
    prefetchNextBlock(src);
    Codec::template accumulate<Op, StepRound>(acc, src, n);
  }
  if (divisor != 1) {
    divideBlock(acc, n, divisor);
    StepRound::round(acc, n);
  }
  Codec::encode(acc, out, n);
}

// fp64 accumulation; the final double -> narrow rounding goes through a round-to-odd float.
template <typename Op, typename Codec>
LOOM_INLINE void narrowBlockF64(typename Codec::Storage* out, const void* const* srcs, int nsrc,
                                size_t off, size_t n, int divisor) {
  using S = typename Codec::Storage;
  alignas(64) double acc[kNarrowBlock];
  alignas(64) float next[kNarrowBlock];
  Codec::decode(static_cast<const S*>(srcs[0]) + off, next, n);
  for (size_t i = 0; i < n; ++i) acc[i] = next[i];
  for (int k = 1; k < nsrc; ++k) {
    Codec::decode(static_cast<const S*>(srcs[k]) + off, next, n);
    combine<Op>(acc, next, n);
  }
  if (divisor != 1) divideBlock(acc, n, divisor);
  for (size_t i = 0; i < n; ++i) next[i] = detail::doubleToFloatRoundOdd(acc[i]);
  Codec::encode(next, out, n);
}

enum class Accum { kNative, kFp16, kFp32, kFp64 };

template <typename Op, typename Codec, Accum kAccum>
LOOM_INLINE void narrowBlockAccum(typename Codec::Storage* out, const void* const* srcs, int nsrc,
                                  size_t off, size_t n, int divisor) {
  if constexpr (kAccum == Accum::kNative) {
    narrowBlock<Op, Codec, Codec>(out, srcs, nsrc, off, n, divisor);
  } else if constexpr (kAccum == Accum::kFp16) {
    narrowBlock<Op, Codec, HalfCodec>(out, srcs, nsrc, off, n, divisor);
  } else if constexpr (kAccum == Accum::kFp32) {
    narrowBlock<Op, Codec, NoRound>(out, srcs, nsrc, off, n, divisor);
  } else {
    narrowBlockF64<Op, Codec>(out, srcs, nsrc, off, n, divisor);
  }
}

// Every block reads all of its sources before it writes dst, so dst may be one of the sources.
template <typename Op, typename Codec, Accum kAccum>
void reduceNarrow(void* dst, const void* const* srcs, int nsrc, size_t count, int divisor) {
  auto* d = static_cast<typename Codec::Storage*>(dst);
  for (size_t off = 0; off < count; off += kNarrowBlock) {
    const size_t n = std::min(kNarrowBlock, count - off);
    if (n == kNarrowBlock) {
      narrowBlockAccum<Op, Codec, kAccum>(d + off, srcs, nsrc, off, kNarrowBlock, divisor);
    } else {
      narrowBlockAccum<Op, Codec, kAccum>(d + off, srcs, nsrc, off, n, divisor);
    }
  }
}

template <typename Op, typename Codec>
void reduceNarrowAccum(void* dst, const void* const* srcs, int nsrc, size_t count, int divisor,
                       Accum accum) {
  switch (accum) {
    case Accum::kNative:
      return reduceNarrow<Op, Codec, Accum::kNative>(dst, srcs, nsrc, count, divisor);
    case Accum::kFp16:
      return reduceNarrow<Op, Codec, Accum::kFp16>(dst, srcs, nsrc, count, divisor);
    case Accum::kFp32:
      return reduceNarrow<Op, Codec, Accum::kFp32>(dst, srcs, nsrc, count, divisor);
    case Accum::kFp64:
      return reduceNarrow<Op, Codec, Accum::kFp64>(dst, srcs, nsrc, count, divisor);
  }
}

template <typename Op>
void reduceTyped(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                 Accum accum, int divisor) {
  switch (dtype) {
    case loomInt8:
      return reduceNative<Op, int8_t>(dst, srcs, nsrc, count, divisor);
    case loomUint8:
      return reduceNative<Op, uint8_t>(dst, srcs, nsrc, count, divisor);
    case loomInt32:
      return reduceNative<Op, int32_t>(dst, srcs, nsrc, count, divisor);
    case loomUint32:
      return reduceNative<Op, uint32_t>(dst, srcs, nsrc, count, divisor);
    case loomInt64:
      return reduceNative<Op, int64_t>(dst, srcs, nsrc, count, divisor);
    case loomUint64:
      return reduceNative<Op, uint64_t>(dst, srcs, nsrc, count, divisor);
    case loomFloat32:
      return reduceNative<Op, float>(dst, srcs, nsrc, count, divisor);
    case loomFloat64:
      return reduceNative<Op, double>(dst, srcs, nsrc, count, divisor);
    case loomFloat16:
      return reduceNarrowAccum<Op, HalfCodec>(dst, srcs, nsrc, count, divisor, accum);
    case loomBfloat16:
      return reduceNarrowAccum<Op, Bf16Codec>(dst, srcs, nsrc, count, divisor, accum);
    case loomFloat8e4m3:
      return reduceNarrowAccum<Op, E4m3Codec>(dst, srcs, nsrc, count, divisor, accum);
    case loomFloat8e5m2:
      return reduceNarrowAccum<Op, E5m2Codec>(dst, srcs, nsrc, count, divisor, accum);
    case loomFloat8e4m3b15:
      return reduceNarrowAccum<Op, E4m3b15Codec>(dst, srcs, nsrc, count, divisor, accum);
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "unknown data type ", static_cast<int>(dtype));
}

Accum resolveAccum(loomDataType_t dtype, int accum) {
  if (!dtypeIsNarrowFloat(dtype) || accum < 0 || accum == dtype) return Accum::kNative;
  switch (accum) {
    case loomFloat16:
      return Accum::kFp16;
    case loomFloat32:
      return Accum::kFp32;
    case loomFloat64:
      return Accum::kFp64;
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "cannot accumulate ", dtypeName(dtype), " in ",
             dtypeValid(accum) ? dtypeName(static_cast<loomDataType_t>(accum)) : "type ", accum);
}

}  // namespace

void reduceManyAndScale(void* dst, const void* const* srcs, int nsrc, size_t count,
                        loomDataType_t dtype, loomRedOp_t op, int accum, int divisor) {
  LOOM_CHECK_ARG(dtypeValid(dtype), "unknown data type ", static_cast<int>(dtype));
  LOOM_CHECK_ARG(op == loomSum || op == loomProd || op == loomMax || op == loomMin,
                 "reduction op must be sum, prod, max or min, got ", static_cast<int>(op));
  LOOM_CHECK_ARG(nsrc >= 1, "reduction needs at least one source, got ", nsrc);
  LOOM_CHECK_ARG(divisor >= 1, "divisor must be positive, got ", divisor);
  const Accum accumKind = resolveAccum(dtype, accum);
  if (count == 0) return;
  LOOM_CHECK_ARG(dst != nullptr && srcs != nullptr, "null buffer in reduction");
  for (int k = 0; k < nsrc; ++k) LOOM_CHECK_ARG(srcs[k] != nullptr, "null source ", k);

  if (nsrc == 1 && divisor == 1) {
    // Exactly the identity, including NaN payloads that a decode/encode could canonicalize.
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * dtypeSize(dtype));
    return;
  }
  switch (op) {
    case loomSum:
      return reduceTyped<SumOp>(dst, srcs, nsrc, count, dtype, accumKind, divisor);
    case loomProd:
      return reduceTyped<ProdOp>(dst, srcs, nsrc, count, dtype, accumKind, divisor);
    case loomMax:
      return reduceTyped<MaxOp>(dst, srcs, nsrc, count, dtype, accumKind, divisor);
    default:
      return reduceTyped<MinOp>(dst, srcs, nsrc, count, dtype, accumKind, divisor);
  }
}

void reduceMany(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                loomRedOp_t op, int accum) {
  reduceManyAndScale(dst, srcs, nsrc, count, dtype, op, accum, 1);
}

void divideInPlace(void* dst, size_t count, loomDataType_t dtype, int divisor) {
  const void* src = dst;
  reduceManyAndScale(dst, &src, 1, count, dtype, loomSum, -1, divisor);
}

}  // namespace loom
