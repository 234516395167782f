// The GPU executor: whole jobs on virtual devices of one GPU (cuda:0xN),
// the tiles against the host, the worker-level plumbing, and, on a machine
// with two GPUs, a two-worker job over NCCL. GPU cases skip without a GPU;
// the argument checks run everywhere.
#include "worker/cuda/device_executor.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_pattern.h"
#include "worker/in_memory_kv_store.h"
#include "worker/task.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker::cuda {
namespace {

using testing::TestJob;

DeviceSpec VirtualDevices(int gpu, int count) {
  DeviceSpec spec = *ParseDeviceSpec(absl::StrCat("cuda:", gpu, "x", count));
  return spec;
}

CudaBackendOptions SmallChunks() {
  CudaBackendOptions options;
  options.chunk_bytes = 1000;  // many chunks even for small slices
  options.lanes = 3;
  options.rendezvous_timeout = absl::Seconds(30);
  options.op_timeout = absl::Seconds(30);
  return options;
}

// Runs worker `w` of `job` on `count` virtual devices of `gpu`.
absl::StatusOr<v1::JobResult> RunOnGpu(const TestJob& job, int w, int gpu,
                                       int count,
                                       const CudaBackendOptions& options,
                                       KvStore* kv = nullptr) {
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(w));
  if (!program.ok()) return program.status();
  DeviceExecutor executor(VirtualDevices(gpu, count), options);
  return executor.Run(*program, kv);
}

void ExpectVerified(const absl::StatusOr<v1::JobResult>& result,
                    int64_t elements) {
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->mismatches(), 0);
  EXPECT_EQ(result->elements_verified(), elements);
}

// Runs everywhere: argument checks happen before any CUDA call.
TEST(DeviceExecutorArgumentsTest, RefusesMoreDevicesThanTheSpecGives) {
  TestJob job(1, 4);
  const int t = job.AddTensor({{4, 4}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(3, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 3});
  auto result = RunOnGpu(job, 0, 0, 2, SmallChunks());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("cuda:0x2"), std::string::npos);
}

TEST(DeviceExecutorArgumentsTest, MultiWorkerDepsMustFollowStageAndIdOrder) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{4, 4}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  const int first = job.AddTransfer(t, job.FullBox(t), {0, 1}, {}, 0);
  // Step 1 at stage 0 with a dep on step 0 at stage 0 is fine (lower id);
  // step 0 depending on step 1 is not.
  job.AddTransfer(t, job.FullBox(t), {0, 1}, {}, 0);
  job.plan().mutable_steps(first)->add_deps(1);
  auto result = RunOnGpu(job, 0, 0, 1, SmallChunks());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("(stage, id) order"),
            std::string::npos);
}

TEST(DeviceExecutorArgumentsTest, NeedsAResolvedCudaSpec) {
  TestJob job(1, 1);
  job.AddTensor({{4}, DType::kInt32});
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok());
  DeviceExecutor executor(*ParseDeviceSpec("cuda"), SmallChunks());
  EXPECT_EQ(executor.Run(*program, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

class DeviceExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount reports none); "
                      "GPU executor not tested";
    }
  }
};

// The tiles on the GPU hold exactly what the host BufferSet holds: pattern
// in sources, poison plus the local pre-copy in destinations.
TEST_F(DeviceExecutorTest, TilesMatchTheHostBufferSet) {
  TestJob job(1, 3);
  const std::vector<int64_t> shape = {12, 10, 3};
  const int t = job.AddTensor({shape, DType::kBFloat16});
  for (int k = 0; k < 3; ++k) {
    job.AddBuffer(k, t, TestJob::ShardBox(shape, 0, 3, k), BufferRole::kSource);
    job.AddBuffer(k, t, TestJob::ShardBox(shape, 1, 3, k),
                  BufferRole::kDestination);
  }
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok());
  Cancellation cancellation;
  auto host = BufferSet::Create(*program, cancellation, 1);
  ASSERT_TRUE(host.ok()) << host.status();
  auto device =
      DeviceBufferSet::Create(*program, {{0, 0}, {1, 0}, {2, 0}}, cancellation);
  ASSERT_TRUE(device.ok()) << device.status();
  for (int k = 0; k < 3; ++k) {
    for (BufferRole role : {BufferRole::kSource, BufferRole::kDestination}) {
      const TileBuffer* want = host->Find(k, t, role);
      const DeviceTile* got = device->Find(k, t, role);
      ASSERT_NE(got, nullptr);
      std::vector<uint8_t> bytes(got->size_bytes());
      ASSERT_EQ(cudaMemcpy(bytes.data(), got->data(), bytes.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), want->bytes().begin()))
          << "device " << k;
    }
  }
  // Only the pre-copied overlaps hold data: the verification counts the
  // rest as mismatches, like the host's.
  auto host_summary = host->VerifyDestinations(1);
  auto device_summary = device->VerifyDestinations();
  ASSERT_TRUE(device_summary.ok()) << device_summary.status();
  EXPECT_EQ(device_summary->elements, host_summary->elements);
  EXPECT_EQ(device_summary->mismatches, host_summary->mismatches);
  EXPECT_GT(device_summary->mismatches, 0);
  EXPECT_NE(device_summary->first_mismatch.find("expected"), std::string::npos);
}

TEST_F(DeviceExecutorTest, BroadcastChainOnFourVirtualDevices) {
  TestJob job(1, 4);
  const int t = job.AddTensor({{64, 33}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d = 1; d < 4; ++d) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2, 3});
  auto result = RunOnGpu(job, 0, 0, 4, SmallChunks());
  ExpectVerified(result, 3 * 64 * 33);
  EXPECT_EQ(result->bytes_moved(), 3 * 64 * 33 * 4);
  ASSERT_EQ(result->steps_size(), 1);
  EXPECT_GE(result->steps(0).seconds(), 0);
}

