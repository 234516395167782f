// The strided copy arithmetic (host, always) and the GPU pack/unpack/copy
// kernels against the host TileBuffer (skipped without a GPU).
#include "worker/cuda/device_copy.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/copy_kernels.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_pattern.h"
#include "worker/pattern.h"
#include "worker/tile_buffer.h"

namespace meshcast::worker::cuda {
namespace {

// Runs a RegionCopy on the host with the kernels' RowSegment arithmetic.
void CopyOnHost(const RegionCopy& copy, uint8_t* dst, const uint8_t* src) {
  for (int64_t row = FirstRow(copy); row < EndRow(copy); ++row) {
    int64_t d = 0, s = 0, length = 0;
    RowSegment(copy, row, &d, &s, &length);
    std::memcpy(dst + d * copy.element_size, src + s * copy.element_size,
                length * copy.element_size);
  }
}

// A random box inside `outer` (each dimension non-empty if `outer` is).
Box RandomBoxIn(const Box& outer, std::mt19937& rng) {
  Box box;
  for (const Interval& interval : outer) {
    std::uniform_int_distribution<int64_t> pick(interval.begin, interval.end);
    int64_t a = pick(rng), b = pick(rng);
    if (a > b) std::swap(a, b);
    if (a == b && b < interval.end) ++b;
    box.push_back({a, b});
  }
  return box;
}

struct RandomCase {
  TensorSpec spec;
  Box tile;
  Box slice;
  int64_t first = 0;
  int64_t last = 0;
};

RandomCase MakeCase(std::mt19937& rng) {
  static const DType kTypes[] = {DType::kInt8, DType::kFloat16, DType::kFloat32,
                                 DType::kFloat64};
  RandomCase c;
  const int rank = std::uniform_int_distribution<int>(1, 4)(rng);
  c.spec.dtype = kTypes[std::uniform_int_distribution<int>(0, 3)(rng)];
  for (int d = 0; d < rank; ++d) {
    c.spec.shape.push_back(std::uniform_int_distribution<int64_t>(1, 9)(rng));
  }
  c.tile = RandomBoxIn(c.spec.full_box(), rng);
  // Half the slices are full tiles or full trailing dims: contiguous cases.
  c.slice = rng() % 3 == 0 ? c.tile : RandomBoxIn(c.tile, rng);
  const int64_t n = NumElements(c.slice);
  std::uniform_int_distribution<int64_t> pick(0, n);
  c.first = pick(rng);
  c.last = pick(rng);
  if (c.first > c.last) std::swap(c.first, c.last);
  return c;
}

TileBuffer PatternTile(const TensorSpec& spec, const Box& box, int tensor) {
  TileBuffer tile = *TileBuffer::Create(spec.dtype, box);
  EXPECT_TRUE(FillBox(tile.bytes(), box, spec, tensor).ok());
  return tile;
}

TEST(RegionCopyTest, PackAndUnpackMatchTheHostTileBuffer) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const RandomCase c = MakeCase(rng);
    SCOPED_TRACE(testing::Message() << "tile " << BoxToString(c.tile)
                                    << " slice " << BoxToString(c.slice) << " ["
                                    << c.first << ", " << c.last << ")");
    const int size = DTypeSize(c.spec.dtype);
    const TileBuffer tile = PatternTile(c.spec, c.tile, 1);
    std::vector<uint8_t> expected((c.last - c.first) * size);
    ASSERT_TRUE(
        tile.PackSlice(c.slice, c.first, c.last, absl::MakeSpan(expected))
            .ok());
    auto pack = MakePackCopy(c.slice, c.tile, c.first, c.last, size);
    ASSERT_TRUE(pack.ok()) << pack.status();
    std::vector<uint8_t> packed(expected.size(), 0xEE);
    CopyOnHost(*pack, packed.data(), tile.bytes().data());
    EXPECT_EQ(packed, expected);

    TileBuffer want = *TileBuffer::Create(c.spec.dtype, c.tile);
    want.Fill(0xFF);
    ASSERT_TRUE(want.UnpackSlice(c.slice, c.first, c.last, expected).ok());
    auto unpack = MakeUnpackCopy(c.slice, c.tile, c.first, c.last, size);
    ASSERT_TRUE(unpack.ok()) << unpack.status();
    std::vector<uint8_t> got(want.size_bytes(), 0xFF);
    CopyOnHost(*unpack, got.data(), packed.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.bytes().begin()));
  }
}

TEST(RegionCopyTest, TileToTileMatchesCopyRegionFrom) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    RandomCase c = MakeCase(rng);
    const Box other = RandomBoxIn(c.spec.full_box(), rng);
    const Box region = Intersect(c.tile, other);
    if (IsEmpty(region)) continue;
    SCOPED_TRACE(BoxToString(region));
    const TileBuffer source = PatternTile(c.spec, other, 2);
    TileBuffer want = *TileBuffer::Create(c.spec.dtype, c.tile);
    want.Fill(0xFF);
    ASSERT_TRUE(want.CopyRegionFrom(source, region).ok());
    auto copy = MakeTileCopy(region, c.tile, other, DTypeSize(c.spec.dtype));
    ASSERT_TRUE(copy.ok()) << copy.status();
    std::vector<uint8_t> got(want.size_bytes(), 0xFF);
    CopyOnHost(*copy, got.data(), source.bytes().data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.bytes().begin()));
  }
}

