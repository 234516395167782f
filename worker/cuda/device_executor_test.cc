// The GPU executor: whole jobs on virtual devices of one GPU (cuda:0xN),
// the tiles against the host, the worker-level plumbing, and, on a machine
// with two GPUs, a two-worker job over NCCL. GPU cases skip without a GPU;
// the argument checks run everywhere.
#include "worker/cuda/device_executor.h"

#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "util/metrics.h"
#include "worker/buffer_set.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/device_relay.h"
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

// Worker 0 (devices 0-2) of a two-worker job with a chain on this worker
// only (step 0: 0 -> 1 -> 2) and one that crosses workers (step 1:
// 0 -> 3 -> 1 -> 2, device 3 on worker 1).
ParsedProgram MetricsProgram() {
  TestJob job(2, 3);
  const int t = job.AddTensor({{8, 8}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int device : {1, 2, 3}) {
    job.AddBuffer(device, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2});
  job.AddTransfer(t, job.FullBox(t), {0, 3, 1, 2});
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  EXPECT_TRUE(program.ok()) << program.status();
  return program.ok() ? *std::move(program) : ParsedProgram();
}

// Runs everywhere: where hop events must live is derived on the host.
TEST(DeviceStepMetricsTest, HopEventsLiveOnTheGpuWhoseStreamWritesTheHop) {
  const ParsedProgram program = MetricsProgram();
  ASSERT_EQ(program.steps.size(), 2u);
  // Devices 0 and 1 on GPU 5, device 2 on GPU 6.
  const absl::flat_hash_map<int, int> device_gpu = {{0, 5}, {1, 5}, {2, 6}};
  // On this worker only: every copy runs on the primary stream (GPU 5),
  // the one into device 2 on GPU 6 included.
  absl::StatusOr<std::vector<int>> local =
      HopEventGpus(program.steps[0], program, device_gpu);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, (std::vector<int>{-1, 5, 5}));
  // Across workers: each local position on its own GPU's stream; none for
  // the sender (position 0) or the remote device 3.
  absl::StatusOr<std::vector<int>> crossing =
      HopEventGpus(program.steps[1], program, device_gpu);
  ASSERT_TRUE(crossing.ok()) << crossing.status();
  EXPECT_EQ(*crossing, (std::vector<int>{-1, -1, 5, 6}));
  // A local device without a GPU is an error, not a silent -1.
  EXPECT_EQ(HopEventGpus(program.steps[1], program, {{0, 5}, {1, 5}})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DeviceStepMetricsTest, ReportsTheStepAndEveryTimedLocalHop) {
  const ParsedProgram program = MetricsProgram();
  ASSERT_EQ(program.steps.size(), 2u);
  const StepDesc& step = program.steps[1];  // 0 -> 3 -> 1 -> 2
  WorkerMetrics metrics(3, "nccl");
  // Position 1 (device 3) is on the other worker: a value there is ignored,
  // as is a negative (untimed) one.
  ReportDeviceStep(metrics, program, step, 0.5, {-1, 9, 0.25, 0.375});
  ReportDeviceStep(metrics, program, step, 0.75, {-1, -1, -1, 0.125});
  const std::string text = RenderMetrics(*metrics.collectable());
  const std::string op = WorkerMetrics::OpLabel(step.op);
  auto series = [&](const char* what, const char* link) {
    return absl::StrCat("meshcast_worker_transfer_duration_seconds_", what,
                        "{op=\"", op, "\",link=\"", link, "\"}");
  };
  // 3 -> 1 arrives from the other worker; 1 -> 2 is a copy on this one.
  EXPECT_EQ(FindSample(text, series("count", "inter")), 1.0);
  EXPECT_EQ(FindSample(text, series("sum", "inter")), 0.25);
  EXPECT_EQ(FindSample(text, series("count", "intra")), 2.0);
  EXPECT_EQ(FindSample(text, series("sum", "intra")), 0.5);
  EXPECT_EQ(FindSample(text, absl::StrCat("meshcast_worker_step_duration_seconds_"
                                      "count{op=\"",
                                      op, "\"}")),
            2.0);
  EXPECT_EQ(FindSample(text, absl::StrCat("meshcast_worker_step_duration_seconds_"
                                      "sum{op=\"",
                                      op, "\"}")),
            1.25);
}

TEST(DeviceStepMetricsTest, BackendReportsLiveOnlyWithMetrics) {
  WorkerMetrics metrics(2, "nccl");
  EXPECT_FALSE(CudaBackend(VirtualDevices(0, 2), SmallChunks()).ReportsMetrics());
  CudaBackendOptions options = SmallChunks();
  options.metrics = &metrics;
  EXPECT_TRUE(CudaBackend(VirtualDevices(0, 2), options).ReportsMetrics());
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

// With metrics, the GPU executor reports what the CPU executor reports,
// live: one duration per step, one transfer per hop into a device here (all
// copies between virtual devices: intra), no running step once done, and
// the tile bytes released with the tiles.
TEST_F(DeviceExecutorTest, ReportsStepsHopsAndTileMemory) {
  TestJob job(1, 4, "metrics-on-gpu");
  const int t = job.AddTensor({{64, 48}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, {{0, 32}, {0, 48}}, BufferRole::kDestination);
  job.AddBuffer(3, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, {{0, 32}, {0, 48}}, {0, 1, 2, 3});  // 3 hops
  job.AddTransfer(t, {{32, 64}, {0, 48}}, {0, 1});
  job.AddTransfer(t, {{32, 64}, {0, 24}}, {0, 3});  // strided
  job.AddTransfer(t, {{32, 64}, {24, 48}}, {0, 3});
  auto program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  WorkerMetrics metrics(4, "nccl");
  CudaBackendOptions options = SmallChunks();
  options.metrics = &metrics;
  DeviceExecutor executor(VirtualDevices(0, 4), options);
  ExpectVerified(executor.Run(*program, nullptr), (64 + 32 + 64) * 48);
  // Progress (GetStatus) counts every step and its bytes.
  const StepProgress progress = executor.progress();
  EXPECT_EQ(progress.steps_done, 4);
  int64_t step_bytes = 0;
  for (const StepDesc& s : program->steps) step_bytes += s.bytes;
  EXPECT_EQ(progress.bytes_done, step_bytes);
  const std::string text = RenderMetrics(*metrics.collectable());
  auto series = [](const std::string& name, const std::string& labels) {
    return absl::StrCat("meshcast_worker_", name, "{", labels, "}");
  };
  EXPECT_EQ(FindSample(text, series("step_duration_seconds_count",
                                "op=\"broadcast\"")),
            1.0);
  EXPECT_EQ(FindSample(text, series("step_duration_seconds_count",
                                "op=\"send_recv\"")),
            3.0);
  EXPECT_EQ(FindSample(text, series("transfer_duration_seconds_count",
                                "op=\"broadcast\",link=\"intra\"")),
            3.0);
  EXPECT_EQ(FindSample(text, series("transfer_duration_seconds_count",
                                "op=\"send_recv\",link=\"intra\"")),
            3.0);
  // Each hop landed within its step.
  const std::optional<double> hops = FindSample(
      text, series("transfer_duration_seconds_sum",
                   "op=\"broadcast\",link=\"intra\""));
  const std::optional<double> step = FindSample(
      text, series("step_duration_seconds_sum", "op=\"broadcast\""));
  ASSERT_TRUE(hops.has_value() && step.has_value());
  EXPECT_GT(*step, 0);
  EXPECT_LE(*hops, 3 * *step);
  EXPECT_EQ(FindSample(text, "meshcast_worker_running_steps"), 0.0);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(FindSample(text, series("device_memory_bytes",
                                  absl::StrCat("device=\"", d, "\""))),
              0.0)
        << d;
  }
  EXPECT_EQ(FindSample(text, series("bytes_received_total",
                                "link=\"intra\",backend=\"local\"")),
            (32 * 48 * 3 + 32 * 48 + 32 * 24 * 2) * 4.0);
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
  std::vector<std::unique_ptr<WorkerMetrics>> metrics;
  for (int w = 0; w < 2; ++w) {
    metrics.push_back(std::make_unique<WorkerMetrics>(2, "nccl"));
  }
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      CudaBackendOptions options = SmallChunks();
      options.metrics = metrics[w].get();
      results[w] = RunOnGpu(job, w, /*gpu=*/w, 2, options, &kv);
    });
  }
  for (std::thread& thread : threads) thread.join();
  ExpectVerified(results[0], 96 * 70);      // device 1
  ExpectVerified(results[1], 2 * 96 * 70);  // devices 2 and 3
  // Hops are counted by the worker they land on: over NCCL (inter) or by
  // a copy between its virtual devices (intra).
  auto hops = [&](int w, const char* op, const char* link) {
    return FindSample(RenderMetrics(*metrics[w]->collectable()),
                  absl::StrCat("meshcast_worker_transfer_duration_seconds_"
                               "count{op=\"",
                               op, "\",link=\"", link, "\"}"));
  };
  EXPECT_EQ(hops(0, "broadcast", "inter"), 1.0);  // 2 -> 1
  EXPECT_EQ(hops(0, "send_recv", "intra"), 1.0);  // 0 -> 1
  EXPECT_EQ(hops(1, "broadcast", "inter"), 3.0);  // 0 -> 2, 0 -> 3, 0 -> 2
  EXPECT_EQ(hops(1, "broadcast", "intra"), 2.0);  // 3 -> 2, 2 -> 3
  EXPECT_EQ(hops(1, "send_recv", "intra"), 1.0);  // 3 -> 2 (stage 1)
}

}  // namespace
}  // namespace meshcast::worker::cuda
