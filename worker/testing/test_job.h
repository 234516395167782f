// TestJob: hand-built global plans for worker tests, projected into one
// WorkerProgram per simulated worker the way the controller does it
// (docs/dataplane.md), plus RunTestJob, which runs every worker's program
// in its own thread with a Gloo communicator over 127.0.0.1.
//
//   TestJob job(/*workers=*/2, /*devices_per_worker=*/3);
//   int t = job.AddTensor({{64, 33}, DType::kFloat32});
//   job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
//   job.AddTransfer(t, job.FullBox(t), {0, 1, 3});
//   TestJobOutcome outcome = RunTestJob(job, options);
//
// Device d lives on worker d / devices_per_worker.
// Thread safety: not thread-safe; RunTestJob uses its own threads.
#ifndef MESHCAST_WORKER_TESTING_TEST_JOB_H_
#define MESHCAST_WORKER_TESTING_TEST_JOB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"
#include "worker/executor.h"
#include "worker/program.h"

namespace meshcast::worker::testing {

class TestJob {
 public:
  TestJob(int workers, int devices_per_worker, std::string job_id = "test-job");

  int AddTensor(const TensorSpec& spec);
  // Plan.tensor_inits[tensor] (the others stay pattern).
  void SetInitializer(int tensor, const v1::Initializer& init);
  // Returns the buffer id.
  int AddBuffer(int device, int tensor, const Box& box, BufferRole role);
  // Returns the step id.
  int AddTransfer(int tensor, const Box& slice, std::vector<int> chain,
                  std::vector<int> deps = {}, int stage = 0);
  // A relay tree (OP_BROADCAST): `devices` in rank order, parents[i] the
  // rank that forwards to rank i (parents[0] = -1; CommGroup.parents).
  int AddRelayTree(int tensor, const Box& slice, std::vector<int> devices,
                   std::vector<int> parents, std::vector<int> deps = {},
                   int stage = 0);
  // Any step (collective, local copy, compute): `step` with its op, operands
  // and attributes; its id and group are assigned here (a group of `group`
  // when non-empty). Returns the step id.
  int AddStep(v1::Step step, std::vector<int> group = {});
  // Operand of buffer `buffer` (slice: empty = the whole buffer).
  static v1::Operand Operand(int buffer, const Box& slice = {});
  void set_verify(v1::VerifyMode mode) { verify_ = mode; }

  // For every destination buffer and every source buffer of another device
  // that overlaps it, a point-to-point transfer of the overlap (what a
  // send/recv strategy would plan); overlaps on the same device are left to
  // the local pre-copy.
  void AddSendRecvTransfers(int tensor);

  // Boxes of `shape` split like torch.chunk along `dim` into `parts`.
  static Box ShardBox(const std::vector<int64_t>& shape, int dim, int parts,
                      int k);
  Box FullBox(int tensor) const;

  int workers() const { return workers_; }
  int WorkerOf(int device) const { return device / devices_per_worker_; }

  v1::Plan& plan() { return plan_; }
  // The program of `worker`, as the controller projects it: its devices,
  // buffers, the steps touching them, and (for verification) every
  // value-defining step of the plan with the buffers its operands name.
  v1::WorkerProgram ProgramFor(int worker) const;

 private:
  const int workers_;
  const int devices_per_worker_;
  const std::string job_id_;
  v1::Plan plan_;
  // Devices each step touches (group, or the device of a local step).
  std::vector<std::vector<int>> step_chains_;
  v1::VerifyMode verify_ = v1::VERIFY_MODE_FULL;
};

// An all-to-all of a float32 1-D tensor between whole buffers, as MoE's S1
// and S2 schedules plan it: every rank holds all of IN (source) and all of
// OUT (scratch), so each rank's part is found by the counts (uneven, with
// zeros); a local copy of each rank's part of OUT into a destination makes
// it verified. Returns the elements verified.
int64_t AddWholeBufferAllToAll(TestJob& job, const std::vector<int>& group);

struct TestJobOutcome {
  std::vector<absl::StatusOr<v1::JobResult>> results;  // by worker
  int64_t mismatches = 0;         // over the workers that succeeded
  int64_t elements_verified = 0;  // over the workers that succeeded
  double max_abs_error = 0;       // over the workers that succeeded
  bool all_ok = true;
};

// Runs each worker's program on its own thread (Gloo communicators through
// an in-memory store when there are several workers).
TestJobOutcome RunTestJob(const TestJob& job, const ExecutorOptions& options);

// A planner's whole Plan as a TestJob on `workers` x `devices_per_worker`
// devices, with the same tensor, buffer and step ids (the kinds' lowering
// tests run their plans with it). Every tensor is taken as float32.
// INTERNAL when an id comes out different (a plan whose ids are not their
// positions).
absl::StatusOr<TestJob> TestJobOfPlan(const v1::Plan& plan, int workers,
                                      int devices_per_worker);

}  // namespace meshcast::worker::testing

#endif  // MESHCAST_WORKER_TESTING_TEST_JOB_H_
