#include "base/dtype.hpp"

#include <cstring>
#include <limits>

#include "base/error.hpp"

namespace loom {
namespace {

struct DtypeInfo {
  const char* name;
  size_t size;
  bool isFloat;
};

// Indexed by loomDataType_t.
constexpr DtypeInfo kDtypes[loomNumTypes] = {
    {"int8", 1, false},      {"uint8", 1, false},   {"int32", 4, false},  {"uint32", 4, false},
    {"int64", 8, false},     {"uint64", 8, false},  {"half", 2, true},    {"float", 4, true},
    {"double", 8, true},     {"bfloat16", 2, true}, {"fp8e4m3", 1, true}, {"fp8e5m2", 1, true},
    {"fp8e4m3b15", 1, true},
};

struct Alias {
  const char* name;
  loomDataType_t type;
};

constexpr Alias kDtypeAliases[] = {
    {"float32", loomFloat32}, {"fp32", loomFloat32},  {"float16", loomFloat16},
    {"fp16", loomFloat16},    {"bf16", loomBfloat16}, {"float64", loomFloat64},
    {"fp64", loomFloat64},    {"int", loomInt32},     {"char", loomInt8},
};

constexpr const char* kOpNames[loomNumOps] = {"sum", "prod", "max", "min", "avg"};

// Names come from command lines and environment variables, where case is not worth an error.
bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) {
      return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

template <typename T>
T load(const void* buf, size_t index) {
  T v;
  std::memcpy(&v, static_cast<const char*>(buf) + index * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(void* buf, size_t index, T v) {
  std::memcpy(static_cast<char*>(buf) + index * sizeof(T), &v, sizeof(T));
}

// Clamps to T's range before converting, since an out-of-range double -> integer conversion is
// undefined behaviour. The bounds are powers of two, exact in double.
template <typename T>
T clampToInt(double v) {
  if (v != v) return 0;
  constexpr double kLow = static_cast<double>(std::numeric_limits<T>::min());
  // max() + 1 is a power of two; max() itself may not be representable (int64, uint64).
  constexpr double kHigh = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  if (v <= kLow) return std::numeric_limits<T>::min();
  if (v >= kHigh) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

size_t dtypeSize(loomDataType_t t) {
  LOOM_CHECK_ARG(dtypeValid(t), "unknown data type ", static_cast<int>(t));
  return kDtypes[t].size;
}

bool dtypeValid(int t) { return t >= 0 && t < loomNumTypes; }

bool dtypeIsFloat(loomDataType_t t) { return dtypeValid(t) && kDtypes[t].isFloat; }

bool dtypeIsNarrowFloat(loomDataType_t t) {
  return dtypeIsFloat(t) && t != loomFloat32 && t != loomFloat64;
}

const char* dtypeName(loomDataType_t t) { return dtypeValid(t) ? kDtypes[t].name : "unknown"; }

std::optional<loomDataType_t> dtypeFromName(std::string_view name) {
  for (int t = 0; t < loomNumTypes; ++t) {
    if (equalsIgnoreCase(name, kDtypes[t].name)) return static_cast<loomDataType_t>(t);
  }
  for (const Alias& alias : kDtypeAliases) {
    if (equalsIgnoreCase(name, alias.name)) return alias.type;
  }
  return std::nullopt;
}

bool opValid(int op) { return op >= 0 && op < loomNumOps; }

const char* opName(loomRedOp_t op) { return opValid(op) ? kOpNames[op] : "unknown"; }

std::optional<loomRedOp_t> opFromName(std::string_view name) {
  for (int op = 0; op < loomNumOps; ++op) {
    if (equalsIgnoreCase(name, kOpNames[op])) return static_cast<loomRedOp_t>(op);
  }
  return std::nullopt;
}

double loadAsDouble(const void* buf, size_t index, loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return load<int8_t>(buf, index);
    case loomUint8:
      return load<uint8_t>(buf, index);
    case loomInt32:
      return load<int32_t>(buf, index);
    case loomUint32:
      return load<uint32_t>(buf, index);
    case loomInt64:
      return static_cast<double>(load<int64_t>(buf, index));
    case loomUint64:
      return static_cast<double>(load<uint64_t>(buf, index));
    case loomFloat16:
      return halfToFloat(load<uint16_t>(buf, index));
    case loomFloat32:
      return load<float>(buf, index);
    case loomFloat64:
      return load<double>(buf, index);
    case loomBfloat16:
      return bf16ToFloat(load<uint16_t>(buf, index));
    case loomFloat8e4m3:
      return e4m3ToFloat(load<uint8_t>(buf, index));
    case loomFloat8e5m2:
      return e5m2ToFloat(load<uint8_t>(buf, index));
    case loomFloat8e4m3b15:
      return e4m3b15ToFloat(load<uint8_t>(buf, index));
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "unknown data type ", static_cast<int>(t));
}

void storeFromDouble(void* buf, size_t index, loomDataType_t t, double v) {
  // Narrow formats go through a round-to-odd float so they are rounded only once.
  const float odd = detail::doubleToFloatRoundOdd(v);
  switch (t) {
    case loomInt8:
      return store(buf, index, clampToInt<int8_t>(v));
    case loomUint8:
      return store(buf, index, clampToInt<uint8_t>(v));
    case loomInt32:
      return store(buf, index, clampToInt<int32_t>(v));
    case loomUint32:
      return store(buf, index, clampToInt<uint32_t>(v));
    case loomInt64:
      return store(buf, index, clampToInt<int64_t>(v));
    case loomUint64:
      return store(buf, index, clampToInt<uint64_t>(v));
    case loomFloat16:
      return store(buf, index, floatToHalf(odd));
    case loomFloat32:
      return store(buf, index, static_cast<float>(v));
    case loomFloat64:
      return store(buf, index, v);
    case loomBfloat16:
      return store(buf, index, floatToBf16(odd));
    case loomFloat8e4m3:
      return store(buf, index, floatToE4m3(odd));
    case loomFloat8e5m2:
      return store(buf, index, floatToE5m2(odd));
    case loomFloat8e4m3b15:
      return store(buf, index, floatToE4m3b15(odd));
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "unknown data type ", static_cast<int>(t));
}

}  // namespace loom
