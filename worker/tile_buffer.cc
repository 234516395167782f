#include "worker/tile_buffer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/host_bytes.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"

namespace meshcast::worker {
namespace {

absl::Status CheckPackedSize(size_t size, int64_t first, int64_t last,
                             int element_size) {
  const int64_t expected = (last - first) * element_size;
  if (static_cast<int64_t>(size) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed buffer has ", size, " bytes, expected ", expected,
                     " for elements [", first, ", ", last, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckBox(const Box& box) {
  for (size_t d = 0; d < box.size(); ++d) {
    if (box[d].begin > box[d].end || box[d].begin < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tile box ", BoxToString(box),
          " has a negative begin or begin > end in dimension ", d));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TileBuffer> TileBuffer::Create(DType dtype, Box box) {
  RETURN_IF_ERROR(CheckBox(box));
  TileBuffer tile(dtype, std::move(box));
  // Uninitialized on purpose: tiles are filled right away (pattern or
  // poison), and zeroing gigabytes first would double the set-up cost. On
  // huge pages where large: the fill's first touch is most of a large
  // job's set-up on a virtual machine, one fault per 4 KiB page otherwise.
  if (tile.size_bytes() > 0) {
    std::shared_ptr<uint8_t[]> storage(
        AllocateHostBytes(tile.size_bytes()).release(), HostBytesFree());
    tile.data_ = storage.get();
    tile.storage_ = std::move(storage);
  }
  return tile;
}

absl::StatusOr<TileBuffer> TileBuffer::Wrap(DType dtype, Box box,
                                            uint8_t* data, int64_t size_bytes,
                                            std::shared_ptr<const void> owner) {
  RETURN_IF_ERROR(CheckBox(box));
  TileBuffer tile(dtype, std::move(box));
  if (size_bytes != tile.size_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a buffer of ", size_bytes, " bytes cannot hold tile ",
                     BoxToString(tile.box()), " (", tile.size_bytes(),
                     " bytes)"));
  }
  tile.data_ = data;
  tile.storage_ = std::move(owner);
  return tile;
}

TileBuffer::TileBuffer(DType dtype, Box box)
    : dtype_(dtype),
      box_(std::move(box)),
      element_size_(DTypeSize(dtype)),
      num_elements_(NumElements(box_)) {}

void TileBuffer::Fill(uint8_t value) {
  if (size_bytes() > 0) std::memset(data_, value, size_bytes());
}

absl::Status TileBuffer::PackSlice(const Box& slice, int64_t first,
                                   int64_t last,
                                   absl::Span<uint8_t> out) const {
  RETURN_IF_ERROR(CheckRegionInBox(slice, box_, "slice"));
  RETURN_IF_ERROR(CheckElementRange(slice, first, last));
  RETURN_IF_ERROR(CheckPackedSize(out.size(), first, last, element_size_));
  const int64_t size = element_size_;
  ForEachRun(slice, box_, slice, first, last,
             [&](int64_t in_tile, int64_t in_slice, int64_t length) {
               std::memcpy(out.data() + (in_slice - first) * size,
                           data_ + in_tile * size, length * size);
             });
  return absl::OkStatus();
}

std::optional<absl::Span<uint8_t>> TileBuffer::ContiguousBytes(
    const Box& slice) {
  if (!CheckRegionInBox(slice, box_, "slice").ok() || IsEmpty(slice)) {
    return std::nullopt;
  }
  const int64_t elements = NumElements(slice);
  int runs = 0;
  int64_t offset = 0;
  ForEachRun(slice, box_, slice, 0, elements,
             [&](int64_t in_tile, int64_t, int64_t) {
               if (runs++ == 0) offset = in_tile;
             });
  if (runs != 1) return std::nullopt;
  return absl::MakeSpan(data_ + offset * element_size_,
                        static_cast<size_t>(elements * element_size_));
}

absl::Status TileBuffer::UnpackSlice(const Box& slice, int64_t first,
                                     int64_t last,
                                     absl::Span<const uint8_t> in) {
  RETURN_IF_ERROR(CheckRegionInBox(slice, box_, "slice"));
  RETURN_IF_ERROR(CheckElementRange(slice, first, last));
  RETURN_IF_ERROR(CheckPackedSize(in.size(), first, last, element_size_));
  const int64_t size = element_size_;
  ForEachRun(slice, box_, slice, first, last,
             [&](int64_t in_tile, int64_t in_slice, int64_t length) {
               std::memcpy(data_ + in_tile * size,
                           in.data() + (in_slice - first) * size,
                           length * size);
             });
  return absl::OkStatus();
}

absl::Status TileBuffer::CopyRegionFrom(const TileBuffer& source,
                                        const Box& region) {
  if (source.dtype_ != dtype_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy ", DTypeName(source.dtype_), " into a ",
                     DTypeName(dtype_), " tile"));
  }
  if (&source == this) {
    return absl::InvalidArgumentError("cannot copy a tile into itself");
  }
  RETURN_IF_ERROR(CheckRegionInBox(region, box_, "region"));
  RETURN_IF_ERROR(CheckRegionInBox(region, source.box_, "region"));
  const int64_t size = element_size_;
  ForEachRun(region, box_, source.box_, 0, NumElements(region),
             [&](int64_t in_this, int64_t in_source, int64_t length) {
               std::memcpy(data_ + in_this * size,
                           source.data_ + in_source * size,
                           length * size);
             });
  return absl::OkStatus();
}

}  // namespace meshcast::worker
