// WorkerMetrics on hand-made programs (which bytes count as intra/inter,
// sent/received), and fed by the real executor and WorkerService running
// programs on virtual CPU devices.
#include "worker/worker_metrics.h"

#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/metrics.h"
#include "worker/device_backend.h"
#include "worker/executor.h"
#include "worker/testing/test_job.h"
#include "worker/worker_service.h"

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

std::string Bytes(const char* direction, const char* link,
                  const char* backend) {
  return absl::StrCat("meshcast_worker_bytes_", direction, "_total{link=\"",
                      link, "\",backend=\"", backend, "\"}");
}

// Worker rank 0 drives devices 0 and 1; rank 1 drives 4 and 5 (2 devices
// per worker would number them 2, 3: the label must still be the local
// index, so these use 4 devices per worker).
ParsedProgram TwoWorkerProgram() {
  ParsedProgram program;
  program.rank = 0;
  program.world_size = 2;
  program.local_devices = {0, 1};
  program.device_rank = {{0, 0}, {1, 0}, {4, 1}, {5, 1}};
  program.tensors.push_back({{10, 10}, DType::kInt32});
  return program;
}

StepDesc Step(std::vector<int> chain, v1::Step::Op op, int64_t bytes) {
  StepDesc step;
  step.chain = std::move(chain);
  step.op = op;
  step.bytes = bytes;
  return step;
}

TEST(WorkerMetricsTest, StartsWithBuildInfoAndZeroedSeries) {
  WorkerMetrics metrics(3, "gloo");
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_build_info{component="worker",)"
                           R"(version=")" MESHCAST_TEST_VERSION R"("})"),
              Optional(1.0))
      << text;
  EXPECT_THAT(FindSample(text, "meshcast_worker_verified_elements_total"),
              Optional(0.0));
  EXPECT_THAT(FindSample(text, "meshcast_worker_verification_failures_total"),
              Optional(0.0));
  EXPECT_THAT(FindSample(text, "meshcast_worker_running_steps"), Optional(0.0));
  for (const char* result : {"ok", "failed", "aborted"}) {
    EXPECT_THAT(FindSample(text, absl::StrCat(R"(meshcast_worker_tasks_total{)"
                                          R"(result=")",
                                          result, R"("})")),
                Optional(0.0));
  }
  for (int d = 0; d < 3; ++d) {
    EXPECT_THAT(FindSample(text, absl::StrCat(R"(meshcast_worker_device_memory_)"
                                          R"(bytes{device=")",
                                          d, R"("})")),
                Optional(0.0));
  }
  EXPECT_EQ(FindSample(text, R"(meshcast_worker_device_memory_bytes{device="3"})"),
            std::nullopt);
  for (const char* name :
       {"meshcast_worker_transfer_duration_seconds",
        "meshcast_worker_step_duration_seconds",
        "meshcast_worker_achieved_bandwidth_bytes_per_second",
        "meshcast_worker_bytes_sent_total",
        "meshcast_worker_bytes_received_total"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", name, " ")));
  }
}

TEST(WorkerMetricsTest, BytesFollowTheChainsHops) {
  WorkerMetrics metrics(4, "gloo");
  const ParsedProgram program = TwoWorkerProgram();
  // 0 -> 1 (here, here), 1 -> 4 (here, away), 4 -> 5 (away, away).
  metrics.StepFinished(program, Step({0, 1, 4, 5}, v1::Step::OP_BROADCAST, 100),
                       0.5);
  // 5 -> 0 (away, here).
  metrics.StepFinished(program, Step({5, 0}, v1::Step::OP_SEND_RECV, 40), 2);
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, Bytes("sent", "intra", "local")), Optional(100.0));
  EXPECT_THAT(FindSample(text, Bytes("received", "intra", "local")),
              Optional(100.0));
  EXPECT_THAT(FindSample(text, Bytes("sent", "inter", "gloo")), Optional(100.0));
  EXPECT_THAT(FindSample(text, Bytes("received", "inter", "gloo")), Optional(40.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_count{)"
                           R"(op="broadcast"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_sum{)"
                           R"(op="send_recv"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_achieved_bandwidth_bytes_)"
                           R"(per_second{op="broadcast"})"),
              Optional(200.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_achieved_bandwidth_bytes_)"
                           R"(per_second{op="send_recv"})"),
              Optional(20.0));
}

