#include "worker/buffer_set.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/box_runs.h"
#include "worker/pattern.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;
using testing::TestJob;

// Device 0 holds rows [0, 40) of a 60x33 float32 tensor as its source and
// rows [20, 60) as its destination: rows [20, 40) are pre-copied, rows
// [40, 60) stay poisoned. Device 1 has a destination of the whole tensor.
ParsedProgram OverlapProgram() {
  TestJob job(1, 2, "job-buffers");
  const int t = job.AddTensor({{60, 33}, DType::kFloat32});
  job.AddBuffer(0, t, {{0, 40}, {0, 33}}, BufferRole::kSource);
  job.AddBuffer(0, t, {{20, 60}, {0, 33}}, BufferRole::kDestination);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  EXPECT_TRUE(program.ok()) << program.status();
  return *program;
}

// Slices of every tile Create fills, with `options`.
int FillSlices(const ParsedProgram& program, const BufferSetOptions& options) {
  int slices = 0;
  for (const BufferDesc& buffer : program.buffers) {
    slices += SplitBox(buffer.box, options.slicing.elements(DTypeSize(
                                       program.tensors[buffer.tensor].dtype)))
                  .size();
  }
  return slices;
}

BufferSetOptions SmallSlices(int threads) {
  BufferSetOptions options;
  options.threads = threads;
  options.slicing.bytes = 256;  // 64 elements: several slices per row block
  return options;
}

TEST(BufferSetTest, SlicedFillCopyAndVerifyMatchWholeTiles) {
  const ParsedProgram program = OverlapProgram();
  const Cancellation cancellation;
  absl::StatusOr<BufferSet> sliced =
      BufferSet::Create(program, cancellation, SmallSlices(3));
  absl::StatusOr<BufferSet> whole = BufferSet::Create(program, cancellation, 1);
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (const BufferDesc& buffer : program.buffers) {
    const TileBuffer* a =
        sliced->Find(buffer.device, buffer.tensor, buffer.role);
    const TileBuffer* b =
        whole->Find(buffer.device, buffer.tensor, buffer.role);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a->size_bytes(), b->size_bytes());
    EXPECT_EQ(
        std::memcmp(a->bytes().data(), b->bytes().data(), a->size_bytes()), 0)
        << "device " << buffer.device << " role " << int(buffer.role);
  }
  // Break one pre-copied element of device 0's destination (global row 30,
  // column 5) in both sets.
  for (BufferSet* set : {&*sliced, &*whole}) {
    TileBuffer* tile = set->Find(0, 0, BufferRole::kDestination);
    tile->bytes()[((30 - 20) * 33 + 5) * 4] ^= 1;
  }
  absl::StatusOr<VerificationSummary> a =
      sliced->VerifyDestinations(cancellation);
  absl::StatusOr<VerificationSummary> b = whole->VerifyDestinations(1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->elements, 40 * 33 + 60 * 33);
  // Device 0: rows [40, 60) poisoned plus the broken one; device 1: all.
  EXPECT_EQ(a->mismatches, 20 * 33 + 1 + 60 * 33);
  EXPECT_EQ(a->elements, b->elements);
  EXPECT_EQ(a->mismatches, b->mismatches);
  EXPECT_EQ(a->first_mismatch, b->first_mismatch);
  EXPECT_THAT(a->first_mismatch,
              HasSubstr(absl::StrCat("device 0 tensor 0 global index ",
                                     30 * 33 + 5, ":")));
}

// With one thread the slices run in order: a cancellation set by the k-th
// slice's hook is seen before slice k + 1, in the fill and in the
// pre-copy.
TEST(BufferSetTest, CancellationStopsFillAndPreCopyWithinASlice) {
  const ParsedProgram program = OverlapProgram();
  BufferSetOptions options = SmallSlices(1);
  const int fills = FillSlices(program, options);
  ASSERT_GT(fills, 20);
  for (int cancel_at : {3, fills + 2}) {
    SCOPED_TRACE(cancel_at);
    Cancellation cancellation;
    int calls = 0;
    options.slicing.before_slice = [&] {
      if (++calls == cancel_at) cancellation.Cancel("stop here");
    };
    absl::StatusOr<BufferSet> set =
        BufferSet::Create(program, cancellation, options);
    EXPECT_EQ(set.status().code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(set.status().message(), HasSubstr("stop here"));
    EXPECT_EQ(calls, cancel_at);
  }
}

TEST(BufferSetTest, CancellationStopsVerificationWithinASlice) {
  const ParsedProgram program = OverlapProgram();
  Cancellation cancellation;
  BufferSetOptions options = SmallSlices(1);
  int calls = 0;
  int cancel_at = -1;
  options.slicing.before_slice = [&] {
    if (++calls == cancel_at) cancellation.Cancel("verification cancelled");
  };
  absl::StatusOr<BufferSet> set =
      BufferSet::Create(program, cancellation, options);
  ASSERT_TRUE(set.ok()) << set.status();
  calls = 0;
  cancel_at = 4;
  absl::StatusOr<VerificationSummary> summary =
      set->VerifyDestinations(cancellation);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 4);
}

// Fill made slow (20 ms a slice, ~10 s in all on 4 threads): cancelled
// after 0.3 s, Create returns within a couple of slices, not at the end.
TEST(BufferSetTest, CancelledSlowFillEndsPromptly) {
  TestJob job(1, 1, "job-slow");
  const int t = job.AddTensor({{2048, 1024}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  BufferSetOptions options;
  options.threads = 4;
  options.slicing.bytes = 1024;  // 2048 slices
  std::atomic<int> calls{0};
  options.slicing.before_slice = [&] {
    ++calls;
    absl::SleepFor(absl::Milliseconds(20));
  };
  Cancellation cancellation;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancellation.Cancel("cancelled by user");
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<BufferSet> set =
      BufferSet::Create(*program, cancellation, options);
  const absl::Duration elapsed = absl::Now() - start;
  canceller.join();
  EXPECT_EQ(set.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(elapsed, absl::Seconds(3));
  EXPECT_LT(calls.load(), 2048 / 2);
}

// A tile the host can never hold (64 PiB: the allocation fails at once,
// nothing is touched) is RESOURCE_EXHAUSTED naming it, not an exception.
TEST(BufferSetTest, ImpossibleTileIsResourceExhausted) {
  TestJob job(1, 1, "job-huge");
  const int t = job.AddTensor(
      {{int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 16}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kDestination);
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  const Cancellation cancellation;
  absl::StatusOr<BufferSet> set = BufferSet::Create(*program, cancellation);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(set.status().message(), HasSubstr("64.0 PiB tile of device 0"));
}

}  // namespace
}  // namespace meshcast::worker
