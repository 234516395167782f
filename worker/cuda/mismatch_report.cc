#include "worker/cuda/mismatch_report.h"

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/pattern.h"

namespace meshcast::worker::cuda {

absl::StatusOr<TileMismatch> LocateTileElement(
    const Box& box, const TensorSpec& spec, int tensor_index, int64_t element,
    absl::Span<const uint8_t> element_bytes) {
  RETURN_IF_ERROR(CheckRegionInBox(box, spec.full_box(), "box"));
  const int64_t elements = NumElements(box);
  if (element < 0 || element >= elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("element ", element, " is outside tile ", BoxToString(box),
                     ", which has ", elements, " elements"));
  }
  const int size = DTypeSize(spec.dtype);
  if (static_cast<int64_t>(element_bytes.size()) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("an element of ", DTypeName(spec.dtype), " has ", size,
                     " bytes, not ", element_bytes.size()));
  }
  TileMismatch result;
  result.coordinates.resize(box.size());
  // Last dimension fastest, in the tile as in the tensor.
  int64_t rest = element;
  int64_t stride = 1;
  for (int d = static_cast<int>(box.size()) - 1; d >= 0; --d) {
    result.coordinates[d] = box[d].begin + rest % box[d].size();
    rest /= box[d].size();
    result.global_index += result.coordinates[d] * stride;
    stride *= spec.shape[d];
  }
  result.expected_bits =
      PatternBits(spec.dtype, result.global_index, tensor_index);
  for (int k = size - 1; k >= 0; --k) {
    result.found_bits = (result.found_bits << 8) | element_bytes[k];
  }
  return result;
}

std::string FirstMismatchMessage(const BufferDesc& buffer,
                                 const TileMismatch& first,
                                 int64_t mismatches) {
  return absl::StrCat("device ", buffer.device, " tensor ", buffer.tensor,
                      " global index ", first.global_index, ": ",
                      MismatchBitsText(first.expected_bits, first.found_bits),
                      " (", mismatches, " mismatches in tile ",
                      BoxToString(buffer.box), ")");
}

}  // namespace meshcast::worker::cuda
