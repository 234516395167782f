// Index arithmetic over boxes, shared by the kernels' files: row-major
// offsets inside a box, global row-major indices inside a tensor, and a walk
// over a box's contiguous rows. (worker/box_runs.h does the general
// two-box version for the data plane; this library stays free of
// meshcast_worker, which links it.)
//
//   ForEachBoxRow(box, spec.shape, [&](int64_t offset, int64_t global,
//                                      int64_t length) { ... });
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_KERNELS_BOX_INDEX_H_
#define MESHCAST_WORKER_KERNELS_BOX_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "planner/tensor.h"

namespace meshcast::worker::kernels_internal {

// Row-major index of `coord` in a tensor of `shape`.
inline int64_t GlobalIndex(absl::Span<const int64_t> coord,
                           absl::Span<const int64_t> shape) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coord[d];
  return index;
}

// Row-major offset of `coord` inside `box` (coord must lie in the box).
inline int64_t OffsetInBox(absl::Span<const int64_t> coord, const Box& box) {
  int64_t offset = 0;
  for (size_t d = 0; d < box.size(); ++d) {
    offset = offset * box[d].size() + (coord[d] - box[d].begin);
  }
  return offset;
}

// The coordinate of element `offset` of `box` (row-major) into `coord`.
inline void CoordInBox(int64_t offset, const Box& box, int64_t* coord) {
  for (size_t d = box.size(); d-- > 0;) {
    const int64_t extent = box[d].size();
    coord[d] = box[d].begin + offset % extent;
    offset /= extent;
  }
}

// The coordinate of global row-major index `index` of a tensor of `shape`.
inline void CoordOfIndex(int64_t index, absl::Span<const int64_t> shape,
                         int64_t* coord) {
  for (size_t d = shape.size(); d-- > 0;) {
    coord[d] = index % shape[d];
    index /= shape[d];
  }
}

inline bool BoxContains(const Box& box, absl::Span<const int64_t> coord) {
  for (size_t d = 0; d < box.size(); ++d) {
    if (coord[d] < box[d].begin || coord[d] >= box[d].end) return false;
  }
  return true;
}

// Calls fn(offset_in_box, global_index, length) for every row of `box` (the
// last dimension's run; the whole box for rank 0), in row-major order.
template <typename Fn>
void ForEachBoxRow(const Box& box, absl::Span<const int64_t> shape, Fn&& fn) {
  if (box.empty()) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  for (const Interval& i : box) {
    if (i.size() == 0) return;
  }
  const size_t rank = box.size();
  const int64_t length = box[rank - 1].size();
  std::vector<int64_t> coord(rank);
  for (size_t d = 0; d < rank; ++d) coord[d] = box[d].begin;
  int64_t offset = 0;
  while (true) {
    fn(offset, GlobalIndex(coord, shape), length);
    offset += length;
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++coord[d] < box[d].end) break;
      coord[d] = box[d].begin;
    }
  }
}

}  // namespace meshcast::worker::kernels_internal

#endif  // MESHCAST_WORKER_KERNELS_BOX_INDEX_H_
