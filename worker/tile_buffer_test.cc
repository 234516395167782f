#include "worker/tile_buffer.h"

#include <cstring>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "worker/pattern.h"

namespace meshcast::worker {
namespace {

TileBuffer PatternTile(const TensorSpec& spec, const Box& box) {
  auto tile = TileBuffer::Create(spec.dtype, box);
  EXPECT_TRUE(tile.ok());
  EXPECT_TRUE(FillBox(tile->bytes(), box, spec, 0).ok());
  return std::move(*tile);
}

TEST(TileBufferTest, SizesFollowTheBox) {
  auto tile = TileBuffer::Create(DType::kBFloat16, {{2, 5}, {0, 4}});
  ASSERT_TRUE(tile.ok());
  EXPECT_EQ(tile->num_elements(), 12);
  EXPECT_EQ(tile->size_bytes(), 24);
  EXPECT_EQ(tile->bytes().size(), 24u);
  EXPECT_FALSE(TileBuffer::Create(DType::kInt8, {{3, 2}}).ok());
}

// Packs a slice in uneven chunks and unpacks them into a tile with another
// box; the destination then verifies against the pattern on the slice and
// keeps its poison elsewhere.
TEST(TileBufferTest, ChunkedPackUnpackMovesExactlyTheSlice) {
  const TensorSpec spec{{9, 10, 7}, DType::kFloat16};
  const TileBuffer source = PatternTile(spec, {{0, 6}, {0, 10}, {0, 7}});
  auto dest = TileBuffer::Create(spec.dtype, {{3, 9}, {2, 10}, {0, 7}});
  ASSERT_TRUE(dest.ok());
  dest->Fill(0xFF);  // NaN in fp16: never a pattern value

  const Box slice = {{3, 6}, {4, 9}, {1, 6}};
  const int64_t n = NumElements(slice);
  const int64_t chunk = 7;  // does not divide n = 75
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t last = std::min(n, first + chunk);
    std::vector<uint8_t> packed((last - first) * 2);
    ASSERT_TRUE(
        source.PackSlice(slice, first, last, absl::MakeSpan(packed)).ok());
    ASSERT_TRUE(dest->UnpackSlice(slice, first, last, packed).ok());
  }
  auto on_slice = TileBuffer::Create(spec.dtype, slice);
  ASSERT_TRUE(on_slice.ok());
  ASSERT_TRUE(on_slice->CopyRegionFrom(*dest, slice).ok());
  auto verified = VerifyBox(on_slice->bytes(), slice, spec, 0);
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->mismatches, 0);

  auto whole = VerifyBox(dest->bytes(), dest->box(), spec, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->mismatches, dest->num_elements() - n);
}

TEST(TileBufferTest, PackedOrderIsTheSliceRowMajorOrder) {
  const TensorSpec spec{{4, 5}, DType::kInt32};
  const TileBuffer tile = PatternTile(spec, {{0, 4}, {0, 5}});
  const Box slice = {{1, 3}, {2, 4}};
  std::vector<uint8_t> packed(4 * 4);
  ASSERT_TRUE(tile.PackSlice(slice, 0, 4, absl::MakeSpan(packed)).ok());
  const int64_t globals[] = {7, 8, 12, 13};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(std::string(reinterpret_cast<char*>(packed.data()) + 4 * k, 4),
              PatternValue(DType::kInt32, globals[k], 0));
  }
}

TEST(TileBufferTest, EmptySliceAndEmptyTile) {
  auto empty = TileBuffer::Create(DType::kFloat32, {{4, 4}, {0, 3}});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size_bytes(), 0);
  empty->Fill(1);
  EXPECT_TRUE(empty->PackSlice({{4, 4}, {0, 3}}, 0, 0, {}).ok());
  EXPECT_TRUE(empty->UnpackSlice({{4, 4}, {0, 3}}, 0, 0, {}).ok());
  const TensorSpec spec{{4, 5}, DType::kFloat32};
  TileBuffer tile = PatternTile(spec, {{0, 4}, {0, 5}});
  EXPECT_TRUE(tile.PackSlice({{1, 1}, {0, 5}}, 0, 0, {}).ok());
}