// Uneven shards, strided slices (S0 -> S1), pre-copies, every dtype.
TEST_F(DeviceExecutorTest, UnevenReshardInEveryDType) {
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 6, absl::StrCat("uneven-", DTypeName(dtype)));
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
    ExpectVerified(RunOnGpu(job, 0, 0, 6, SmallChunks()), 10 * 7 * 3);
  }
}

// Stage 1 forwards what stage 0 delivered (GPU-side dependencies between
// lanes), and several tensors' steps run at once.
TEST_F(DeviceExecutorTest, DependentStagesAndConcurrentSteps) {
  TestJob job(1, 6);
  const int t = job.AddTensor({{40, 16}, DType::kFloat64});
  const int big = job.AddTensor({{512, 1024}, DType::kFloat32});  // 2 MiB
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
  job.AddBuffer(2, big, job.FullBox(big), BufferRole::kSource);
  for (int d : {0, 1, 5}) {
    job.AddBuffer(d, big, job.FullBox(big), BufferRole::kDestination);
  }
  job.AddTransfer(big, job.FullBox(big), {2, 0, 1, 5});
  CudaBackendOptions options;  // default 4 MiB chunks, 4 lanes
  ExpectVerified(RunOnGpu(job, 0, 0, 6, options),
                 40 * 16 + 3 * 20 * 16 + 3 * 512 * 1024);
}

TEST_F(DeviceExecutorTest, MissingTransferIsDetectedAsMismatches) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{16, 16}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, {{0, 12}, {0, 16}}, {0, 1});  // rows 12..15 never sent
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok());
  DeviceExecutor executor(VirtualDevices(0, 2), SmallChunks());
  auto result = executor.Run(*program, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->elements_verified(), 256);
  EXPECT_EQ(result->mismatches(), 4 * 16);
  EXPECT_NE(executor.timings().first_mismatch.find("global index 192"),
            std::string::npos)
      << executor.timings().first_mismatch;
}

TEST_F(DeviceExecutorTest, SenderWithoutTheSliceFailsTheStep) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{8, 8}, DType::kUInt8});
  job.AddBuffer(0, t, {{0, 4}, {0, 8}}, BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  auto result = RunOnGpu(job, 0, 0, 2, SmallChunks());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("step 0"), std::string::npos);
}

TEST_F(DeviceExecutorTest, AbortBeforeRunReturnsAtOnce) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{4}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok());
  DeviceExecutor executor(VirtualDevices(0, 2), SmallChunks());
  executor.Abort("early");
  EXPECT_EQ(executor.Run(*program, nullptr).status().code(),
            absl::StatusCode::kCancelled);
}

// The worker-level path: Task with the CUDA backend, as meshcast-worker
// --devices=cuda:0x4 runs it.
TEST_F(DeviceExecutorTest, TaskRunsOnTheCudaBackend) {
  TestJob job(1, 4, "task-on-gpu");
  const int t = job.AddTensor({{128, 40}, DType::kFloat16});
  for (int k = 0; k < 4; ++k) {
    job.AddBuffer(k, t, TestJob::ShardBox({128, 40}, 0, 4, k),
                  BufferRole::kSource);
    job.AddBuffer(k, t, TestJob::ShardBox({128, 40}, 1, 4, k),
                  BufferRole::kDestination);
  }
  job.AddSendRecvTransfers(t);
  TaskOptions options;
  options.device_backend =
      std::make_shared<CudaBackend>(VirtualDevices(0, 4), SmallChunks());
  Task task(job.ProgramFor(0), nullptr, options);
  ExpectVerified(task.Run(), 128 * 40);
  EXPECT_EQ(task.timings().tile_bytes, 2 * 128 * 40 * 2);
}

// Two workers in threads, one GPU each (cuda:0x2 and cuda:1x2), NCCL
// between them through an in-memory rendezvous store: relay chains that
// cross workers twice, strided slices, dependent stages.
TEST_F(DeviceExecutorTest, TwoWorkersOverNccl) {
  if (GpuCount() < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL allows one rank per GPU); "
                 << GpuCount() << " visible";
  }
  TestJob job(2, 2, "nccl-two-workers");
  const int t = job.AddTensor({{96, 70}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  // Worker 0 sends, worker 1 relays back to worker 0, which relays on.
  const int s0 = job.AddTransfer(t, {{0, 50}, {0, 70}}, {0, 2, 1, 3});
  // Strided column bands into both devices of worker 1 (one NCCL rank:
  // virtual devices of one GPU), a step local to worker 0, and a stage-1
  // forward from a tile received in stage 0.
  job.AddTransfer(t, {{50, 96}, {0, 35}}, {0, 3, 2});
  job.AddTransfer(t, {{50, 96}, {35, 70}}, {0, 2, 3});
  job.AddTransfer(t, {{50, 96}, {0, 70}}, {0, 1});
  job.AddTransfer(t, {{0, 50}, {0, 70}}, {3, 2}, {s0}, /*stage=*/1);
  InMemoryKvStore kv;
  std::vector<absl::StatusOr<v1::JobResult>> results(2, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      results[w] = RunOnGpu(job, w, /*gpu=*/w, 2, SmallChunks(), &kv);
    });
  }
  for (std::thread& thread : threads) thread.join();
  ExpectVerified(results[0], 96 * 70);      // device 1
  ExpectVerified(results[1], 2 * 96 * 70);  // devices 2 and 3
}

}  // namespace
}  // namespace meshcast::worker::cuda
