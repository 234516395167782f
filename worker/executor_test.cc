#include "worker/executor.h"

#include <atomic>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// Worker 0 of 1 with devices 0, 1 and 2: a 512x1024 int32 source on device
// 0 copied along the local chain 0 -> 1 -> 2.
TestJob LocalChainJob() {
  TestJob job(1, 3);
  const int t = job.AddTensor({{512, 1024}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2});
  return job;
}

TEST(ExecutorTest, RefusesAJobThatDoesNotFitInMemoryBeforeAllocating) {
  auto program = ParseProgram(LocalChainJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  ExecutorOptions options;
  std::atomic<int> slices{0};
  options.slicing.before_slice = [&] { ++slices; };
  options.available_memory = [] { return int64_t{5} << 20; };  // 5 MiB
  Executor executor(options);
  auto result = executor.Run(*program, nullptr);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted)
      << result.status();
  EXPECT_NE(result.status().message().find(
                "worker worker0: job test-job needs 6.0 MiB for its tiles, "
                "5.0 MiB available"),
            std::string::npos)
      << result.status();
  EXPECT_EQ(slices.load(), 0);  // nothing was filled

  // The same job runs where 6 MiB are available.
  options.available_memory = [] { return int64_t{6} << 20; };
  Executor roomy(options);
  auto ran = roomy.Run(*program, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->mismatches(), 0);
}

// A tile no host can hold (64 PiB) with an availability figure that lets
// it through: the allocation fails at once (nothing is touched) and the
// job fails with RESOURCE_EXHAUSTED, not INTERNAL or an exception.
TEST(ExecutorTest, FailedAllocationIsResourceExhausted) {
  TestJob job(1, 1);
  const int t = job.AddTensor(
      {{int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 16}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kDestination);
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  ExecutorOptions options;
  options.available_memory = [] { return int64_t{1} << 62; };
  Executor executor(options);
  auto result = executor.Run(*program, nullptr);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted)
      << result.status();
  EXPECT_NE(result.status().message().find(
                "worker worker0: job test-job ran out of host memory"),
            std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("64.0 PiB tile of device 0"),
            std::string::npos)
      << result.status();
}

// Staging buffers cached from earlier jobs are given back before a job is
// refused for memory: with 4 MiB cached the job (6 MiB of tiles) would not
// fit in 7 MiB less the cache; once released, it does.
TEST(ExecutorTest, CachedStagingIsReleasedBeforeAJobIsRefused) {
  auto program = ParseProgram(LocalChainJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  StagingPool pool(int64_t{64} << 20);
  { StagingBuffer cached = pool.Take(int64_t{4} << 20); }
  ASSERT_EQ(pool.cached_bytes(), int64_t{4} << 20);
  ExecutorOptions options;
  options.staging = &pool;
  options.available_memory = [&pool] {
    return (int64_t{7} << 20) - pool.cached_bytes();
  };
  Executor executor(options);
  auto result = executor.Run(*program, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->mismatches(), 0);
  EXPECT_EQ(pool.cached_bytes(), 0);
}

// A relay between workers stages the chunks of a slice that is not
// contiguous in its tile (half the columns) in the executor's pool, which
// keeps them for the next job.
TEST(ExecutorTest, RelaySlotsComeFromTheExecutorsPool) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{256, 64}, DType::kFloat32});
  const Box half = {Interval{0, 256}, Interval{0, 32}};
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, half, BufferRole::kDestination);
  job.AddTransfer(t, half, {0, 1});
  StagingPool pool(int64_t{64} << 20);
  ExecutorOptions options = SmallChunks();
  options.staging = &pool;
  TestJobOutcome outcome = RunTestJob(job, options);
  ExpectAllVerified(outcome, 256 * 32);
  // The sender's slots (3 chunks of 1000 bytes) came back to it.
  EXPECT_GE(pool.cached_bytes(), 3 * 1000);
}

