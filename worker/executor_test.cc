#include "worker/executor.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/gloo_communicator.h"
#include "worker/in_memory_kv_store.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

// Small chunks so that even small slices are pipelined over many chunks.
ExecutorOptions SmallChunks() {
  ExecutorOptions options;
  options.relay.chunk_bytes = 1000;
  options.relay.pipeline_depth = 3;
  return options;
}

void ExpectAllVerified(const TestJobOutcome& outcome, int64_t elements) {
  for (size_t w = 0; w < outcome.results.size(); ++w) {
    ASSERT_TRUE(outcome.results[w].ok())
        << "worker " << w << ": " << outcome.results[w].status();
  }
  EXPECT_EQ(outcome.mismatches, 0);
  EXPECT_EQ(outcome.elements_verified, elements);
}

// One chain over 6 devices of 2 workers: local hops on both sides of one
// inter-worker hop.
TEST(ExecutorTest, BroadcastChainAcrossWorkers) {
  TestJob job(2, 3);
  const int t = job.AddTensor({{64, 33}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d = 1; d < 6; ++d) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2, 3, 4, 5});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, 5 * 64 * 33);
  // Worker 0 receives on devices 1 and 2, worker 1 on 3, 4 and 5.
  ASSERT_TRUE(outcome.results[0].ok());
  EXPECT_EQ(outcome.results[0]->bytes_moved(), 2 * 64 * 33 * 4);
  EXPECT_EQ(outcome.results[1]->bytes_moved(), 3 * 64 * 33 * 4);
  ASSERT_EQ(outcome.results[1]->steps_size(), 1);
  EXPECT_EQ(outcome.results[1]->steps(0).step(), 0);
  EXPECT_EQ(outcome.results[1]->steps(0).worker(), "worker1");
  EXPECT_EQ(outcome.results[1]->steps(0).bytes(), 64 * 33 * 4);
}

// A chain that leaves worker 0, comes back and leaves again: worker 0 runs
// two segments of the same step (send at position 0, relay at position 2).
TEST(ExecutorTest, ChainThatAlternatesBetweenWorkers) {
  TestJob job(2, 2);
  const int t = job.AddTensor({{50, 21}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, {{5, 45}, {0, 21}}, {0, 2, 1, 3});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok);
  // Rows outside [5, 45) were never sent: they stay poisoned.
  EXPECT_EQ(outcome.elements_verified, 3 * 50 * 21);
  EXPECT_EQ(outcome.mismatches, 3 * 10 * 21);
}

// Stage 1 forwards what stage 0 delivered: device 3 (worker 1) receives a
// slice from device 0 and then sends it on to devices 1 (worker 0) and 4
// (worker 1) from its destination tile.
TEST(ExecutorTest, RelayOfDataReceivedInAnEarlierStage) {
  TestJob job(2, 3);
  const int t = job.AddTensor({{40, 16}, DType::kFloat64});
  const Box top = {{0, 20}, {0, 16}};
  const Box bottom = {{20, 40}, {0, 16}};
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(3, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(1, t, top, BufferRole::kDestination);
  job.AddBuffer(4, t, top, BufferRole::kDestination);
  job.AddBuffer(5, t, bottom, BufferRole::kDestination);
  const int first = job.AddTransfer(t, job.FullBox(t), {0, 3});
  job.AddTransfer(t, top, {3, 4, 1}, {first}, /*stage=*/1);
  job.AddTransfer(t, bottom, {3, 5}, {first}, /*stage=*/1);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, 40 * 16 + 3 * 20 * 16);
}

// Uneven shards (torch.chunk semantics) from S0 on 3 devices to S1 on 4
// devices, with devices in both layouts (local pre-copy), every dtype,
// 3 workers of 2 devices.
TEST(ExecutorTest, UnevenReshardInEveryDType) {
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(3, 2, absl::StrCat("uneven-", DTypeName(dtype)));
    const std::vector<int64_t> shape = {10, 7, 3};
    const int t = job.AddTensor({shape, dtype});
    const int sources[] = {0, 2, 4};
    const int destinations[] = {1, 2, 3, 5};
    for (int k = 0; k < 3; ++k) {
      job.AddBuffer(sources[k], t, TestJob::ShardBox(shape, 0, 3, k),
                    BufferRole::kSource);
    }
    for (int k = 0; k < 4; ++k) {
      job.AddBuffer(destinations[k], t, TestJob::ShardBox(shape, 1, 4, k),
                    BufferRole::kDestination);
    }
    job.AddSendRecvTransfers(t);
    TestJobOutcome outcome = RunTestJob(job, SmallChunks());
    ExpectAllVerified(outcome, 10 * 7 * 3);
  }
}

