#include "worker/kernels/reduce.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/kernels/element.h"

namespace meshcast::worker {
namespace {

// Native types: memcpy loads and stores (no alignment assumption) compile
// to plain vector loads; the loop vectorizes.
template <typename T, bool kMax>
void ReduceNative(const uint8_t* __restrict in, uint8_t* __restrict inout,
                  int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, inout + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    T r;
    if constexpr (kMax) {
      r = b > a ? b : a;
    } else {
      r = static_cast<T>(a + b);
    }
    std::memcpy(inout + i * sizeof(T), &r, sizeof(T));
  }
}

// Integers: wrapping addition in the unsigned type of the same width (no
// signed overflow); max in the element's own signedness.
template <typename S, typename U, bool kMax>
void ReduceInteger(const uint8_t* __restrict in, uint8_t* __restrict inout,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    S a, b;
    std::memcpy(&a, inout + i * sizeof(S), sizeof(S));
    std::memcpy(&b, in + i * sizeof(S), sizeof(S));
    S r;
    if constexpr (kMax) {
      r = b > a ? b : a;
    } else {
      r = static_cast<S>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
    std::memcpy(inout + i * sizeof(S), &r, sizeof(S));
  }
}

template <bool kMax>
void ReduceHalf(DType dtype, const uint8_t* in, uint8_t* inout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = static_cast<float>(LoadElement(dtype, inout + 2 * i));
    const float b = static_cast<float>(LoadElement(dtype, in + 2 * i));
    const float r = kMax ? (b > a ? b : a) : a + b;
    StoreElement(dtype, inout + 2 * i, r);
  }
}

template <bool kMax>
void Reduce(DType dtype, const uint8_t* in, uint8_t* inout, int64_t n) {
  switch (dtype) {
    case DType::kInt8:
      return ReduceInteger<int8_t, uint8_t, kMax>(in, inout, n);
    case DType::kUInt8:
      return ReduceInteger<uint8_t, uint8_t, kMax>(in, inout, n);
    case DType::kInt32:
      return ReduceInteger<int32_t, uint32_t, kMax>(in, inout, n);
    case DType::kInt64:
      return ReduceInteger<int64_t, uint64_t, kMax>(in, inout, n);
    case DType::kFloat16:
    case DType::kBFloat16:
      return ReduceHalf<kMax>(dtype, in, inout, n);
    case DType::kFloat32:
      return ReduceNative<float, kMax>(in, inout, n);
    case DType::kFloat64:
      return ReduceNative<double, kMax>(in, inout, n);
  }
}

}  // namespace

absl::Status ReduceInto(v1::Reduction reduction, DType dtype,
                        absl::Span<const uint8_t> in,
                        absl::Span<uint8_t> inout) {
  const size_t size = DTypeSize(dtype);
  if (in.size() != inout.size() || in.size() % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce ", DTypeName(dtype), ": input has ", in.size(),
        " bytes and in-out ", inout.size(),
        "; both must be the same multiple of ", size));
  }
  const int64_t n = static_cast<int64_t>(in.size() / size);
  switch (reduction) {
    case v1::REDUCTION_SUM:
      Reduce<false>(dtype, in.data(), inout.data(), n);
      return absl::OkStatus();
    case v1::REDUCTION_MAX:
      Reduce<true>(dtype, in.data(), inout.data(), n);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reduction ", static_cast<int>(reduction),
                       " is unknown; allowed: REDUCTION_SUM, REDUCTION_MAX"));
  }
}

}  // namespace meshcast::worker
