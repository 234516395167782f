// Host-only (no GPU): how the GPU verifier describes a tile's first
// mismatch, checked against the CPU verifier (VerifyBox, BufferSet).
#include "worker/cuda/mismatch_report.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/pattern.h"
#include "worker/program.h"

namespace meshcast::worker::cuda {
namespace {

const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

TEST(LocateTileElementTest, PlacesTheElementInItsTensor) {
  const TensorSpec spec{{5, 9, 4}, DType::kInt32};
  const Box box = {{1, 3}, {2, 7}, {0, 4}};  // 2 x 5 x 4 elements
  const uint8_t bytes[] = {0x78, 0x56, 0x34, 0x12};
  // Tile element 27 = (1 * 5 + 1) * 4 + 3: tile coordinates (1, 1, 3),
  // tensor coordinates (2, 3, 3), global index (2 * 9 + 3) * 4 + 3 = 87.
  auto element = LocateTileElement(box, spec, 6, 27, bytes);
  ASSERT_TRUE(element.ok()) << element.status();
  EXPECT_EQ(element->coordinates, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(element->global_index, 87);
  EXPECT_EQ(element->expected_bits, PatternBits(DType::kInt32, 87, 6));
  EXPECT_EQ(element->found_bits, 0x12345678u);

  // The first and last elements of the tile are its corners.
  auto first = LocateTileElement(box, spec, 6, 0, bytes);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->coordinates, (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(first->global_index, (1 * 9 + 2) * 4);
  auto last = LocateTileElement(box, spec, 6, NumElements(box) - 1, bytes);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->coordinates, (std::vector<int64_t>{2, 6, 3}));
  EXPECT_EQ(last->global_index, (2 * 9 + 6) * 4 + 3);
}

TEST(LocateTileElementTest, RefusesWhatIsNotAnElementOfTheTile) {
  const TensorSpec spec{{5, 9}, DType::kFloat16};
  const Box box = {{1, 3}, {2, 7}};  // 10 elements
  const uint8_t two[] = {0, 0};
  const uint8_t four[] = {0, 0, 0, 0};
  EXPECT_TRUE(LocateTileElement(box, spec, 0, 9, two).ok());
  EXPECT_FALSE(LocateTileElement(box, spec, 0, 10, two).ok());
  EXPECT_FALSE(LocateTileElement(box, spec, 0, -1, two).ok());
  EXPECT_FALSE(LocateTileElement(box, spec, 0, 3, four).ok());
  EXPECT_FALSE(LocateTileElement({{1, 6}, {0, 9}}, spec, 0, 0, two).ok());
  EXPECT_FALSE(LocateTileElement({{1, 3}}, spec, 0, 0, two).ok());
  EXPECT_EQ(LocateTileElement(box, spec, 0, 10, two).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// For every dtype and several single corruptions, the element the GPU
// path would fetch is described as the host verifier describes it.
TEST(LocateTileElementTest, AgreesWithTheHostVerifier) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const TensorSpec spec{{11, 6, 7}, dtype};
    const Box box = {{2, 9}, {1, 6}, {3, 7}};
    const int size = DTypeSize(dtype);
    std::vector<uint8_t> tile(NumElements(box) * size);
    ASSERT_TRUE(FillBox(absl::MakeSpan(tile), box, spec, 2).ok());
    for (int64_t element : {int64_t{0}, int64_t{13}, NumElements(box) - 1}) {
      SCOPED_TRACE(element);
      std::vector<uint8_t> corrupted = tile;
      corrupted[element * size + size - 1] ^= 0x41;
      auto host = VerifyBox(corrupted, box, spec, 2);
      ASSERT_TRUE(host.ok()) << host.status();
      ASSERT_EQ(host->mismatches, 1);
      auto located = LocateTileElement(
          box, spec, 2, element,
          absl::MakeConstSpan(corrupted).subspan(element * size, size));
      ASSERT_TRUE(located.ok()) << located.status();
      EXPECT_EQ(located->global_index, host->first_mismatch_index);
      EXPECT_EQ(MismatchBitsText(located->expected_bits, located->found_bits),
                host->first_mismatch);
      // An intact element reads back as the pattern.
      auto intact = LocateTileElement(
          box, spec, 2, element,
          absl::MakeConstSpan(tile).subspan(element * size, size));
      ASSERT_TRUE(intact.ok());
      EXPECT_EQ(intact->found_bits, intact->expected_bits);
    }
  }
}

// The whole first_mismatch line is the CPU BufferSet's, word for word.
TEST(FirstMismatchMessageTest, MatchesTheCpuVerifier) {
  for (DType dtype : {DType::kUInt8, DType::kBFloat16, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    ParsedProgram program;
    program.tensors = {TensorSpec{{12, 10}, dtype}};
    program.local_devices = {0, 2};
    const Box tile_box = {{3, 9}, {2, 10}};  // 6 x 8, pre-copied on device 0
    program.buffers = {
        {0, 0, 0, program.tensors[0].full_box(), BufferRole::kSource},
        {1, 0, 0, tile_box, BufferRole::kDestination},
        // No source on device 2: all poison, but reported after device 0.
        {2, 0, 2, {{0, 4}, {0, 10}}, BufferRole::kDestination},
    };
    Cancellation cancellation;
    auto buffers = BufferSet::Create(program, cancellation, 1);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    TileBuffer* tile = buffers->Find(0, 0, BufferRole::kDestination);
    ASSERT_NE(tile, nullptr);
    const int size = DTypeSize(dtype);
    const int64_t planted[] = {29, 7, 41};  // the first is 7
    for (int64_t element : planted) tile->bytes()[element * size] ^= 0x3C;

    auto summary = buffers->VerifyDestinations(1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    // Device 2's poison counts too (bar the odd 0xFF that is the pattern).
    ASSERT_GT(summary->mismatches, 3 + 4 * 10 / 2);
    auto first = LocateTileElement(
        tile_box, program.tensors[0], 0, 7,
        absl::MakeConstSpan(tile->bytes()).subspan(7 * size, size));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(FirstMismatchMessage(program.buffers[1], *first, 3),
              summary->first_mismatch);
    // Tile element 7: the tile's first row, its eighth column.
    EXPECT_EQ(first->coordinates, (std::vector<int64_t>{3, 9}));
  }
}

}  // namespace
}  // namespace meshcast::worker::cuda
