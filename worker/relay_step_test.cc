// Relay steps across workers on both paths of relay_step.cc: direct (the
// slice is one contiguous range of the tile, so chunks are sent from and
// received into the tile at an offset) and staged (anything else). Every
// destination element is verified against the pattern.
#include "worker/relay_step.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/executor.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

ExecutorOptions SmallChunks() {
  ExecutorOptions options;
  options.relay.chunk_bytes = 96;  // many chunks, more than the window
  options.relay.pipeline_depth = 2;
  return options;
}

struct Case {
  const char* name;
  std::vector<int64_t> shape;
  Box source_box;       // the sender's tile
  Box destination_box;  // every receiver's tile
  Box slice;
  int64_t verified;     // destination elements checked
  int64_t mismatches;   // destination elements outside the slice
};

// A chain 0 -> 2 -> 3 -> 1 over two workers of two devices: worker 0 sends
// (position 0) and receives last (position 3); worker 1 receives into device
// 2, copies to device 3 and forwards from there.
void RunChain(const Case& c) {
  SCOPED_TRACE(c.name);
  TestJob job(2, 2, c.name);
  const int t = job.AddTensor({c.shape, DType::kInt32});
  job.AddBuffer(0, t, c.source_box, BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, c.destination_box, BufferRole::kDestination);
  }
  job.AddTransfer(t, c.slice, {0, 2, 3, 1});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  for (size_t w = 0; w < outcome.results.size(); ++w) {
    ASSERT_TRUE(outcome.results[w].ok())
        << "worker " << w << ": " << outcome.results[w].status();
  }
  EXPECT_EQ(outcome.elements_verified, c.verified);
  EXPECT_EQ(outcome.mismatches, c.mismatches);
}

TEST(RelayStepTest, WholeTensorGoesDirect) {
  RunChain({"whole", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {0, 17}},
            {{0, 40}, {0, 17}}, 3 * 40 * 17, 0});
}

TEST(RelayStepTest, RowsInsideLargerTilesGoDirectAtAnOffset) {
  // Slice rows [10, 30) of tiles that start at rows 0 (sender) and 5
  // (receivers): offsets 10 * 17 and 5 * 17 elements.
  RunChain({"rows", {40, 17}, {{0, 40}, {0, 17}}, {{5, 35}, {0, 17}},
            {{10, 30}, {0, 17}}, 3 * 30 * 17, 3 * 10 * 17});
}

TEST(RelayStepTest, ThreeDimensionsContiguousAfterAUnitDimension) {
  // [1:2, 2:5, 0:5] of a [4, 6, 5] tile: one index of dimension 0, then a
  // range of dimension 1 over full rows of dimension 2.
  RunChain({"unit-dim", {4, 6, 5}, {{0, 4}, {0, 6}, {0, 5}},
            {{0, 4}, {0, 6}, {0, 5}}, {{1, 2}, {2, 5}, {0, 5}}, 3 * 4 * 6 * 5,
            3 * (4 * 6 * 5 - 3 * 5)});
}

TEST(RelayStepTest, ColumnsAreStaged) {
  RunChain({"columns", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {0, 17}},
            {{0, 40}, {3, 11}}, 3 * 40 * 17, 3 * 40 * 9});
}

TEST(RelayStepTest, StagedSenderDirectReceivers) {
  // Columns [3, 11) of the sender's full tile are not contiguous there, but
  // they are the whole of the receivers' column-shard tiles.
  RunChain({"column-shard", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {3, 11}},
            {{0, 40}, {3, 11}}, 3 * 40 * 8, 0});
}

}  // namespace
}  // namespace meshcast::worker
