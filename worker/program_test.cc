#include "worker/program.h"

#include "gtest/gtest.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::TestJob;

TestJob ThreeStepJob() {
  TestJob job(2, 2);
  const int t = job.AddTensor({{8, 4}, DType::kFloat16});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  const int s0 = job.AddTransfer(t, job.FullBox(t), {0, 2});
  job.AddTransfer(t, job.FullBox(t), {2, 3}, {s0}, 1);  // worker 1 only
  job.AddTransfer(t, job.FullBox(t), {0, 1});           // worker 0 only
  return job;
}

TEST(ParseProgramTest, ConvertsTheProgramOfAWorker) {
  TestJob job = ThreeStepJob();
  auto program = ParseProgram(job.ProgramFor(1));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->rank, 1);
  EXPECT_EQ(program->world_size, 2);
  EXPECT_EQ(program->worker, "worker1");
  EXPECT_EQ(program->rank_workers,
            (std::vector<std::string>{"worker0", "worker1"}));
  EXPECT_EQ(program->local_devices, (std::vector<int>{2, 3}));
  EXPECT_TRUE(program->IsLocal(3));
  EXPECT_FALSE(program->IsLocal(0));
  EXPECT_EQ(program->RankOf(0), 0);
  ASSERT_EQ(program->tensors.size(), 1u);
  EXPECT_EQ(program->tensors[0].dtype, DType::kFloat16);
  EXPECT_EQ(program->buffers.size(), 2u);
  ASSERT_EQ(program->steps.size(), 2u);
  EXPECT_EQ(program->steps[0].chain, (std::vector<int>{0, 2}));
  EXPECT_EQ(program->steps[0].bytes, 8 * 4 * 2);
  EXPECT_EQ(program->steps[1].deps, (std::vector<int>{0}));
}

TEST(ParseProgramTest, DropsDepsOnStepsOutsideTheProgram) {
  TestJob job = ThreeStepJob();
  v1::WorkerProgram proto = job.ProgramFor(1);
  proto.mutable_plan()->mutable_steps(1)->add_deps(2);  // not on worker 1
  auto program = ParseProgram(proto);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->steps[1].deps, (std::vector<int>{0}));
}

TEST(ParseProgramTest, IgnoresOtherWorkersBuffersAndSteps) {
  TestJob job = ThreeStepJob();
  v1::WorkerProgram proto = job.ProgramFor(1);
  *proto.mutable_plan()->add_buffers() = job.plan().buffers(0);  // device 0
  *proto.mutable_plan()->add_steps() = job.plan().steps(2);      // 0 -> 1
  *proto.mutable_plan()->add_groups() = job.plan().groups(2);
  auto program = ParseProgram(proto);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->buffers.size(), 2u);
  EXPECT_EQ(program->steps.size(), 2u);
}

struct BadCase {
  std::string name;
  std::function<void(v1::WorkerProgram&)> corrupt;
  absl::StatusCode code;
  std::string message_part;
};

TEST(ParseProgramTest, RejectsBadProgramsNamingTheField) {
  const std::vector<BadCase> cases = {
      {"no job id", [](v1::WorkerProgram& p) { p.clear_job_id(); },
       absl::StatusCode::kInvalidArgument, "job_id"},
      {"rank out of range", [](v1::WorkerProgram& p) { p.set_rank(2); },
       absl::StatusCode::kInvalidArgument, "rank"},
      {"rank names not one per rank",
       [](v1::WorkerProgram& p) { p.add_rank_workers("only-one"); },
       absl::StatusCode::kInvalidArgument,
       "program.rank_workers has 3 names but world_size is 2"},
      {"bad dtype",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_tensors(0)->set_dtype(v1::DTYPE_UNSPECIFIED);
       },
       absl::StatusCode::kInvalidArgument, "plan.tensors[0]"},
      {"zero extent",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_tensors(0)->set_shape(0, 0);
       },
       absl::StatusCode::kInvalidArgument, "extent"},
      {"buffer outside tensor",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_buffers(0)->mutable_box(0)->set_end(9);
       },
       absl::StatusCode::kInvalidArgument, "plan.buffers id"},
      {"unsupported op",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->set_op(v1::Step::OP_ALL_REDUCE);
       },
       absl::StatusCode::kUnimplemented, "OP_ALL_REDUCE"},
      {"unknown group",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->set_group(77);
       },
       absl::StatusCode::kInvalidArgument, "group 77"},
      {"slice rank",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->mutable_slice()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument, "slice"},
      {"local device mapped elsewhere",
       [](v1::WorkerProgram& p) { (*p.mutable_device_rank())[2] = 0; },
       absl::StatusCode::kInvalidArgument, "device_rank"},
      {"cycle",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->add_deps(1);
       },
       absl::StatusCode::kInvalidArgument, "cycle"},
      {"self dependency",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->add_deps(0);
       },
       absl::StatusCode::kInvalidArgument, "depends on itself"},
      {"device twice in chain",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_groups(0)->add_devices(2);
       },
       absl::StatusCode::kInvalidArgument, "twice"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::WorkerProgram proto = ThreeStepJob().ProgramFor(1);
    bad.corrupt(proto);
    auto program = ParseProgram(proto);
    ASSERT_FALSE(program.ok());
    EXPECT_EQ(program.status().code(), bad.code) << program.status();
    EXPECT_NE(program.status().message().find(bad.message_part),
              std::string::npos)
        << program.status();
  }
}

}  // namespace
}  // namespace meshcast::worker
