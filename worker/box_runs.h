// Contiguous runs of a box region inside row-major tiles.
//
// Every strided copy in the worker (packing a slice for the wire, unpacking
// it into a destination tile, copying between two tiles, filling or verifying
// the pattern) walks a region of the tensor that lies inside two row-major
// boxes at once. ForEachRun visits that region as the fewest contiguous runs:
// trailing dimensions that the region covers completely in both boxes are
// merged into one run, so a full tile is a single run and a slab of rows is
// one run per outer index. Callers memcpy each run.
//
//   ForEachRun(slice, tile_box, slice, first, last,
//              [&](int64_t in_tile, int64_t in_packed, int64_t length) {...});
//
// SplitBox cuts a box into pieces of bounded size that are boxes themselves,
// so long loops over a tile (fill, verification, copies) can stop between
// pieces, e.g. to notice a cancellation.
//
// Offsets and lengths are in elements. Thread safety: pure functions.
#ifndef MESHCAST_WORKER_BOX_RUNS_H_
#define MESHCAST_WORKER_BOX_RUNS_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "planner/tensor.h"

namespace meshcast::worker {

// Calls fn(offset_in_a, offset_in_b, length) for the contiguous runs that
// cover elements [first, last) of `region` in the region's own row-major
// order, in increasing order. Offsets are row-major element offsets inside
// `box_a` and `box_b`. Preconditions (see CheckRegionInBoxes): equal ranks,
// `region` inside both boxes, 0 <= first <= last <= NumElements(region).
// A rank-0 (scalar) region has one element.
void ForEachRun(const Box& region, const Box& box_a, const Box& box_b,
                int64_t first, int64_t last,
                absl::FunctionRef<void(int64_t, int64_t, int64_t)> fn);

// OK if `region` has the rank of `box` and lies inside it; otherwise
// InvalidArgument naming `what` (e.g. "slice") and both boxes.
absl::Status CheckRegionInBox(const Box& region, const Box& box,
                              const char* what);

// OK if 0 <= first <= last <= NumElements(region); otherwise InvalidArgument.
absl::Status CheckElementRange(const Box& region, int64_t first, int64_t last);

// A piece of a box: a sub-box whose elements are consecutive in the box's
// row-major order, the first of them being element `offset` of the box.
struct BoxPiece {
  Box box;
  int64_t offset = 0;
};

// Cuts `box` into pieces of at most max(1, max_elements) elements, in
// row-major order: the pieces cover the box exactly, and piece i + 1 starts
// where piece i ends. A piece is a run of whole rows of the outermost
// dimension that can be cut, so pieces are as large as the bound allows
// (over half of it, except the last piece of a row). No piece for an empty
// box; a box within the bound (or of rank 0) is one piece.
std::vector<BoxPiece> SplitBox(const Box& box, int64_t max_elements);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_BOX_RUNS_H_
