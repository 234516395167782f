// The index arithmetic of strided copies between row-major buffers, in a
// form that compiles for host and CUDA device code alike (no Abseil), so the
// GPU pack/unpack kernels (copy_kernels.cu) and host tests share it.
//
// A RegionCopy moves elements [first, last) of a region (counted in the
// region's own row-major order) from one row-major buffer to another. Each
// buffer is a tile holding some box of the tensor, or a packed chunk holding
// exactly elements [first, last) of the region. As in box_runs.h, the
// trailing dimensions that the region covers completely in both buffers are
// merged into rows of `run` contiguous elements; row r lies at
//   base + sum_k index_k(r) * stride[k]
// in each buffer, index_k being r's multi-index over the outer dimensions.
// worker/cuda/device_copy.h builds RegionCopy values from boxes.
//
//   for (int64_t r = FirstRow(copy); r < EndRow(copy); ++r) {
//     int64_t dst, src, length;
//     RowSegment(copy, r, &dst, &src, &length);   // in elements
//     memcpy(out + dst * size, in + src * size, length * size);
//   }
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_CUDA_COPY_CORE_H_
#define MESHCAST_WORKER_CUDA_COPY_CORE_H_

#include <cstdint>

#include "worker/pattern_core.h"  // MESHCAST_HOST_DEVICE

namespace meshcast::worker::cuda {

// Outer (non-merged) dimensions a copy can have; tensors of rank up to
// kMaxCopyOuterRank + 1.
inline constexpr int kMaxCopyOuterRank = 8;

struct RegionCopy {
  int element_size = 1;  // bytes
  int64_t run = 1;       // contiguous elements per row (>= 1)
  int outer_rank = 0;
  int64_t outer_extent[kMaxCopyOuterRank] = {};
  int64_t dst_stride[kMaxCopyOuterRank] = {};  // elements
  int64_t src_stride[kMaxCopyOuterRank] = {};
  // Element offsets of region element 0 in each buffer; negative for a
  // packed chunk that starts at element `first` > 0 (never dereferenced).
  int64_t dst_base = 0;
  int64_t src_base = 0;
  int64_t first = 0;  // region elements [first, last)
  int64_t last = 0;
};

MESHCAST_HOST_DEVICE inline int64_t FirstRow(const RegionCopy& copy) {
  return copy.first / copy.run;
}

// One past the last row touched; FirstRow when the range is empty.
MESHCAST_HOST_DEVICE inline int64_t EndRow(const RegionCopy& copy) {
  if (copy.last <= copy.first) return FirstRow(copy);
  return (copy.last + copy.run - 1) / copy.run;
}

// The part of row `row` inside [first, last): element offsets in the
// destination and source buffers and its length in elements.
MESHCAST_HOST_DEVICE inline void RowSegment(const RegionCopy& copy, int64_t row,
                                            int64_t* dst, int64_t* src,
                                            int64_t* length) {
  const int64_t row_begin = row * copy.run;
  int64_t begin = row_begin;
  int64_t end = row_begin + copy.run;
  if (begin < copy.first) begin = copy.first;
  if (end > copy.last) end = copy.last;
  const int64_t column = begin - row_begin;
  int64_t d = copy.dst_base + column;
  int64_t s = copy.src_base + column;
  int64_t rest = row;
  for (int k = copy.outer_rank - 1; k >= 0; --k) {
    const int64_t index = rest % copy.outer_extent[k];
    rest /= copy.outer_extent[k];
    d += index * copy.dst_stride[k];
    s += index * copy.src_stride[k];
  }
  *dst = d;
  *src = s;
  *length = end - begin;
}

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_COPY_CORE_H_
