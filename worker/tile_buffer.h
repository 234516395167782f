// TileBuffer: host memory holding one box of a tensor in row-major order.
//
// The executor keeps one TileBuffer per (device, tensor, role) of a virtual
// CPU device. Slices move between tiles as packed byte ranges: a slice's
// elements in the slice's own row-major order, cut into chunks [first, last)
// for pipelining, so a chunk can be sent as one contiguous message:
//
//   std::vector<uint8_t> chunk((last - first) * tile.element_size());
//   RETURN_IF_ERROR(src.PackSlice(slice, first, last, absl::MakeSpan(chunk)));
//   RETURN_IF_ERROR(dst.UnpackSlice(slice, first, last, chunk));
//
// Copies are memcpy of the longest contiguous runs (see box_runs.h).
// Thread safety: none of its own. Concurrent calls that touch disjoint
// regions (or only read) are safe, which is how concurrent steps use it.
#ifndef MESHCAST_WORKER_TILE_BUFFER_H_
#define MESHCAST_WORKER_TILE_BUFFER_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/tensor.h"

namespace meshcast::worker {

class TileBuffer {
 public:
  // Allocates a tile of `box` (which may be empty) for `dtype` elements.
  // The contents are uninitialized until Fill, FillBox or a copy writes them.
  // InvalidArgument for a box with begin > end.
  static absl::StatusOr<TileBuffer> Create(DType dtype, Box box);
  // A tile over memory someone else owns (a user buffer, user_buffers.h):
  // `data` holds exactly the tile's bytes in row-major order and stays
  // valid while `owner` lives; the tile keeps `owner`. Errors as Create's,
  // and InvalidArgument when `size_bytes` is not the tile's size.
  static absl::StatusOr<TileBuffer> Wrap(DType dtype, Box box, uint8_t* data,
                                         int64_t size_bytes,
                                         std::shared_ptr<const void> owner);

  TileBuffer(TileBuffer&&) = default;
  TileBuffer& operator=(TileBuffer&&) = default;
  // A copy would alias the bytes: tiles are moved, never copied.
  TileBuffer(const TileBuffer&) = delete;
  TileBuffer& operator=(const TileBuffer&) = delete;

  DType dtype() const { return dtype_; }
  const Box& box() const { return box_; }
  int element_size() const { return element_size_; }
  int64_t num_elements() const { return num_elements_; }
  int64_t size_bytes() const { return num_elements_ * element_size_; }
  absl::Span<uint8_t> bytes() { return {data_, size_t(size_bytes())}; }
  absl::Span<const uint8_t> bytes() const {
    return {data_, size_t(size_bytes())};
  }

  // Sets every byte to `value`.
  void Fill(uint8_t value);

  // Copies elements [first, last) of `slice` (in the slice's row-major
  // order) into `out`, which must hold exactly (last - first) elements.
  // InvalidArgument if the slice is not inside the tile, the range is not
  // inside the slice, or `out` has the wrong size.
  absl::Status PackSlice(const Box& slice, int64_t first, int64_t last,
                         absl::Span<uint8_t> out) const;

  // The inverse of PackSlice: writes packed elements [first, last) of
  // `slice` from `in` into the tile.
  absl::Status UnpackSlice(const Box& slice, int64_t first, int64_t last,
                           absl::Span<const uint8_t> in);

  // The bytes of `slice` inside this tile when its elements are one
  // contiguous run of the tile, in the slice's row-major order (the whole
  // tile, a slab of whole trailing rows, a run within one row): a view to
  // compute on in place instead of packing a copy. nullopt when they are
  // not, or when the slice is not inside the tile or is empty.
  std::optional<absl::Span<uint8_t>> ContiguousBytes(const Box& slice);

  // Copies `region` from `source` (same dtype) into this tile; the region
  // must lie inside both tiles. `source` must not be this tile.
  absl::Status CopyRegionFrom(const TileBuffer& source, const Box& region);

 private:
  TileBuffer(DType dtype, Box box);

  DType dtype_;
  Box box_;
  int element_size_;
  int64_t num_elements_;
  // What keeps data_ valid: the tile's own allocation, or a user buffer.
  std::shared_ptr<const void> storage_;
  uint8_t* data_ = nullptr;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_TILE_BUFFER_H_
