#include "worker/tile_checksum.h"

#include <cstring>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

// A tile of `box` of an int32 tensor whose element at global index g is
// value(g).
TileBuffer Tile(const std::vector<int64_t>& shape, const Box& box,
                int32_t (*value)(int64_t)) {
  TileBuffer tile = *TileBuffer::Create(DType::kInt32, box);
  std::vector<int64_t> coord(box.size());
  int64_t k = 0;
  // Row-major over the box, as the tile stores it.
  std::function<void(size_t, int64_t)> walk = [&](size_t d, int64_t base) {
    if (d == box.size()) {
      const int32_t v = value(base);
      std::memcpy(tile.bytes().data() + 4 * k++, &v, 4);
      return;
    }
    int64_t stride = 1;
    for (size_t e = d + 1; e < shape.size(); ++e) stride *= shape[e];
    for (int64_t c = box[d].begin; c < box[d].end; ++c) walk(d + 1, base + c * stride);
  };
  walk(0, 0);
  return tile;
}

int32_t Value(int64_t g) { return static_cast<int32_t>(g * 31 + 7); }

TEST(TileChecksumTest, TilesThatPartitionATensorAddUp) {
  const std::vector<int64_t> shape = {6, 10};
  const uint64_t whole =
      TileChecksum(Tile(shape, {{0, 6}, {0, 10}}, Value), shape);
  // By rows, by columns, and uneven blocks: always the same sum.
  EXPECT_EQ(TileChecksum(Tile(shape, {{0, 2}, {0, 10}}, Value), shape) +
                TileChecksum(Tile(shape, {{2, 6}, {0, 10}}, Value), shape),
            whole);
  EXPECT_EQ(TileChecksum(Tile(shape, {{0, 6}, {0, 3}}, Value), shape) +
                TileChecksum(Tile(shape, {{0, 6}, {3, 10}}, Value), shape),
            whole);
  EXPECT_EQ(TileChecksum(Tile(shape, {{0, 4}, {0, 7}}, Value), shape) +
                TileChecksum(Tile(shape, {{0, 4}, {7, 10}}, Value), shape) +
                TileChecksum(Tile(shape, {{4, 6}, {0, 10}}, Value), shape),
            whole);
  // An independent reference: the sum of the element terms.
  uint64_t reference = 0;
  for (int64_t g = 0; g < 60; ++g) {
    reference += ElementHash(g, static_cast<uint32_t>(Value(g)));
  }
  EXPECT_EQ(whole, reference);
}

TEST(TileChecksumTest, ChangedOrMovedValuesChangeIt) {
  const std::vector<int64_t> shape = {4, 4};
  TileBuffer tile = Tile(shape, {{0, 4}, {0, 4}}, Value);
  const uint64_t good = TileChecksum(tile, shape);
  // One flipped bit.
  tile.bytes()[17] ^= 0x10;
  EXPECT_NE(TileChecksum(tile, shape), good);
  tile.bytes()[17] ^= 0x10;
  ASSERT_EQ(TileChecksum(tile, shape), good);
  // Two elements swapped: the same values in other places.
  int32_t a, b;
  std::memcpy(&a, tile.bytes().data(), 4);
  std::memcpy(&b, tile.bytes().data() + 20, 4);
  std::memcpy(tile.bytes().data(), &b, 4);
  std::memcpy(tile.bytes().data() + 20, &a, 4);
  EXPECT_NE(TileChecksum(tile, shape), good);
  // The same values in a tile of another box.
  EXPECT_NE(TileChecksum(Tile(shape, {{0, 2}, {0, 4}}, Value), shape),
            TileChecksum(Tile(shape, {{2, 4}, {0, 4}}, Value), shape));
}

TEST(TileChecksumTest, EmptyAndOneDimensional) {
  EXPECT_EQ(TileChecksum(*TileBuffer::Create(DType::kInt32, {{3, 3}}), {8}), 0u);
  const std::vector<int64_t> shape = {8};
  EXPECT_EQ(TileChecksum(Tile(shape, {{0, 8}}, Value), shape),
            TileChecksum(Tile(shape, {{0, 5}}, Value), shape) +
                TileChecksum(Tile(shape, {{5, 8}}, Value), shape));
}

}  // namespace
}  // namespace meshcast::worker
