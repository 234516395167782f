#include "worker/kernels/element.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "worker/kernels/element_core.h"

namespace meshcast::worker {
namespace {

template <typename T>
T LoadAs(const uint8_t* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

template <typename T>
void StoreAs(uint8_t* out, T value) {
  std::memcpy(out, &value, sizeof(T));
}

}  // namespace

uint64_t RoundToFloatBits(double value, int exponent_bits, int mantissa_bits) {
  return CoreRoundToFloatBits(value, exponent_bits, mantissa_bits);
}

double FloatBitsToDouble(uint64_t bits, int exponent_bits, int mantissa_bits) {
  return CoreFloatBitsToDouble(bits, exponent_bits, mantissa_bits);
}

int64_t DoubleToWrappedInt64(double value) {
  return CoreDoubleToWrappedInt64(value);
}

bool IsIntegerDType(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

int64_t WrapInteger(DType dtype, int64_t value) {
  switch (dtype) {
    case DType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(value));
    case DType::kUInt8:
      return static_cast<uint8_t>(value);
    case DType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(value));
    default:
      return value;
  }
}

double LoadElement(DType dtype, const uint8_t* in) {
  switch (dtype) {
    case DType::kInt8:
      return LoadAs<int8_t>(in);
    case DType::kUInt8:
      return LoadAs<uint8_t>(in);
    case DType::kInt32:
      return LoadAs<int32_t>(in);
    case DType::kInt64:
      return static_cast<double>(LoadAs<int64_t>(in));
    case DType::kFloat16:
      return FloatBitsToDouble(LoadAs<uint16_t>(in), 5, 10);
    case DType::kBFloat16: {
      const uint32_t word = uint32_t{LoadAs<uint16_t>(in)} << 16;
      float value;
      std::memcpy(&value, &word, sizeof(value));
      return value;
    }
    case DType::kFloat32:
      return LoadAs<float>(in);
    case DType::kFloat64:
      return LoadAs<double>(in);
  }
  return 0;
}

void StoreElement(DType dtype, uint8_t* out, double value) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return StoreInteger(dtype, out, DoubleToWrappedInt64(value));
    case DType::kFloat16:
      return StoreAs<uint16_t>(
          out, static_cast<uint16_t>(RoundToFloatBits(value, 5, 10)));
    case DType::kBFloat16:
      return StoreAs<uint16_t>(
          out, static_cast<uint16_t>(RoundToFloatBits(value, 8, 7)));
    case DType::kFloat32:
      // The conversion rounds to nearest even (the default rounding mode).
      return StoreAs<float>(out, static_cast<float>(value));
    case DType::kFloat64:
      return StoreAs<double>(out, value);
  }
}

int64_t LoadInteger(DType dtype, const uint8_t* in) {
  switch (dtype) {
    case DType::kInt8:
      return LoadAs<int8_t>(in);
    case DType::kUInt8:
      return LoadAs<uint8_t>(in);
    case DType::kInt32:
      return LoadAs<int32_t>(in);
    case DType::kInt64:
      return LoadAs<int64_t>(in);
    default:
      return DoubleToWrappedInt64(LoadElement(dtype, in));
  }
}

void StoreInteger(DType dtype, uint8_t* out, int64_t value) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
      return StoreAs<uint8_t>(out, static_cast<uint8_t>(value));
    case DType::kInt32:
      return StoreAs<uint32_t>(out, static_cast<uint32_t>(value));
    case DType::kInt64:
      return StoreAs<int64_t>(out, value);
    default:
      return StoreElement(dtype, out, static_cast<double>(value));
  }
}

}  // namespace meshcast::worker