// OP_SEND_RECV between two operands has no tensor: its bytes (the
// operands' region, set by ParseProgram) count on its hop like any relay's.
TEST(WorkerMetricsTest, OperandSendRecvCountsItsBytes) {
  WorkerMetrics metrics(4, "gloo");
  const ParsedProgram program = TwoWorkerProgram();
  StepDesc step = Step({0, 4}, v1::Step::OP_SEND_RECV, 64);
  step.operand_form = true;
  step.tensor = -1;
  metrics.StepFinished(program, step, 1);
  step.chain = {1, 0};
  metrics.StepFinished(program, step, 1);
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, Bytes("sent", "inter", "gloo")), Optional(64.0));
  EXPECT_THAT(FindSample(text, Bytes("sent", "intra", "local")),
              Optional(64.0));
  EXPECT_THAT(FindSample(text, Bytes("received", "intra", "local")),
              Optional(64.0));
}

TEST(WorkerMetricsTest, HopsAreIntraOrInterByTheirSender) {
  WorkerMetrics metrics(4, "nccl");
  const ParsedProgram program = TwoWorkerProgram();
  const StepDesc step = Step({4, 0, 1}, v1::Step::OP_BROADCAST, 8);
  metrics.HopFinished(program, step, 1, 0.25);  // 4 -> 0: from away
  metrics.HopFinished(program, step, 2, 0.5);   // 0 -> 1: from here
  metrics.HopFinished(program, step, 0, 9);     // not a hop: ignored
  metrics.HopFinished(program, step, 3, 9);     // past the chain: ignored
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_transfer_duration_seconds_sum{)"
                           R"(op="broadcast",link="inter"})"),
              Optional(0.25));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_transfer_duration_seconds_sum{)"
                           R"(op="broadcast",link="intra"})"),
              Optional(0.5));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_transfer_duration_seconds_count{)"
                           R"(op="broadcast",link="intra"})"),
              Optional(1.0));
  // A tree's hop comes from the position's parent: 4 -> {0, 1}.
  StepDesc tree = step;
  tree.parents = {-1, 0, 0};
  metrics.HopFinished(program, tree, 2, 2.0);  // 4 -> 1: from away
  EXPECT_THAT(FindSample(RenderMetrics(*metrics.collectable()),
                         R"(meshcast_worker_transfer_duration_seconds_sum{)"
                         R"(op="broadcast",link="inter"})"),
              Optional(2.25));
  // The remote backend names the inter-worker bytes.
  metrics.StepFinished(program, step, 1);
  EXPECT_THAT(
      FindSample(RenderMetrics(*metrics.collectable()), Bytes("received", "inter", "nccl")),
      Optional(8.0));
}

TEST(WorkerMetricsTest, BufferMemoryPerLocalDeviceIndex) {
  WorkerMetrics metrics(4, "gloo");
  ParsedProgram program = TwoWorkerProgram();
  // Global devices 4 and 5 are local indices 0 and 1 of their worker.
  program.buffers.push_back({0, 0, 4, {{0, 10}, {0, 10}}, BufferRole::kSource});
  program.buffers.push_back(
      {1, 0, 5, {{0, 5}, {0, 10}}, BufferRole::kDestination});
  program.buffers.push_back(
      {2, 0, 4, {{0, 2}, {0, 10}}, BufferRole::kDestination});
  {
    ScopedBufferMemory held(&metrics, program);
    const std::string text = RenderMetrics(*metrics.collectable());
    EXPECT_THAT(FindSample(text, R"(meshcast_worker_device_memory_bytes{)"
                             R"(device="0"})"),
                Optional(4.0 * (100 + 20)));
    EXPECT_THAT(FindSample(text, R"(meshcast_worker_device_memory_bytes{)"
                             R"(device="1"})"),
                Optional(4.0 * 50));
    EXPECT_EQ(FindSample(text, R"(meshcast_worker_device_memory_bytes{)"
                           R"(device="4"})"),
              std::nullopt);
  }
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(
      FindSample(text, R"(meshcast_worker_device_memory_bytes{device="0"})"),
      Optional(0.0));
  EXPECT_THAT(
      FindSample(text, R"(meshcast_worker_device_memory_bytes{device="1"})"),
      Optional(0.0));
}

TEST(WorkerMetricsTest, OpLabels) {
  EXPECT_EQ(WorkerMetrics::OpLabel(v1::Step::OP_BROADCAST), "broadcast");
  EXPECT_EQ(WorkerMetrics::OpLabel(v1::Step::OP_SEND_RECV), "send_recv");
  EXPECT_EQ(WorkerMetrics::OpLabel(v1::Step::OP_ALL_TO_ALL), "all_to_all");
  EXPECT_EQ(WorkerMetrics::OpLabel(static_cast<v1::Step::Op>(1234)),
            "unspecified");
}

