// Element-wise reductions in kernels, with exactly the CPU reference's arithmetic
// (src/base/reduce.hpp): sources combined in rank order; narrow floats decoded to float, combined,
// and rounded after every step as the accumulation type asks; average as a sum divided once.
//
// A Reducer works on one vector of kBytes bytes (16 for the simple protocol, 8 for LL packets):
// first() starts the running value from rank 0's data, next() folds in the next rank's, finish()
// divides (average) and encodes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "base/dtype.hpp"

namespace loom::cuda {

struct SumOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct MaxOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (b > a || b != b) ? b : a;
    else
      return b > a ? b : a;
  }
};
struct MinOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (b < a || b != b) ? b : a;
    else
      return b < a ? b : a;
  }
};

// Codecs of the stored types: decode to float, encode from float (round to nearest even).
struct HalfCodec {
  using Storage = uint16_t;
  __device__ static float decode(uint16_t v) { return halfToFloat(v); }
  __device__ static uint16_t encode(float f) { return floatToHalf(f); }
};
struct Bf16Codec {
  using Storage = uint16_t;
  __device__ static float decode(uint16_t v) { return bf16ToFloat(v); }
  __device__ static uint16_t encode(float f) { return floatToBf16(f); }
};
template <detail::Fp8Kind kKind>
struct Fp8Codec {
  using Storage = uint8_t;
  __device__ static float decode(uint8_t v) { return detail::decodeFp8Arith<kKind>(v); }
  __device__ static uint8_t encode(float f) {
    if constexpr (kKind == detail::Fp8Kind::kE4m3)
      return floatToE4m3(f);
    else if constexpr (kKind == detail::Fp8Kind::kE5m2)
      return floatToE5m2(f);
    else
      return floatToE4m3b15(f);
  }
};
using E4m3Codec = Fp8Codec<detail::Fp8Kind::kE4m3>;
using E5m2Codec = Fp8Codec<detail::Fp8Kind::kE5m2>;
using E4m3b15Codec = Fp8Codec<detail::Fp8Kind::kE4m3b15>;

enum class Accum { kNative, kFp16, kFp32, kFp64 };

// Integers, fp32 and fp64: native arithmetic.
template <typename T, typename Op>
struct NativeReducer {
  template <int kBytes>
  struct Acc {
    T v[kBytes / sizeof(T)];
  };
  template <int kBytes>
  __device__ static void first(Acc<kBytes>& acc, const void* data) {
    const T* in = static_cast<const T*>(data);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(T)); ++i) acc.v[i] = in[i];
  }
  template <int kBytes>
  __device__ static void next(Acc<kBytes>& acc, const void* data) {
    const T* in = static_cast<const T*>(data);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(T)); ++i)
      acc.v[i] = Op::apply(acc.v[i], in[i]);
  }
  template <int kBytes>
  __device__ static void finish(void* out, Acc<kBytes>& acc, int divisor) {
    T* o = static_cast<T*>(out);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(T)); ++i) {
      T x = acc.v[i];
      if (divisor != 1) {
        if constexpr (std::is_same_v<T, float>)
          x = x / static_cast<float>(divisor);
        else if constexpr (std::is_same_v<T, double>)
          x = x / static_cast<double>(divisor);
        else if constexpr (sizeof(T) < 8)
          x = static_cast<T>(static_cast<int64_t>(x) / divisor);
        else
          x = x / static_cast<T>(divisor);
      }
      o[i] = x;
    }
  }
};

