#include "worker/pattern.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"

namespace meshcast::worker {
namespace {

// Checks that `box` lies in the tensor and `buffer_size` matches it.
absl::Status CheckTile(size_t buffer_size, const Box& box,
                       const TensorSpec& spec) {
  RETURN_IF_ERROR(CheckRegionInBox(box, spec.full_box(), "box"));
  const int64_t expected = NumElements(box) * DTypeSize(spec.dtype);
  if (static_cast<int64_t>(buffer_size) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer has ", buffer_size, " bytes but box ", BoxToString(box), " of ",
        DTypeName(spec.dtype), " needs ", expected));
  }
  return absl::OkStatus();
}

template <int kSize>
struct WordOf;
template <>
struct WordOf<1> {
  using Type = uint8_t;
};
template <>
struct WordOf<2> {
  using Type = uint16_t;
};
template <>
struct WordOf<4> {
  using Type = uint32_t;
};
template <>
struct WordOf<8> {
  using Type = uint64_t;
};

// Calls fn(std::integral_constant<PatternType, type>) so that the per-element
// loops below are compiled once per type, with no switch inside them.
template <typename Fn>
void DispatchPatternType(PatternType type, Fn&& fn) {
  switch (type) {
    case PatternType::kInt8:
      return fn(std::integral_constant<PatternType, PatternType::kInt8>());
    case PatternType::kUInt8:
      return fn(std::integral_constant<PatternType, PatternType::kUInt8>());
    case PatternType::kInt32:
      return fn(std::integral_constant<PatternType, PatternType::kInt32>());
    case PatternType::kInt64:
      return fn(std::integral_constant<PatternType, PatternType::kInt64>());
    case PatternType::kFloat16:
      return fn(std::integral_constant<PatternType, PatternType::kFloat16>());
    case PatternType::kBFloat16:
      return fn(std::integral_constant<PatternType, PatternType::kBFloat16>());
    case PatternType::kFloat32:
      return fn(std::integral_constant<PatternType, PatternType::kFloat32>());
    case PatternType::kFloat64:
      return fn(std::integral_constant<PatternType, PatternType::kFloat64>());
  }
}

template <PatternType kType>
void FillRun(uint8_t* out, uint64_t global_index, uint32_t tensor,
             int64_t length) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  for (int64_t k = 0; k < length; ++k) {
    const Word value = static_cast<Word>(
        PatternBits(kType, global_index + static_cast<uint64_t>(k), tensor));
    std::memcpy(out + k * sizeof(Word), &value, sizeof(Word));
  }
}

template <PatternType kType>
void VerifyRun(const uint8_t* in, uint64_t global_index, uint32_t tensor,
               int64_t length, VerifyResult& result) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  for (int64_t k = 0; k < length; ++k) {
    const uint64_t index = global_index + static_cast<uint64_t>(k);
    const Word expected = static_cast<Word>(PatternBits(kType, index, tensor));
    Word found;
    std::memcpy(&found, in + k * sizeof(Word), sizeof(Word));
    if (found != expected) {
      if (result.mismatches == 0) {
        result.first_mismatch_index = static_cast<int64_t>(index);
        result.first_mismatch = MismatchBitsText(expected, found);
      }
      ++result.mismatches;
    }
  }
}

}  // namespace

PatternType ToPatternType(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return PatternType::kInt8;
    case DType::kUInt8:
      return PatternType::kUInt8;
    case DType::kInt32:
      return PatternType::kInt32;
    case DType::kInt64:
      return PatternType::kInt64;
    case DType::kFloat16:
      return PatternType::kFloat16;
    case DType::kBFloat16:
      return PatternType::kBFloat16;
    case DType::kFloat32:
      return PatternType::kFloat32;
    case DType::kFloat64:
      return PatternType::kFloat64;
  }
  return PatternType::kUInt8;
}

std::string MismatchBitsText(uint64_t expected_bits, uint64_t found_bits) {
  return absl::StrCat("expected bits 0x", absl::Hex(expected_bits),
                      ", found 0x", absl::Hex(found_bits));
}

std::string PatternValue(DType dtype, int64_t global_index, int tensor) {
  const uint64_t bits = PatternBits(dtype, global_index, tensor);
  std::string bytes(DTypeSize(dtype), '\0');
  for (size_t k = 0; k < bytes.size(); ++k) {
    bytes[k] = static_cast<char>((bits >> (8 * k)) & 0xFF);
  }
  return bytes;
}

double PatternNumber(DType dtype, int64_t global_index, int tensor) {
  const uint64_t bits = PatternBits(dtype, global_index, tensor);
  switch (dtype) {
    case DType::kInt8:
      return static_cast<int8_t>(bits);
    case DType::kUInt8:
      return static_cast<uint8_t>(bits);
    case DType::kInt32:
      return static_cast<int32_t>(bits);
    case DType::kInt64:
      return static_cast<double>(static_cast<int64_t>(bits));
    case DType::kFloat16:
      return static_cast<double>(
          PatternInteger(PatternHash(global_index, tensor), 10));
    case DType::kBFloat16:
      return static_cast<double>(
          PatternInteger(PatternHash(global_index, tensor), 7));
    case DType::kFloat32: {
      const uint32_t word = static_cast<uint32_t>(bits);
      float value;
      std::memcpy(&value, &word, sizeof(value));
      return value;
    }
    case DType::kFloat64: {
      double value;
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    }
  }
  return 0;
}

absl::Status FillBox(absl::Span<uint8_t> buffer, const Box& box,
                     const TensorSpec& spec, int tensor_index) {
  RETURN_IF_ERROR(CheckTile(buffer.size(), box, spec));
  const int size = DTypeSize(spec.dtype);
  const uint32_t tensor = static_cast<uint32_t>(tensor_index);
  // Runs are contiguous both in the tile and in the tensor's global order,
  // so each run is a consecutive range of global indices.
  DispatchPatternType(ToPatternType(spec.dtype), [&](auto type) {
    ForEachRun(box, box, spec.full_box(), 0, NumElements(box),
               [&](int64_t in_tile, int64_t global, int64_t length) {
                 FillRun<decltype(type)::value>(buffer.data() + in_tile * size,
                                                global, tensor, length);
               });
  });
  return absl::OkStatus();
}

absl::StatusOr<VerifyResult> VerifyBox(absl::Span<const uint8_t> buffer,
                                       const Box& box, const TensorSpec& spec,
                                       int tensor_index) {
  RETURN_IF_ERROR(CheckTile(buffer.size(), box, spec));
  const int size = DTypeSize(spec.dtype);
  const uint32_t tensor = static_cast<uint32_t>(tensor_index);
  VerifyResult result;
  result.elements = NumElements(box);
  DispatchPatternType(ToPatternType(spec.dtype), [&](auto type) {
    ForEachRun(box, box, spec.full_box(), 0, result.elements,
               [&](int64_t in_tile, int64_t global, int64_t length) {
                 VerifyRun<decltype(type)::value>(
                     buffer.data() + in_tile * size, global, tensor, length,
                     result);
               });
  });
  return result;
}

}  // namespace meshcast::worker