// The local copies of a step check the abort every slice: an abort during
// the copy to device 1 stops the step at the next slice.
TEST(ExecutorTest, AbortDuringLocalCopiesStopsWithinASlice) {
  auto program = ParseProgram(LocalChainJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  ExecutorOptions options;
  options.slicing.bytes = 64 << 10;  // 2 MiB tiles: 32 slices each
  const int fill_slices = 3 * 32;
  // Fill and poison run first (no pre-copy: devices 1 and 2 hold no
  // source); the slices after them are the step's copies. The hook aborts
  // the executor it runs in.
  Executor* target = nullptr;
  std::atomic<int> calls{0};
  options.slicing.before_slice = [&] {
    if (++calls == fill_slices + 5) target->Abort("cancelled mid-copy");
  };
  Executor run(options);
  target = &run;
  auto result = run.Run(*program, nullptr);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  EXPECT_NE(result.status().message().find("cancelled mid-copy"),
            std::string::npos);
  EXPECT_EQ(calls.load(), fill_slices + 5);
}

// A transfer made slow (50 ms per 16 KiB chunk: ~13 s for the slice)
// between two workers: aborting the receiver ends both within seconds,
// the sender through the aborted connections.
TEST(ExecutorTest, AbortDuringASlowTransferEndsBothWorkersPromptly) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{2048, 2048}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  std::vector<ParsedProgram> programs;
  for (int w = 0; w < 2; ++w) {
    auto program = ParseProgram(job.ProgramFor(w));
    ASSERT_TRUE(program.ok()) << program.status();
    programs.push_back(*std::move(program));
  }
  InMemoryKvStore kv;
  std::unique_ptr<GlooCommunicator> comms[2];
  std::thread connect0([&] {
    comms[0] = *GlooCommunicator::Create(kv, "slow/", 0, 2, GlooOptions());
  });
  comms[1] = *GlooCommunicator::Create(kv, "slow/", 1, 2, GlooOptions());
  connect0.join();

  ExecutorOptions options;
  options.relay.chunk_bytes = 16 << 10;  // 256 chunks
  options.slicing.bytes = 4 << 20;       // fill and verify: one slice a tile
  std::atomic<int> chunks{0};
  options.slicing.before_slice = [&] {
    ++chunks;
    absl::SleepFor(absl::Milliseconds(50));
  };
  Executor executors[2] = {Executor(options), Executor(options)};
  absl::StatusOr<v1::JobResult> results[2];
  absl::Time ended[2];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      results[w] = executors[w].Run(programs[w], comms[w].get());
      ended[w] = absl::Now();
    });
  }
  absl::SleepFor(absl::Milliseconds(1500));
  const absl::Time aborted = absl::Now();
  executors[1].Abort("cancelled by user");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled)
      << results[1].status();
  EXPECT_FALSE(results[0].ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_LT(ended[w] - aborted, absl::Seconds(3)) << "worker " << w;
  }
  EXPECT_LT(chunks.load(), 2 * 256);
}

// The phases an executor goes through as a status poll sees them: each
// Record() reads the phase under one lock and appends it when it differs
// from the last one appended, so the list is in the order they came.
class PhaseRecorder {
 public:
  explicit PhaseRecorder(const Executor& executor) : executor_(executor) {}
  // Records the phase now and returns it; while verifying, also the
  // counters.
  JobPhase Record() {
    absl::MutexLock lock(&mu_);
    const StepProgress progress = executor_.progress();
    if (phases_.empty() || phases_.back() != progress.phase) {
      phases_.push_back(progress.phase);
    }
    if (progress.phase == JobPhase::kVerify) {
      verify_done_.push_back(progress.verify_done);
      verify_total_ = progress.verify_total;
    }
    return progress.phase;
  }
  std::vector<JobPhase> phases() {
    absl::MutexLock lock(&mu_);
    return phases_;
  }
  std::vector<int64_t> verify_done() {
    absl::MutexLock lock(&mu_);
    return verify_done_;
  }
  int64_t verify_total() {
    absl::MutexLock lock(&mu_);
    return verify_total_;
  }

 private:
  const Executor& executor_;
  absl::Mutex mu_;
  std::vector<JobPhase> phases_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> verify_done_ ABSL_GUARDED_BY(mu_);
  int64_t verify_total_ ABSL_GUARDED_BY(mu_) = 0;
};