// Several tensors and independent steps at once, with the default 1 MiB
// chunks and a tensor large enough to take several chunks.
TEST(ExecutorTest, ConcurrentStepsOnSeveralTensors) {
  TestJob job(2, 2);
  const int a = job.AddTensor({{512, 1024}, DType::kFloat32});  // 2 MiB
  const int b = job.AddTensor({{33, 17}, DType::kBFloat16});
  job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource);
  job.AddBuffer(3, b, job.FullBox(b), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, a, job.FullBox(a), BufferRole::kDestination);
  }
  for (int d : {0, 1, 2}) {
    job.AddBuffer(d, b, job.FullBox(b), BufferRole::kDestination);
  }
  job.AddTransfer(a, job.FullBox(a), {0, 1, 2, 3});
  job.AddTransfer(b, job.FullBox(b), {3, 2, 0});
  job.AddTransfer(b, job.FullBox(b), {3, 1});
  TestJobOutcome outcome = RunTestJob(job, ExecutorOptions());
  ExpectAllVerified(outcome, 3 * 512 * 1024 + 3 * 33 * 17);
}

TEST(ExecutorTest, SingleWorkerNeedsNoCommunicator) {
  TestJob job(1, 4);
  const int t = job.AddTensor({{9, 9}, DType::kInt64});
  for (int k = 0; k < 2; ++k) {
    job.AddBuffer(k, t, TestJob::ShardBox({9, 9}, 0, 2, k),
                  BufferRole::kSource);
  }
  for (int k = 0; k < 4; ++k) {
    job.AddBuffer(k, t, job.FullBox(t), BufferRole::kDestination);
  }
  const int s0 = job.AddTransfer(t, TestJob::ShardBox({9, 9}, 0, 2, 0), {0, 1});
  const int s1 = job.AddTransfer(t, TestJob::ShardBox({9, 9}, 0, 2, 1), {1, 0});
  job.AddTransfer(t, job.FullBox(t), {0, 2, 3}, {s0, s1}, 1);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, 4 * 81);
}

// A program that forgets a transfer leaves exactly that slice unverified.
TEST(ExecutorTest, MissingTransferIsDetectedAsMismatches) {
  TestJob job(2, 2);
  const int t = job.AddTensor({{16, 16}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, {{0, 12}, {0, 16}}, {0, 2});  // rows 12..15 never sent
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.elements_verified, 256);
  EXPECT_EQ(outcome.mismatches, 4 * 16);
}

// A transfer labelled with the wrong tensor delivers the wrong values.
TEST(ExecutorTest, WrongTensorIsDetectedAsMismatches) {
  TestJob job(2, 1);
  const int a = job.AddTensor({{8, 8}, DType::kFloat32});
  const int b = job.AddTensor({{8, 8}, DType::kFloat32});
  job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource);
  job.AddBuffer(0, b, job.FullBox(b), BufferRole::kSource);
  job.AddBuffer(1, b, job.FullBox(b), BufferRole::kDestination);
  job.AddBuffer(1, a, job.FullBox(a), BufferRole::kDestination);
  job.AddTransfer(a, job.FullBox(a), {0, 1});
  job.AddTransfer(b, job.FullBox(b), {0, 1});
  // Corrupt: the second step says tensor a, so b's destination stays empty
  // and a's is written twice.
  job.plan().mutable_steps(1)->set_tensor(a);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 64);
}

// A sender that does not hold the slice fails its step; the receiving
// worker fails too, quickly, instead of waiting for data.
TEST(ExecutorTest, SenderWithoutTheSliceFailsEveryWorkerQuickly) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{8, 8}, DType::kUInt8});
  job.AddBuffer(0, t, {{0, 4}, {0, 8}}, BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  const absl::Time start = absl::Now();
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_FALSE(outcome.results[0].ok());
  EXPECT_EQ(outcome.results[0].status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(outcome.results[0].status().message().find("step 0"),
            std::string::npos);
  EXPECT_FALSE(outcome.results[1].ok());
}

TEST(ExecutorTest, AbortStopsAWorkerWaitingForAPeer) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{8, 8}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  auto program = ParseProgram(job.ProgramFor(1));
  ASSERT_TRUE(program.ok()) << program.status();

  InMemoryKvStore kv;
  std::unique_ptr<GlooCommunicator> comms[2];
  std::thread connect0([&] {
    comms[0] = *GlooCommunicator::Create(kv, "p/", 0, 2, GlooOptions());
  });
  comms[1] = *GlooCommunicator::Create(kv, "p/", 1, 2, GlooOptions());
  connect0.join();

  // Worker 0 never runs its program: worker 1 waits until aborted.
  Executor executor{ExecutorOptions()};
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    executor.Abort("cancelled by the test");
  });
  const absl::Time start = absl::Now();
  auto result = executor.Run(*program, comms[1].get());
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(result.status().message().find("cancelled by the test"),
            std::string::npos);
}

TEST(ExecutorTest, AbortBeforeRunReturnsAtOnce) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{4}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok());
  Executor executor{ExecutorOptions()};
  executor.Abort("early");
  EXPECT_EQ(executor.Run(*program, nullptr).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace meshcast::worker
