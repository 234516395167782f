#include "worker/box_runs.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

using RunAt = std::tuple<int64_t, int64_t, int64_t>;

std::vector<RunAt> Runs(const Box& region, const Box& a, const Box& b,
                        int64_t first, int64_t last) {
  std::vector<RunAt> runs;
  ForEachRun(region, a, b, first, last, [&](int64_t x, int64_t y, int64_t n) {
    runs.emplace_back(x, y, n);
  });
  return runs;
}

// Row-major offset of global coordinates `at` inside `box`.
int64_t OffsetIn(const Box& box, const std::vector<int64_t>& at) {
  int64_t offset = 0;
  for (size_t d = 0; d < box.size(); ++d) {
    offset = offset * box[d].size() + (at[d] - box[d].begin);
  }
  return offset;
}

TEST(ForEachRunTest, FullBoxIsOneRun) {
  const Box box = {{0, 4}, {0, 5}, {0, 6}};
  EXPECT_THAT(Runs(box, box, box, 0, 120),
              testing::ElementsAre(RunAt{0, 0, 120}));
}

TEST(ForEachRunTest, RowsOfAColumnSliceAreSeparateRuns) {
  const Box tile = {{0, 3}, {0, 4}};
  const Box slice = {{0, 3}, {1, 3}};
  EXPECT_THAT(
      Runs(slice, tile, slice, 0, 6),
      testing::ElementsAre(RunAt{1, 0, 2}, RunAt{5, 2, 2}, RunAt{9, 4, 2}));
}

TEST(ForEachRunTest, PartialRangeStartsAndEndsMidRun) {
  const Box tile = {{0, 3}, {0, 4}};
  const Box slice = {{0, 3}, {1, 3}};
  EXPECT_THAT(
      Runs(slice, tile, slice, 1, 5),
      testing::ElementsAre(RunAt{2, 1, 1}, RunAt{5, 2, 2}, RunAt{9, 4, 1}));
}

TEST(ForEachRunTest, EmptyRangeVisitsNothing) {
  const Box box = {{0, 2}, {0, 2}};
  EXPECT_TRUE(Runs(box, box, box, 3, 3).empty());
}

TEST(ForEachRunTest, ScalarRegionIsOneElement) {
  EXPECT_THAT(Runs({}, {}, {}, 0, 1), testing::ElementsAre(RunAt{0, 0, 1}));
}

// Every element of the region visited exactly once, in order, at the right
// offsets in both boxes, for an offset region in two different boxes.
TEST(ForEachRunTest, MatchesElementwiseWalk) {
  const Box region = {{2, 4}, {1, 4}, {0, 5}};
  const Box a = {{1, 5}, {1, 4}, {0, 5}};  // covers dims 1 and 2 fully
  const Box b = {{0, 6}, {0, 7}, {0, 5}};  // covers only dim 2 fully
  const int64_t n = NumElements(region);
  for (int64_t first = 0; first <= n; first += 7) {
    for (int64_t last = first; last <= n; last += 5) {
      std::vector<std::pair<int64_t, int64_t>> expected;
      int64_t k = 0;
      for (int64_t i = region[0].begin; i < region[0].end; ++i) {
        for (int64_t j = region[1].begin; j < region[1].end; ++j) {
          for (int64_t l = region[2].begin; l < region[2].end; ++l, ++k) {
            if (k >= first && k < last) {
              expected.emplace_back(OffsetIn(a, {i, j, l}),
                                    OffsetIn(b, {i, j, l}));
            }
          }
        }
      }
      std::vector<std::pair<int64_t, int64_t>> visited;
      ForEachRun(region, a, b, first, last,
                 [&](int64_t x, int64_t y, int64_t len) {
                   for (int64_t e = 0; e < len; ++e) {
                     visited.emplace_back(x + e, y + e);
                   }
                 });
      ASSERT_EQ(visited, expected) << "range [" << first << "," << last << ")";
    }
  }
}