// Narrow floats: accumulate in float (rounded after every step to the stored type for kNative,
// to fp16 for kFp16, not at all for kFp32) or in double (kFp64, rounded once through a
// round-to-odd float).
template <typename Codec, typename Op, Accum kAccum>
struct NarrowReducer {
  using S = typename Codec::Storage;
  using A = std::conditional_t<kAccum == Accum::kFp64, double, float>;
  template <int kBytes>
  struct Acc {
    A v[kBytes / sizeof(S)];
  };
  __device__ static A stepRound(A x) {
    if constexpr (kAccum == Accum::kNative)
      return Codec::decode(Codec::encode(x));
    else if constexpr (kAccum == Accum::kFp16)
      return halfToFloat(floatToHalf(x));
    else
      return x;
  }
  template <int kBytes>
  __device__ static void first(Acc<kBytes>& acc, const void* data) {
    const S* in = static_cast<const S*>(data);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(S)); ++i)
      acc.v[i] = stepRound(static_cast<A>(Codec::decode(in[i])));
  }
  template <int kBytes>
  __device__ static void next(Acc<kBytes>& acc, const void* data) {
    const S* in = static_cast<const S*>(data);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(S)); ++i)
      acc.v[i] = stepRound(Op::apply(acc.v[i], static_cast<A>(Codec::decode(in[i]))));
  }
  template <int kBytes>
  __device__ static void finish(void* out, Acc<kBytes>& acc, int divisor) {
    S* o = static_cast<S*>(out);
#pragma unroll
    for (int i = 0; i < kBytes / static_cast<int>(sizeof(S)); ++i) {
      A x = acc.v[i];
      if (divisor != 1) x = stepRound(x / static_cast<A>(divisor));
      if constexpr (kAccum == Accum::kFp64)
        o[i] = Codec::encode(detail::doubleToFloatRoundOdd(x));
      else
        o[i] = Codec::encode(x);
    }
  }
};

// Calls f(Reducer{}) with the reducer for (dtype, op, accum); op is sum/prod/max/min (average
// runs as sum plus a divisor). Returns false for a combination that does not exist.
template <typename Op, typename F>
__host__ bool withNarrow(loomDataType_t dtype, Accum accum, F&& f) {
  auto byCodec = [&](auto codec) {
    using C = decltype(codec);
    switch (accum) {
      case Accum::kNative:
        f(NarrowReducer<C, Op, Accum::kNative>{});
        return true;
      case Accum::kFp16:
        f(NarrowReducer<C, Op, Accum::kFp16>{});
        return true;
      case Accum::kFp32:
        f(NarrowReducer<C, Op, Accum::kFp32>{});
        return true;
      case Accum::kFp64:
        f(NarrowReducer<C, Op, Accum::kFp64>{});
        return true;
    }
    return false;
  };
  switch (dtype) {
    case loomFloat16:
      return byCodec(HalfCodec{});
    case loomBfloat16:
      return byCodec(Bf16Codec{});
    case loomFloat8e4m3:
      return byCodec(E4m3Codec{});
    case loomFloat8e5m2:
      return byCodec(E5m2Codec{});
    case loomFloat8e4m3b15:
      return byCodec(E4m3b15Codec{});
    default:
      return false;
  }
}

template <typename Op, typename F>
__host__ bool withType(loomDataType_t dtype, Accum accum, F&& f) {
  switch (dtype) {
    case loomInt8:
      f(NativeReducer<int8_t, Op>{});
      return true;
    case loomUint8:
      f(NativeReducer<uint8_t, Op>{});
      return true;
    case loomInt32:
      f(NativeReducer<int32_t, Op>{});
      return true;
    case loomUint32:
      f(NativeReducer<uint32_t, Op>{});
      return true;
    case loomInt64:
      f(NativeReducer<int64_t, Op>{});
      return true;
    case loomUint64:
      f(NativeReducer<uint64_t, Op>{});
      return true;
    case loomFloat32:
      f(NativeReducer<float, Op>{});
      return true;
    case loomFloat64:
      f(NativeReducer<double, Op>{});
      return true;
    default:
      return withNarrow<Op>(dtype, accum, f);
  }
}

template <typename F>
__host__ bool withReducer(loomDataType_t dtype, loomRedOp_t op, Accum accum, F&& f) {
  switch (op) {
    case loomSum:
      return withType<SumOp>(dtype, accum, f);
    case loomProd:
      return withType<ProdOp>(dtype, accum, f);
    case loomMax:
      return withType<MaxOp>(dtype, accum, f);
    case loomMin:
      return withType<MinOp>(dtype, accum, f);
    default:
      return false;
  }
}

}  // namespace loom::cuda