TEST(RegionCopyTest, ContiguousSlicesAreOneSegment) {
  const Box tile = {{0, 8}, {0, 16}, {0, 4}};
  // Whole rows of a full-width tile: one segment, whatever the chunk.
  auto rows = MakePackCopy({{2, 6}, {0, 16}, {0, 4}}, tile, 5, 200, 4);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(IsSingleSegment(*rows));
  EXPECT_EQ(rows->run, 4 * 16 * 4);
  // A column band is strided.
  auto band = MakePackCopy({{0, 8}, {4, 8}, {0, 4}}, tile, 0, 128, 4);
  ASSERT_TRUE(band.ok());
  EXPECT_FALSE(IsSingleSegment(*band));
  EXPECT_EQ(band->run, 16);
  EXPECT_EQ(band->outer_rank, 1);  // dimension 0; 1 and 2 form the rows
  // Errors name the region.
  EXPECT_FALSE(MakePackCopy({{0, 9}, {0, 16}, {0, 4}}, tile, 0, 1, 4).ok());
  EXPECT_FALSE(MakePackCopy({{0, 8}, {0, 16}, {0, 4}}, tile, 3, 2, 4).ok());
}

class DeviceCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount reports none); "
                      "GPU copy kernels not tested";
    }
    stream_ = *CudaStream::Create(0);
  }

  std::vector<uint8_t> ToHost(const DeviceMemory& memory) {
    std::vector<uint8_t> host(memory.size());
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(host.data(), memory.data(), host.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }
  DeviceMemory ToDevice(absl::Span<const uint8_t> bytes) {
    DeviceMemory memory = *DeviceMemory::Allocate(0, bytes.size());
    if (!bytes.empty()) {
      EXPECT_EQ(cudaMemcpy(memory.data(), bytes.data(), bytes.size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    return memory;
  }

  CudaStream stream_;
};

// Every random case, on the GPU, against the host TileBuffer: pack a chunk,
// unpack it into a poisoned tile, and copy a region between tiles.
TEST_F(DeviceCopyTest, PackUnpackAndTileCopyMatchTheHost) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomCase c = MakeCase(rng);
    SCOPED_TRACE(testing::Message() << "tile " << BoxToString(c.tile)
                                    << " slice " << BoxToString(c.slice) << " ["
                                    << c.first << ", " << c.last << ")");
    const int size = DTypeSize(c.spec.dtype);
    const TileBuffer tile = PatternTile(c.spec, c.tile, 1);
    std::vector<uint8_t> expected((c.last - c.first) * size);
    ASSERT_TRUE(
        tile.PackSlice(c.slice, c.first, c.last, absl::MakeSpan(expected))
            .ok());
    DeviceMemory device_tile = ToDevice(tile.bytes());
    DeviceMemory chunk = *DeviceMemory::Allocate(0, expected.size());
    auto pack = MakePackCopy(c.slice, c.tile, c.first, c.last, size);
    ASSERT_TRUE(pack.ok());
    ASSERT_TRUE(EnqueueRegionCopy({chunk.data(), 0}, {device_tile.data(), 0},
                                  *pack, stream_.get(), 0)
                    .ok());
    EXPECT_EQ(ToHost(chunk), expected);

    TileBuffer want = *TileBuffer::Create(c.spec.dtype, c.tile);
    want.Fill(0xFF);
    ASSERT_TRUE(want.UnpackSlice(c.slice, c.first, c.last, expected).ok());
    std::vector<uint8_t> poison(want.size_bytes(), 0xFF);
    DeviceMemory target = ToDevice(poison);
    auto unpack = MakeUnpackCopy(c.slice, c.tile, c.first, c.last, size);
    ASSERT_TRUE(unpack.ok());
    ASSERT_TRUE(EnqueueRegionCopy({target.data(), 0}, {chunk.data(), 0},
                                  *unpack, stream_.get(), 0)
                    .ok());
    const std::vector<uint8_t> got = ToHost(target);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.bytes().begin()));
  }
}

// Long rows take the warp-per-row kernel, odd sizes the narrow words.
TEST_F(DeviceCopyTest, LargeStridedCopyInEveryAlignment) {
  for (DType dtype : {DType::kInt8, DType::kFloat16, DType::kFloat32}) {
    const TensorSpec spec{{64, 1031}, dtype};
    const Box tile = spec.full_box();
    const Box slice = {{3, 61}, {1, 1030}};  // rows of 1029 elements
    const int size = DTypeSize(dtype);
    const TileBuffer host = PatternTile(spec, tile, 5);
    std::vector<uint8_t> expected(NumElements(slice) * size);
    ASSERT_TRUE(
        host.PackSlice(slice, 0, NumElements(slice), absl::MakeSpan(expected))
            .ok());
    DeviceMemory device_tile = ToDevice(host.bytes());
    DeviceMemory chunk = *DeviceMemory::Allocate(0, expected.size());
    auto pack = MakePackCopy(slice, tile, 0, NumElements(slice), size);
    ASSERT_TRUE(pack.ok());
    ASSERT_GE(pack->run * size, kWarpRowBytes);
    ASSERT_TRUE(EnqueueRegionCopy({chunk.data(), 0}, {device_tile.data(), 0},
                                  *pack, stream_.get(), 0)
                    .ok());
    EXPECT_EQ(ToHost(chunk), expected) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace meshcast::worker::cuda
