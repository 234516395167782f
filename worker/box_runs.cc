#include "worker/box_runs.h"

#include <algorithm>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace meshcast::worker {

void ForEachRun(const Box& region, const Box& box_a, const Box& box_b,
                int64_t first, int64_t last,
                absl::FunctionRef<void(int64_t, int64_t, int64_t)> fn) {
  if (first >= last) return;
  const int rank = static_cast<int>(region.size());
  if (rank == 0) {
    fn(0, 0, 1);
    return;
  }
  auto covered_in_both = [&](int d) {
    const int64_t n = region[d].size();
    return n == box_a[d].size() && n == box_b[d].size();
  };
  // Dimensions split..rank-1 are walked as one contiguous run: every
  // dimension after `split` is covered completely in both boxes.
  int split = rank - 1;
  while (split > 0 && covered_in_both(split)) --split;

  absl::InlinedVector<int64_t, 8> stride_a(rank), stride_b(rank);
  int64_t sa = 1, sb = 1;
  for (int d = rank - 1; d >= 0; --d) {
    stride_a[d] = sa;
    stride_b[d] = sb;
    sa *= box_a[d].size();
    sb *= box_b[d].size();
  }
  int64_t run = 1;
  for (int d = split; d < rank; ++d) run *= region[d].size();

  // Offsets of the region's first element in each box.
  int64_t base_a = 0, base_b = 0;
  for (int d = 0; d < rank; ++d) {
    base_a += (region[d].begin - box_a[d].begin) * stride_a[d];
    base_b += (region[d].begin - box_b[d].begin) * stride_b[d];
  }

  // Multi-index over the outer dimensions 0..split-1 of the first run.
  int64_t row = first / run;
  int64_t column = first % run;
  absl::InlinedVector<int64_t, 8> index(split);
  int64_t offset_a = base_a, offset_b = base_b;
  for (int d = split - 1; d >= 0; --d) {
    const int64_t extent = region[d].size();
    index[d] = row % extent;
    row /= extent;
    offset_a += index[d] * stride_a[d];
    offset_b += index[d] * stride_b[d];
  }

  int64_t remaining = last - first;
  while (remaining > 0) {
    const int64_t length = std::min(run - column, remaining);
    fn(offset_a + column, offset_b + column, length);
    remaining -= length;
    column = 0;
    // Advance the outer multi-index by one, carrying into slower dimensions.
    for (int d = split - 1; d >= 0; --d) {
      ++index[d];
      offset_a += stride_a[d];
      offset_b += stride_b[d];
      if (index[d] < region[d].size()) break;
      offset_a -= index[d] * stride_a[d];
      offset_b -= index[d] * stride_b[d];
      index[d] = 0;
    }
  }
}

std::vector<BoxPiece> SplitBox(const Box& box, int64_t max_elements) {
  const int64_t limit = std::max<int64_t>(1, max_elements);
  const int64_t total = NumElements(box);
  if (total <= 0) return {};
  const int rank = static_cast<int>(box.size());
  if (rank == 0 || total <= limit) return {BoxPiece{box, 0}};
  // `cut`: the outermost dimension whose rows are cut; every piece holds
  // whole blocks of the dimensions after it (`inner` elements each).
  int cut = rank - 1;
  int64_t inner = 1;
  while (cut > 0 && inner * box[cut].size() <= limit) {
    inner *= box[cut].size();
    --cut;
  }
  const int64_t rows = box[cut].size();
  const int64_t rows_per_piece = std::max<int64_t>(1, limit / inner);
  int64_t outer = 1;
  for (int d = 0; d < cut; ++d) outer *= box[d].size();

  std::vector<BoxPiece> pieces;
  pieces.reserve(outer * ((rows + rows_per_piece - 1) / rows_per_piece));
  for (int64_t o = 0; o < outer; ++o) {
    BoxPiece piece{box, 0};
    // Dimensions before `cut` hold one index each: o's digits.
    int64_t rest = o;
    for (int d = cut - 1; d >= 0; --d) {
      const int64_t index = rest % box[d].size();
      rest /= box[d].size();
      piece.box[d].begin = box[d].begin + index;
      piece.box[d].end = piece.box[d].begin + 1;
    }
    for (int64_t r = 0; r < rows; r += rows_per_piece) {
      piece.box[cut].begin = box[cut].begin + r;
      piece.box[cut].end = box[cut].begin + std::min(rows, r + rows_per_piece);
      piece.offset = (o * rows + r) * inner;
      pieces.push_back(piece);
    }
  }
  return pieces;
}

absl::Status CheckRegionInBox(const Box& region, const Box& box,
                              const char* what) {
  if (region.size() != box.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", BoxToString(region), " has rank ", region.size(),
        " but the tile ", BoxToString(box), " has rank ", box.size()));
  }
  for (size_t d = 0; d < region.size(); ++d) {
    if (region[d].begin > region[d].end) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", BoxToString(region), " has begin > end in dimension ", d));
    }
  }
  // An empty region holds no element, so it is inside any box of its rank.
  if (IsEmpty(region)) return absl::OkStatus();
  for (size_t d = 0; d < region.size(); ++d) {
    if (region[d].begin < box[d].begin || region[d].end > box[d].end) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", BoxToString(region),
                       " is not inside the tile ", BoxToString(box)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckElementRange(const Box& region, int64_t first, int64_t last) {
  const int64_t n = NumElements(region);
  if (first < 0 || first > last || last > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("element range [", first, ", ", last,
                     ") is not inside [0, ", n, ") of ", BoxToString(region)));
  }
  return absl::OkStatus();
}

}  // namespace meshcast::worker