// The executor reports live: one chain over 6 devices of 2 simulated
// workers sharing one metrics object (both workers' figures add up).
TEST(WorkerMetricsTest, ExecutorReportsStepsHopsAndMemory) {
  WorkerMetrics metrics(3, "gloo");
  TestJob job(2, 3);
  const int t = job.AddTensor({{64, 33}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d = 1; d < 6; ++d) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2, 3, 4, 5});
  ExecutorOptions options;
  options.relay.chunk_bytes = 1000;
  options.metrics = &metrics;
  TestJobOutcome outcome = RunTestJob(job, options);
  ASSERT_TRUE(outcome.all_ok);
  const double bytes = 64 * 33 * 4;
  const std::string text = RenderMetrics(*metrics.collectable());
  // Hops 0->1, 1->2 on worker 0 and 3->4, 4->5 on worker 1 are local
  // copies; 2->3 leaves worker 0 for worker 1.
  EXPECT_THAT(FindSample(text, Bytes("sent", "intra", "local")),
              Optional(4 * bytes));
  EXPECT_THAT(FindSample(text, Bytes("received", "intra", "local")),
              Optional(4 * bytes));
  EXPECT_THAT(FindSample(text, Bytes("sent", "inter", "gloo")), Optional(bytes));
  EXPECT_THAT(FindSample(text, Bytes("received", "inter", "gloo")),
              Optional(bytes));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_count{)"
                           R"(op="broadcast"})"),
              Optional(2.0));
  // Each hop is timed once, by its receiver.
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_transfer_duration_seconds_count{)"
                           R"(op="broadcast",link="intra"})"),
              Optional(4.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_transfer_duration_seconds_count{)"
                           R"(op="broadcast",link="inter"})"),
              Optional(1.0));
  std::optional<double> bandwidth =
      FindSample(text, R"(meshcast_worker_achieved_bandwidth_bytes_per_second{)"
                   R"(op="broadcast"})");
  ASSERT_TRUE(bandwidth.has_value());
  EXPECT_GT(*bandwidth, 0);
  // Everything in flight is over, every tile freed.
  EXPECT_THAT(FindSample(text, "meshcast_worker_running_steps"), Optional(0.0));
  for (int d = 0; d < 3; ++d) {
    EXPECT_THAT(FindSample(text, absl::StrCat(R"(meshcast_worker_device_memory_)"
                                          R"(bytes{device=")",
                                          d, R"("})")),
                Optional(0.0));
  }
}

// WorkerService counts every program by result, with what it verified.
TEST(WorkerMetricsTest, ServiceCountsTasksAndVerification) {
  WorkerMetrics metrics(2, "gloo");
  WorkerServiceOptions options;
  options.name = "worker0";
  options.num_devices = 2;
  options.metrics = &metrics;
  WorkerService service(options, /*kv=*/nullptr);

  // A complete copy 0 -> 1, and one that leaves rows [0, 5) unsent.
  for (bool complete : {true, false}) {
    TestJob job(1, 2, complete ? "complete" : "partial");
    const int t = job.AddTensor({{50, 21}, DType::kInt32});
    job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
    job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
    job.AddTransfer(t, complete ? job.FullBox(t) : Box{{5, 50}, {0, 21}},
                    {0, 1});
    v1::RunTaskRequest request;
    *request.mutable_program() = job.ProgramFor(0);
    v1::RunTaskResponse response;
    ASSERT_TRUE(service.RunTask(nullptr, &request, &response).ok());
    EXPECT_EQ(response.ok(), complete) << response.error();
  }
  // Refused before it runs: counted as failed.
  v1::RunTaskRequest empty;
  v1::RunTaskResponse refused;
  ASSERT_TRUE(service.RunTask(nullptr, &empty, &refused).ok());
  EXPECT_FALSE(refused.ok());

  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="ok"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="failed"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="aborted"})"),
              Optional(0.0));
  EXPECT_THAT(FindSample(text, "meshcast_worker_verified_elements_total"),
              Optional(2.0 * 50 * 21));
  EXPECT_THAT(FindSample(text, "meshcast_worker_verification_failures_total"),
              Optional(5.0 * 21));
  EXPECT_THAT(FindSample(text, Bytes("sent", "intra", "local")),
              Optional(4.0 * (50 + 45) * 21));
  // No label carries a job id.
  EXPECT_THAT(text, Not(HasSubstr("complete")));
  EXPECT_THAT(text, Not(HasSubstr("partial")));
}

// A device backend (GPUs) whose jobs report each step as taking
// `step_seconds` and `verified` elements, or are aborted. With `live` set it
// also reports each step to those metrics as it finishes, as the CUDA
// backend does when given a metrics pointer.
class FakeDeviceBackend : public DeviceBackend {
 public:
  struct Behaviour {
    bool cancelled = false;
    double step_seconds = 0.5;
    int64_t verified = 7;
    WorkerMetrics* live = nullptr;
  };
  explicit FakeDeviceBackend(Behaviour behaviour) : behaviour_(behaviour) {}
  std::unique_ptr<DeviceJob> NewJob() override {
    return std::make_unique<Job>(behaviour_);
  }
  bool ReportsMetrics() const override { return behaviour_.live != nullptr; }