TEST(ForEachRunTest, MergesTrailingDimsCoveredInBothBoxes) {
  const Box region = {{1, 3}, {0, 4}, {0, 5}};
  const Box box = {{0, 4}, {0, 4}, {0, 5}};
  // Dims 1 and 2 are covered: one run for the whole region.
  EXPECT_THAT(Runs(region, box, region, 0, 40),
              testing::ElementsAre(RunAt{20, 0, 40}));
}

TEST(CheckRegionInBoxTest, RejectsOutsideAndRankMismatch) {
  const Box box = {{0, 4}, {2, 6}};
  EXPECT_TRUE(CheckRegionInBox({{1, 2}, {2, 6}}, box, "slice").ok());
  EXPECT_FALSE(CheckRegionInBox({{1, 2}, {1, 6}}, box, "slice").ok());
  EXPECT_FALSE(CheckRegionInBox({{1, 2}}, box, "slice").ok());
  // An empty region is inside anything of the same rank.
  EXPECT_TRUE(CheckRegionInBox({{9, 9}, {0, 1}}, box, "slice").ok());
  EXPECT_FALSE(CheckElementRange(box, 0, 17).ok());
  EXPECT_FALSE(CheckElementRange(box, 3, 2).ok());
  EXPECT_TRUE(CheckElementRange(box, 16, 16).ok());
}

// Pieces tile the box in row-major order, each a box that is one contiguous
// run of the box at its offset, none over the bound.
TEST(SplitBoxTest, PiecesAreContiguousBoundedAndCoverTheBox) {
  const std::vector<Box> boxes = {
      {{2, 9}, {1, 6}, {3, 7}},   // outer rows cut
      {{0, 1}, {0, 1}, {0, 50}},  // only the last dimension is long
      {{0, 3}, {0, 17}},
      {{5, 6}, {0, 4}, {0, 9}, {2, 3}},
  };
  for (const Box& box : boxes) {
    const int64_t n = NumElements(box);
    for (int64_t limit : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{20},
                          int64_t{36}, n - 1, n, n + 5}) {
      SCOPED_TRACE(BoxToString(box) + " limit " + std::to_string(limit));
      const std::vector<BoxPiece> pieces = SplitBox(box, limit);
      int64_t next = 0;
      for (const BoxPiece& piece : pieces) {
        EXPECT_EQ(piece.offset, next);
        const int64_t size = NumElements(piece.box);
        EXPECT_GT(size, 0);
        EXPECT_LE(size, limit);
        EXPECT_TRUE(CheckRegionInBox(piece.box, box, "piece").ok());
        // One run in the box: contiguous, where the offset says.
        EXPECT_THAT(Runs(piece.box, box, piece.box, 0, size),
                    testing::ElementsAre(RunAt{piece.offset, 0, size}));
        next += size;
      }
      EXPECT_EQ(next, n);
      if (limit >= n) {
        EXPECT_EQ(pieces.size(), 1u);
      }
    }
  }
}

TEST(SplitBoxTest, PiecesAreLargeRowBlocks) {
  // 8 rows of 1000: a bound of 2500 elements takes two rows at a time.
  const std::vector<BoxPiece> pieces = SplitBox({{0, 8}, {0, 1000}}, 2500);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[1].box, (Box{{2, 4}, {0, 1000}}));
  EXPECT_EQ(pieces[1].offset, 2000);
}

TEST(SplitBoxTest, EmptyAndScalarBoxes) {
  EXPECT_TRUE(SplitBox({{3, 3}, {0, 4}}, 2).empty());
  const std::vector<BoxPiece> scalar = SplitBox({}, 1);
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_TRUE(scalar[0].box.empty());
  // A bound below 1 still makes progress, one element at a time.
  EXPECT_EQ(SplitBox({{0, 3}}, 0).size(), 3u);
}

}  // namespace
}  // namespace meshcast::worker