TEST(TileBufferTest, RejectsSlicesOutsideTheTileAndWrongSizes) {
  const TensorSpec spec{{4, 5}, DType::kInt8};
  TileBuffer tile = PatternTile(spec, {{0, 2}, {0, 5}});
  std::vector<uint8_t> packed(10);
  EXPECT_EQ(
      tile.PackSlice({{1, 3}, {0, 5}}, 0, 10, absl::MakeSpan(packed)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      tile.PackSlice({{0, 2}, {0, 5}}, 0, 9, absl::MakeSpan(packed)).ok());
  EXPECT_FALSE(
      tile.PackSlice({{0, 2}, {0, 5}}, 0, 11, absl::MakeSpan(packed)).ok());
  EXPECT_FALSE(tile.UnpackSlice({{0, 2}}, 0, 2, packed).ok());
  auto other = TileBuffer::Create(DType::kInt32, {{0, 2}, {0, 5}});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->CopyRegionFrom(tile, {{0, 1}, {0, 5}}).ok());
  EXPECT_FALSE(tile.CopyRegionFrom(tile, {{0, 1}, {0, 5}}).ok());
}

TEST(TileBufferTest, ContiguousBytesViewsExactlyThePackedSlice) {
  const TensorSpec spec{{8, 6, 4}, DType::kInt32};
  const Box tile_box = {{2, 8}, {0, 6}, {0, 4}};
  TileBuffer tile = PatternTile(spec, tile_box);
  // One run: the whole tile, a slab of whole rows, part of one row, part
  // of one plane's rows. Each view must hold what PackSlice packs.
  for (const Box& slice : std::vector<Box>{tile_box,
                                           {{3, 5}, {0, 6}, {0, 4}},
                                           {{4, 5}, {2, 3}, {1, 3}},
                                           {{4, 5}, {1, 4}, {0, 4}}}) {
    std::optional<absl::Span<uint8_t>> view = tile.ContiguousBytes(slice);
    ASSERT_TRUE(view.has_value()) << BoxToString(slice);
    std::vector<uint8_t> packed(NumElements(slice) * 4);
    ASSERT_TRUE(
        tile.PackSlice(slice, 0, NumElements(slice), absl::MakeSpan(packed))
            .ok());
    EXPECT_EQ(std::vector<uint8_t>(view->begin(), view->end()), packed)
        << BoxToString(slice);
    EXPECT_GE(view->data(), tile.bytes().data());
    EXPECT_LE(view->data() + view->size(),
              tile.bytes().data() + tile.bytes().size());
  }
  // Not one run, outside the tile, or empty: no view.
  for (const Box& slice : std::vector<Box>{{{3, 5}, {0, 6}, {0, 2}},
                                           {{3, 5}, {1, 6}, {0, 4}},
                                           {{0, 3}, {0, 6}, {0, 4}},
                                           {{3, 3}, {0, 6}, {0, 4}}}) {
    EXPECT_FALSE(tile.ContiguousBytes(slice).has_value()) << BoxToString(slice);
  }
}

TEST(TileBufferTest, CopyRegionBetweenOverlappingTiles) {
  const TensorSpec spec{{8, 6}, DType::kFloat64};
  const TileBuffer source = PatternTile(spec, {{0, 5}, {0, 6}});
  auto dest = TileBuffer::Create(spec.dtype, {{3, 8}, {1, 6}});
  ASSERT_TRUE(dest.ok());
  dest->Fill(0xFF);
  const Box overlap = Intersect(source.box(), dest->box());
  ASSERT_TRUE(dest->CopyRegionFrom(source, overlap).ok());
  auto whole = VerifyBox(dest->bytes(), dest->box(), spec, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->mismatches, dest->num_elements() - NumElements(overlap));
}

}  // namespace
}  // namespace meshcast::worker