 private:
  class Job : public DeviceJob {
   public:
    explicit Job(Behaviour behaviour) : behaviour_(behaviour) {}
    absl::StatusOr<v1::JobResult> Run(const ParsedProgram& program,
                                      KvStore*) override {
      if (behaviour_.cancelled) {
        return absl::CancelledError("aborted by the test");
      }
      v1::JobResult result;
      for (const StepDesc& step : program.steps) {
        if (behaviour_.live != nullptr) {
          behaviour_.live->StepFinished(program, step, behaviour_.step_seconds);
        }
        v1::StepResult* s = result.add_steps();
        s->set_step(step.id);
        s->set_bytes(step.bytes);
        s->set_seconds(behaviour_.step_seconds);
      }
      result.set_elements_verified(behaviour_.verified);
      return result;
    }
    void Abort(absl::string_view) override {}
    ExecutorTimings timings() const override { return {}; }

   private:
    const Behaviour behaviour_;
  };
  const Behaviour behaviour_;
};

// Worker 0's program of a two-worker job: device 0 (here) sends to device 2
// on the other worker, then device 3 (there) sends to device 1 (here).
v1::WorkerProgram CrossWorkerProgram(const std::string& job_id) {
  TestJob job(2, 2, job_id);
  const int t = job.AddTensor({{16, 8}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(3, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 2});
  job.AddTransfer(t, job.FullBox(t), {3, 1});
  return job.ProgramFor(0);
}

// Runs `program` on a 2-device service over `backend`, reporting to
// `metrics`.
v1::RunTaskResponse RunOnDeviceBackend(std::shared_ptr<DeviceBackend> backend,
                                       WorkerMetrics* metrics,
                                       const v1::WorkerProgram& program) {
  WorkerServiceOptions options;
  options.name = "gpu0";
  options.num_devices = 2;
  options.metrics = metrics;
  options.task.device_backend = std::move(backend);
  WorkerService service(options, /*kv=*/nullptr);
  v1::RunTaskRequest request;
  *request.mutable_program() = program;
  v1::RunTaskResponse response;
  EXPECT_TRUE(service.RunTask(nullptr, &request, &response).ok());
  return response;
}

// Device backends do not report live: the service records their steps from
// the result, with the remote backend's name on inter-worker bytes.
TEST(WorkerMetricsTest, ServiceRecordsDeviceBackendStepsFromTheResult) {
  WorkerMetrics metrics(2, "nccl");
  for (bool cancelled : {false, true}) {
    FakeDeviceBackend::Behaviour behaviour;
    behaviour.cancelled = cancelled;
    const v1::RunTaskResponse response = RunOnDeviceBackend(
        std::make_shared<FakeDeviceBackend>(behaviour), &metrics,
        CrossWorkerProgram(cancelled ? "aborted" : "done"));
    EXPECT_EQ(response.ok(), !cancelled) << response.error();
  }
  const double bytes = 16 * 8 * 4;
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, Bytes("sent", "inter", "nccl")), Optional(bytes));
  EXPECT_THAT(FindSample(text, Bytes("received", "inter", "nccl")),
              Optional(bytes));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_count{)"
                           R"(op="send_recv"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_sum{)"
                           R"(op="send_recv"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="ok"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="aborted"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, "meshcast_worker_verified_elements_total"),
              Optional(7.0));
}

// GPU workers report their steps as they finish; the service must not count
// them again from the result.
TEST(WorkerMetricsTest, ServiceDoesNotRecountStepsOfALiveReportingBackend) {
  WorkerMetrics metrics(2, "nccl");
  FakeDeviceBackend::Behaviour behaviour;
  behaviour.step_seconds = 0.25;
  behaviour.verified = 3;
  behaviour.live = &metrics;
  const v1::RunTaskResponse response =
      RunOnDeviceBackend(std::make_shared<FakeDeviceBackend>(behaviour),
                         &metrics, CrossWorkerProgram("live"));
  EXPECT_TRUE(response.ok()) << response.error();
  const double bytes = 16 * 8 * 4;
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_count{)"
                           R"(op="send_recv"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_step_duration_seconds_sum{)"
                           R"(op="send_recv"})"),
              Optional(0.5));
  EXPECT_THAT(FindSample(text, Bytes("sent", "inter", "nccl")), Optional(bytes));
  EXPECT_THAT(FindSample(text, Bytes("received", "inter", "nccl")),
              Optional(bytes));
  EXPECT_THAT(FindSample(text, R"(meshcast_worker_tasks_total{result="ok"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, "meshcast_worker_verified_elements_total"),
              Optional(3.0));
}

}  // namespace
}  // namespace meshcast::worker