// Two workers swap a 64 KiB tile each, in 4 KiB slices (16 per tile) and
// chunks. Worker 0 records its phase before every slice (fill, relay
// chunks, verification); the test holds it in the start barrier, where no
// slice runs, by starting worker 1 only once worker 0 is seen there.
TEST(ExecutorTest, ReportsEveryPhaseInOrderAndCountsVerification) {
  TestJob job(2, 1);
  const int a = job.AddTensor({{256, 256}, DType::kUInt8});
  const int b = job.AddTensor({{256, 256}, DType::kUInt8});
  job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource);
  job.AddBuffer(1, a, job.FullBox(a), BufferRole::kDestination);
  job.AddBuffer(1, b, job.FullBox(b), BufferRole::kSource);
  job.AddBuffer(0, b, job.FullBox(b), BufferRole::kDestination);
  job.AddTransfer(a, job.FullBox(a), {0, 1});
  job.AddTransfer(b, job.FullBox(b), {1, 0});
  std::vector<ParsedProgram> programs;
  for (int w = 0; w < 2; ++w) {
    auto program = ParseProgram(job.ProgramFor(w));
    ASSERT_TRUE(program.ok()) << program.status();
    programs.push_back(*std::move(program));
  }
  InMemoryKvStore kv;
  std::unique_ptr<GlooCommunicator> comms[2];
  std::thread connect0([&] {
    comms[0] = *GlooCommunicator::Create(kv, "phases/", 0, 2, GlooOptions());
  });
  comms[1] = *GlooCommunicator::Create(kv, "phases/", 1, 2, GlooOptions());
  connect0.join();

  ExecutorOptions options;
  options.relay.chunk_bytes = 4096;
  options.slicing.bytes = 4096;
  options.fill_threads = 2;  // each thread verifies several slices
  Executor worker1(options);
  PhaseRecorder* recorder = nullptr;
  options.slicing.before_slice = [&recorder] { recorder->Record(); };
  Executor worker0(options);
  PhaseRecorder phases(worker0);
  recorder = &phases;
  EXPECT_EQ(phases.Record(), JobPhase::kUnknown);  // before Run

  absl::StatusOr<v1::JobResult> results[2];
  std::thread run0([&] { results[0] = worker0.Run(programs[0], comms[0].get()); });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (phases.Record() != JobPhase::kConnect && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  std::thread run1([&] { results[1] = worker1.Run(programs[1], comms[1].get()); });
  run0.join();
  run1.join();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(results[w].ok()) << "worker " << w << ": " << results[w].status();
    EXPECT_EQ(results[w]->mismatches(), 0);
    EXPECT_EQ(results[w]->elements_verified(), 256 * 256);
  }
  phases.Record();
  EXPECT_EQ(phases.phases(),
            (std::vector<JobPhase>{JobPhase::kUnknown, JobPhase::kSetup,
                                   JobPhase::kConnect, JobPhase::kData,
                                   JobPhase::kVerify}));
  // The counters grew slice by slice to every element of the tile.
  const StepProgress done = worker0.progress();
  EXPECT_EQ(done.phase, JobPhase::kVerify);
  EXPECT_EQ(done.verify_total, 256 * 256);
  EXPECT_EQ(done.verify_done, 256 * 256);
  EXPECT_EQ(phases.verify_total(), 256 * 256);
  const std::vector<int64_t> seen = phases.verify_done();
  ASSERT_FALSE(seen.empty());
  bool midway = false;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(seen[i], seen[i - 1]);
    }
    EXPECT_EQ(seen[i] % 4096, 0) << "not whole slices: " << seen[i];
    midway |= seen[i] > 0 && seen[i] < 256 * 256;
  }
  EXPECT_TRUE(midway) << "no count between 0 and the total was seen";
}

// One worker, no communicator: no connect phase; a sampled verification
// counts its sample (kSampledElements of a tile), a full one every element,
// and verification off counts nothing.
TEST(ExecutorTest, VerifyCountersFollowTheVerifyMode) {
  for (const auto& [mode, expected] :
       std::vector<std::pair<v1::VerifyMode, int64_t>>{
           {v1::VERIFY_MODE_FULL, 2 * 256 * 256},
           {v1::VERIFY_MODE_SAMPLE, 2 * kSampledElements},
           {v1::VERIFY_MODE_OFF, 0}}) {
    SCOPED_TRACE(v1::VerifyMode_Name(mode));
    TestJob job(1, 3);
    const int t = job.AddTensor({{256, 256}, DType::kFloat16});
    job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
    job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
    job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
    job.AddTransfer(t, job.FullBox(t), {0, 1, 2});
    job.set_verify(mode);
    auto program = ParseProgram(job.ProgramFor(0));
    ASSERT_TRUE(program.ok()) << program.status();
    ExecutorOptions options;
    options.slicing.bytes = 8192;
    std::vector<JobPhase> phases;
    Executor* target = nullptr;
    absl::Mutex mu;
    options.slicing.before_slice = [&] {
      absl::MutexLock lock(&mu);
      const JobPhase phase = target->progress().phase;
      if (phases.empty() || phases.back() != phase) phases.push_back(phase);
    };
    Executor executor(options);
    target = &executor;
    auto result = executor.Run(*program, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->elements_verified(), expected);
    EXPECT_EQ(result->mismatches(), 0);
    const StepProgress done = executor.progress();
    EXPECT_EQ(done.phase, JobPhase::kVerify);
    EXPECT_EQ(done.verify_total, expected);
    EXPECT_EQ(done.verify_done, expected);
    EXPECT_EQ(done.steps_done, 1);
    // Fill and the local copies run slices; so does a verification that
    // checks anything.
    std::vector<JobPhase> want = {JobPhase::kSetup, JobPhase::kData};
    if (mode != v1::VERIFY_MODE_OFF) want.push_back(JobPhase::kVerify);
    EXPECT_EQ(phases, want);
  }
}

TEST(JobPhaseNameTest, NamesEveryPhaseAsTheProtoDoes) {
  EXPECT_EQ(JobPhaseName(JobPhase::kUnknown), "");
  EXPECT_EQ(JobPhaseName(JobPhase::kSetup), "setup");
  EXPECT_EQ(JobPhaseName(JobPhase::kConnect), "connect");
  EXPECT_EQ(JobPhaseName(JobPhase::kData), "data");
  EXPECT_EQ(JobPhaseName(JobPhase::kVerify), "verify");
}

}  // namespace
}  // namespace meshcast::worker
