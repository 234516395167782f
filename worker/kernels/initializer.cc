#include "worker/kernels/initializer.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/kernels/box_index.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer_core.h"

namespace meshcast::worker {
namespace {

using kernels_internal::ForEachBoxRow;

absl::Status CheckTile(size_t buffer_size, const Box& box,
                       const TensorSpec& spec, int tensor) {
  if (box.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, ": box ", BoxToString(box), " has rank ",
        box.size(), " but the tensor has rank ", spec.shape.size()));
  }
  if (!Contains(spec.full_box(), box)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", tensor, ": box ", BoxToString(box),
                     " is not inside ", BoxToString(spec.full_box())));
  }
  const int64_t expected = NumElements(box) * DTypeSize(spec.dtype);
  if (static_cast<int64_t>(buffer_size) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, ": buffer has ", buffer_size, " bytes but box ",
        BoxToString(box), " of ", DTypeName(spec.dtype), " needs ", expected));
  }
  return absl::OkStatus();
}

template <typename Word, typename BitsFn>
void FillRows(absl::Span<uint8_t> buffer, const Box& box,
              const TensorSpec& spec, BitsFn bits) {
  ForEachBoxRow(box, spec.shape,
                [&](int64_t offset, int64_t global, int64_t length) {
                  uint8_t* out = buffer.data() + offset * sizeof(Word);
                  for (int64_t k = 0; k < length; ++k) {
                    const Word w = static_cast<Word>(bits(global + k));
                    std::memcpy(out + k * sizeof(Word), &w, sizeof(Word));
                  }
                });
}

template <typename BitsFn>
void FillWith(absl::Span<uint8_t> buffer, const Box& box,
              const TensorSpec& spec, BitsFn bits) {
  switch (DTypeSize(spec.dtype)) {
    case 1:
      return FillRows<uint8_t>(buffer, box, spec, bits);
    case 2:
      return FillRows<uint16_t>(buffer, box, spec, bits);
    case 4:
      return FillRows<uint32_t>(buffer, box, spec, bits);
    default:
      return FillRows<uint64_t>(buffer, box, spec, bits);
  }
}

}  // namespace

PatternType KernelPatternType(DType dtype) {
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

absl::Status CheckInitializer(const v1::Initializer& init, int tensor) {
  switch (init.kind()) {
    case v1::Initializer::KIND_UNSPECIFIED:
    case v1::Initializer::KIND_PATTERN:
    case v1::Initializer::KIND_RANDOM:
    case v1::Initializer::KIND_ZEROS:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor_inits[", tensor, "].kind ", static_cast<int>(init.kind()),
          " is unknown; allowed: KIND_PATTERN, KIND_RANDOM, KIND_ZEROS"));
  }
}

uint64_t InitialBits(DType dtype, int tensor, const v1::Initializer& init,
                     int64_t global_index) {
  const PatternType type = KernelPatternType(dtype);
  const uint64_t index = static_cast<uint64_t>(global_index);
  const uint32_t t = static_cast<uint32_t>(tensor);
  switch (init.kind()) {
    case v1::Initializer::KIND_UNSPECIFIED:
    case v1::Initializer::KIND_PATTERN:
      return PatternBits(type, index, t);
    case v1::Initializer::KIND_RANDOM:
      return RandomBits(type, init.seed(), index, t);
    default:
      return 0;
  }
}

double InitialValue(const TensorSpec& spec, int tensor,
                    const v1::Initializer& init, int64_t global_index) {
  const uint64_t bits = InitialBits(spec.dtype, tensor, init, global_index);
  uint8_t bytes[8];
  std::memcpy(bytes, &bits, sizeof(bytes));  // little endian: low bytes first
  return LoadElement(spec.dtype, bytes);
}

int64_t InitialInteger(const TensorSpec& spec, int tensor,
                       const v1::Initializer& init, int64_t global_index) {
  const uint64_t bits = InitialBits(spec.dtype, tensor, init, global_index);
  uint8_t bytes[8];
  std::memcpy(bytes, &bits, sizeof(bytes));
  return LoadInteger(spec.dtype, bytes);
}

absl::Status FillInitializer(absl::Span<uint8_t> buffer, const Box& box,
                             const TensorSpec& spec, int tensor,
                             const v1::Initializer& init) {
  RETURN_IF_ERROR(CheckInitializer(init, tensor));
  RETURN_IF_ERROR(CheckTile(buffer.size(), box, spec, tensor));
  const PatternType type = KernelPatternType(spec.dtype);
  const uint32_t t = static_cast<uint32_t>(tensor);
  switch (init.kind()) {
    case v1::Initializer::KIND_ZEROS:
      std::memset(buffer.data(), 0, buffer.size());
      break;
    case v1::Initializer::KIND_RANDOM: {
      const uint64_t seed = init.seed();
      FillWith(buffer, box, spec, [=](int64_t i) {
        return RandomBits(type, seed, static_cast<uint64_t>(i), t);
      });
      break;
    }
    default:
      FillWith(buffer, box, spec, [=](int64_t i) {
        return PatternBits(type, static_cast<uint64_t>(i), t);
      });
      break;
  }
  return absl::OkStatus();
}

}  // namespace meshcast::worker
