#include "worker/program.h"

#include "absl/strings/str_cat.h"
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

TEST(ParseProgramTest, FillsTheParentsOfRelayChainsAndTrees) {
  TestJob job(2, 2);
  const int t = job.AddTensor({{8, 4}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 2, 3});
  job.AddRelayTree(t, job.FullBox(t), {0, 2, 1, 3}, {-1, 0, 0, 1});
  auto program = ParseProgram(job.ProgramFor(1));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->steps.size(), 2u);
  EXPECT_EQ(program->steps[0].parents, (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(program->steps[1].parents, (std::vector<int>{-1, 0, 0, 1}));
}

TEST(ParseProgramTest, RejectsBadRelayTreesNamingTheRank) {
  const auto parse_with = [](std::vector<int> parents) {
    TestJob job(2, 2);
    const int t = job.AddTensor({{8, 4}, DType::kFloat32});
    job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
    for (int d : {1, 2, 3}) {
      job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
    }
    job.AddRelayTree(t, job.FullBox(t), {0, 2, 1, 3}, std::move(parents));
    return ParseProgram(job.ProgramFor(0)).status();
  };
  EXPECT_TRUE(parse_with({-1, 0, 0, 2}).ok());
  const absl::Status count = parse_with({-1, 0, 0});
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("4 devices but 3 parents"), std::string::npos)
      << count;
  const absl::Status root = parse_with({0, 0, 0, 1});
  EXPECT_NE(root.message().find("parents[0] is 0"), std::string::npos) << root;
  const absl::Status later = parse_with({-1, 0, 3, 1});
  EXPECT_NE(later.message().find("parents[2] is 3; must be a rank in [0, 1]"),
            std::string::npos)
      << later;
  TestJob chunked(2, 2);
  const int t = chunked.AddTensor({{8, 4}, DType::kFloat32});
  chunked.AddBuffer(0, t, chunked.FullBox(t), BufferRole::kSource);
  chunked.AddBuffer(2, t, chunked.FullBox(t), BufferRole::kDestination);
  chunked.AddTransfer(t, chunked.FullBox(t), {0, 2});
  chunked.plan().mutable_steps(0)->set_chunk_bytes(-4);
  const absl::Status chunk = ParseProgram(chunked.ProgramFor(0)).status();
  EXPECT_NE(chunk.message().find("chunk_bytes is -4; must be >= 0"),
            std::string::npos)
      << chunk;
  chunked.plan().mutable_steps(0)->set_chunk_bytes(64);
  absl::StatusOr<ParsedProgram> parsed = ParseProgram(chunked.ProgramFor(0));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->steps[0].chunk_bytes, 64);
  EXPECT_EQ(RelayChunkBytes(parsed->steps[0], 1 << 20), 64);
  const absl::Status negative = parse_with({-1, 0, -1, 1});
  EXPECT_NE(negative.message().find("parents[2] is -1"), std::string::npos)
      << negative;

  TestJob job(1, 2);
  const int in = job.AddTensor({{2, 4}, DType::kFloat32});
  const int out = job.AddTensor({{4}, DType::kFloat32});
  v1::Step step;
  step.set_op(v1::Step::OP_ALL_REDUCE);
  for (int d : {0, 1}) {
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(d, in, {{d, d + 1}, {0, 4}}, BufferRole::kSource));
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(d, out, job.FullBox(out), BufferRole::kDestination));
  }
  step.set_bytes(16);
  const int id = job.AddStep(step, {0, 1});
  v1::WorkerProgram proto = job.ProgramFor(0);
  v1::Plan& plan = *proto.mutable_plan();
  for (v1::CommGroup& group : *plan.mutable_groups()) {
    if (group.id() != job.plan().steps(id).group()) continue;
    group.add_parents(-1);
    group.add_parents(0);
  }
  const absl::Status collective = ParseProgram(proto).status();
  EXPECT_NE(collective.message().find("only relay steps"), std::string::npos)
      << collective;
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

// An all-reduce over devices 0..3 of 2 workers, IN [4, 6] row r on device
// r, OUT [6] everywhere; IN random.
TestJob AllReduceJob() {
  TestJob job(2, 2);
  const int in = job.AddTensor({{4, 6}, DType::kFloat32});
  const int out = job.AddTensor({{6}, DType::kFloat32});
  v1::Initializer random;
  random.set_kind(v1::Initializer::KIND_RANDOM);
  random.set_seed(3);
  job.SetInitializer(in, random);
  v1::Step step;
  step.set_op(v1::Step::OP_ALL_REDUCE);
  step.set_reduction(v1::REDUCTION_MAX);
  step.set_bytes(24);
  for (int r = 0; r < 4; ++r) {
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(r, in, {{r, r + 1}, {0, 6}}, BufferRole::kSource));
  }
  for (int r = 0; r < 4; ++r) {
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(r, out, {{0, 6}}, BufferRole::kDestination));
  }
  job.AddStep(step, {0, 1, 2, 3});
  // A scratch buffer and a compute step on worker 0 only.
  const int scratch = job.AddBuffer(1, out, {{0, 6}}, BufferRole::kScratch);
  v1::Step scale;
  scale.set_op(v1::Step::OP_COMPUTE);
  scale.set_device(1);
  scale.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_SCALE);
  *scale.add_inputs() = TestJob::Operand(5);  // device 1's OUT buffer
  *scale.add_outputs() = TestJob::Operand(scratch);
  scale.add_deps(0);
  job.AddStep(scale);
  return job;
}

TEST(ParseProgramTest, ResolvesTheOperandsAndAttributesOfACollective) {
  TestJob job = AllReduceJob();
  auto program = ParseProgram(job.ProgramFor(1));
  ASSERT_TRUE(program.ok()) << program.status();
  // The compute step on worker 0 is value-defining: kept aside with its
  // buffers (device 1's), never run here.
  ASSERT_EQ(program->steps.size(), 1u);
  const StepDesc& step = program->steps[0];
  EXPECT_EQ(step.op, v1::Step::OP_ALL_REDUCE);
  EXPECT_EQ(step.reduction, v1::REDUCTION_MAX);
  EXPECT_EQ(step.chain, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(step.bytes, 24);
  ASSERT_EQ(step.inputs.size(), 4u);
  ASSERT_EQ(step.outputs.size(), 4u);
  // Rank 2 is local: its input is resolved to its buffer and box.
  EXPECT_TRUE(step.inputs[2].local);
  EXPECT_EQ(step.inputs[2].buffer, 2);
  EXPECT_EQ(step.inputs[2].tensor, 0);
  EXPECT_EQ(step.inputs[2].device, 2);
  EXPECT_EQ(step.inputs[2].box, (Box{{2, 3}, {0, 6}}));
  // Rank 0 is worker 0's and its buffer is in the program (the controller
  // sends the buffers of value-defining steps): known, not local.
  EXPECT_FALSE(step.inputs[0].local);
  EXPECT_TRUE(step.inputs[0].known());
  EXPECT_EQ(program->buffers.size(), 4u);  // IN and OUT of devices 2, 3
  EXPECT_FALSE(program->other_buffers.empty());
  EXPECT_EQ(program->tensor_inits[0].kind(), v1::Initializer::KIND_RANDOM);
  EXPECT_EQ(program->tensor_computed, (std::vector<bool>{false, true}));
  ASSERT_NE(program->plan, nullptr);
  EXPECT_EQ(program->plan->steps_size(), 2);
  EXPECT_EQ(program->FirstLocalDevice(step), 2);

  auto worker0 = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(worker0.ok()) << worker0.status();
  ASSERT_EQ(worker0->steps.size(), 2u);
  const StepDesc& scale = worker0->steps[1];
  EXPECT_EQ(scale.op, v1::Step::OP_COMPUTE);
  EXPECT_EQ(scale.device, 1);
  EXPECT_TRUE(scale.compute.has_elementwise());
  EXPECT_EQ(scale.deps, (std::vector<int>{0}));
  EXPECT_EQ(worker0->buffers.back().role, BufferRole::kScratch);
}

TEST(ParseProgramTest, RejectsBadOperandsNamingTheStepAndField) {
  const std::vector<
      std::pair<std::function<void(v1::WorkerProgram&)>, std::string>>
      cases = {
          {[](v1::WorkerProgram& p) {
             p.mutable_plan()->mutable_steps(0)->mutable_inputs(2)->set_buffer(
                 99);
           },
           "plan.steps id 0 inputs[2]: buffer 99 is not in plan.buffers"},
          {[](v1::WorkerProgram& p) {
             // Device 3's buffer as rank 2's input.
             p.mutable_plan()->mutable_steps(0)->mutable_inputs(2)->set_buffer(
                 3);
           },
           "inputs[2]: buffer 3 is on device 3 but the operand belongs to "
           "device 2"},
          {[](v1::WorkerProgram& p) {
             v1::Interval* row = p.mutable_plan()
                                     ->mutable_steps(0)
                                     ->mutable_inputs(2)
                                     ->add_slice();
             row->set_begin(0);
             row->set_end(4);
             p.mutable_plan()
                 ->mutable_steps(0)
                 ->mutable_inputs(2)
                 ->add_slice()
                 ->set_end(6);
           },
           "inputs[2] slice"},
          {[](v1::WorkerProgram& p) {
             p.mutable_plan()
                 ->mutable_steps(0)
                 ->mutable_outputs()
                 ->RemoveLast();
           },
           "OP_ALL_REDUCE over a group of 4 needs 4 inputs and 4 outputs"},
          {[](v1::WorkerProgram& p) {
             p.mutable_plan()->mutable_steps(0)->set_op(
                 v1::Step::OP_ALL_TO_ALL);
           },
           "OP_ALL_TO_ALL counts has 0 entries; a group of 4 needs 16"},
      };
  for (const auto& [corrupt, message] : cases) {
    SCOPED_TRACE(message);
    v1::WorkerProgram proto = AllReduceJob().ProgramFor(1);
    corrupt(proto);
    auto program = ParseProgram(proto);
    ASSERT_FALSE(program.ok());
    EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(program.status().message().find(message), std::string::npos)
        << program.status();
  }
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
      {"no op",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->set_op(v1::Step::OP_UNSPECIFIED);
       },
       absl::StatusCode::kInvalidArgument, "plan.steps id 0: op 0"},
      {"unknown initializer",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->add_tensor_inits()->set_kind(
             static_cast<v1::Initializer::Kind>(9));
       },
       absl::StatusCode::kInvalidArgument, "plan.tensor_inits[0].kind 9"},
      {"collective without one input per rank",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->set_op(v1::Step::OP_ALL_REDUCE);
       },
       absl::StatusCode::kInvalidArgument, "needs 2 inputs and 2 outputs"},
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

// A weighted gather on device 0: X [4, 3] float32, W [4], Y [2, 3] (k = 2),
// and a relu of Y into Z; `dtype` for every tensor.
TestJob GatherJob(DType dtype = DType::kFloat32) {
  TestJob job(1, 1);
  const int x = job.AddTensor({{4, 3}, dtype});
  const int w = job.AddTensor({{4}, dtype});
  const int y = job.AddTensor({{2, 3}, dtype});
  const int z = job.AddTensor({{2, 3}, dtype});
  v1::Step gather;
  gather.set_op(v1::Step::OP_COMPUTE);
  gather.set_device(0);
  v1::GatherAttrs* g = gather.mutable_compute()->mutable_gather();
  g->set_row(3);
  g->set_k(2);
  for (int64_t i : {0, 3, -1, 1}) g->add_index(i);
  *gather.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource));
  *gather.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, w, job.FullBox(w), BufferRole::kSource));
  const int yb = job.AddBuffer(0, y, job.FullBox(y), BufferRole::kScratch);
  *gather.add_outputs() = TestJob::Operand(yb);
  job.AddStep(gather);
  v1::Step relu;
  relu.set_op(v1::Step::OP_COMPUTE);
  relu.set_device(0);
  relu.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_RELU);
  *relu.add_inputs() = TestJob::Operand(yb);
  *relu.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, z, job.FullBox(z), BufferRole::kDestination));
  relu.add_deps(0);
  job.AddStep(relu);
  return job;
}

TEST(ParseProgramTest, AcceptsGathersAndActivations) {
  auto program = ParseProgram(GatherJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->steps.size(), 2u);
  EXPECT_TRUE(program->steps[0].compute.has_gather());
  EXPECT_EQ(program->steps[0].inputs.size(), 2u);
  EXPECT_EQ(program->tensor_computed,
            (std::vector<bool>{false, false, true, true}));
  // Without W, and with an integer dtype (a copy / wrapping sum), too.
  for (DType dtype : {DType::kFloat32, DType::kInt32}) {
    v1::WorkerProgram proto = GatherJob(dtype).ProgramFor(0);
    proto.mutable_plan()->mutable_steps(0)->mutable_inputs()->RemoveLast();
    proto.mutable_plan()->mutable_steps()->RemoveLast();  // the relu
    EXPECT_TRUE(ParseProgram(proto).ok()) << DTypeName(dtype);
  }
}

TEST(ParseProgramTest, RejectsBadGathersAndActivationsNamingTheField) {
  const std::vector<BadCase> cases = {
      {"row 0",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(0)
             ->mutable_compute()
             ->mutable_gather()
             ->set_row(0);
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 0: compute.gather.row = 0 must be >= 1"},
      {"row does not divide X",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(0)
             ->mutable_compute()
             ->mutable_gather()
             ->set_row(5);
       },
       absl::StatusCode::kInvalidArgument,
       "compute.gather.row = 5: X has 12 elements and Y 6"},
      {"index out of range",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(0)
             ->mutable_compute()
             ->mutable_gather()
             ->set_index(3, 4);
       },
       absl::StatusCode::kInvalidArgument,
       "compute.gather.index[3] = 4 is outside [-1, rows(X) = 4)"},
      {"index count",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(0)
             ->mutable_compute()
             ->mutable_gather()
             ->set_k(1);
       },
       absl::StatusCode::kInvalidArgument,
       "compute.gather.index has 4 entries; it needs rows(Y) * k = 2 * 1 = 2"},
      {"W size",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->mutable_inputs(1)->set_buffer(0);
       },
       absl::StatusCode::kInvalidArgument, "compute.gather: W has 12 elements"},
      {"three inputs",
       [](v1::WorkerProgram& p) {
         *p.mutable_plan()->mutable_steps(0)->add_inputs() =
             TestJob::Operand(0);
       },
       absl::StatusCode::kInvalidArgument,
       "OP_COMPUTE (gather) needs 1 or 2 inputs and 1 output, has 3 and 1"},
      {"relu with two inputs",
       [](v1::WorkerProgram& p) {
         *p.mutable_plan()->mutable_steps(1)->add_inputs() =
             TestJob::Operand(0);
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 1: OP_COMPUTE (elementwise) needs 1 inputs"},
      {"unknown kind",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(1)
             ->mutable_compute()
             ->mutable_elementwise()
             ->set_kind(static_cast<v1::ElementwiseAttrs::Kind>(9));
       },
       absl::StatusCode::kInvalidArgument,
       "compute.elementwise.kind 9 is unknown; allowed: KIND_ADD, KIND_SCALE, "
       "KIND_RELU, KIND_SIGMOID"},
      {"no op",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(1)->clear_compute();
       },
       absl::StatusCode::kInvalidArgument,
       "OP_COMPUTE needs compute.gemm, compute.elementwise, compute.gather, "
       "compute.row_dot, compute.attention_block, compute.attention_finish or "
       "compute.attention_backward"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::WorkerProgram proto = GatherJob().ProgramFor(0);
    bad.corrupt(proto);
    auto program = ParseProgram(proto);
    ASSERT_FALSE(program.ok());
    EXPECT_EQ(program.status().code(), bad.code) << program.status();
    EXPECT_NE(program.status().message().find(bad.message_part),
              std::string::npos)
        << program.status();
  }
  // Integers: RELU is not defined, weights are not implemented.
  auto integer = ParseProgram(GatherJob(DType::kInt32).ProgramFor(0));
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kUnimplemented)
      << integer.status();
  EXPECT_NE(integer.status().message().find("compute.gather with weights"),
            std::string::npos)
      << integer.status();
  v1::WorkerProgram relu = GatherJob(DType::kInt8).ProgramFor(0);
  relu.mutable_plan()->mutable_steps(0)->mutable_inputs()->RemoveLast();
  integer = ParseProgram(relu);
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(integer.status().message().find(
                "plan.steps id 1: compute.elementwise.kind KIND_RELU on int8 "
                "(output buffer 3) is not defined; allowed dtypes: float16"),
            std::string::npos)
      << integer.status();
}

// The backward ops on device 0: A [4, 3] and B [2, 3] float32 rows, D [3]
// = row_dot(A, B) (row 3, pairs (0, 1), (3, -1), (2, 0)); G, Y [2, 3] and
// relu_grad(G, Y), sigmoid_grad(G, Y) into R and S; `dtype` for every
// tensor.
TestJob BackwardJob(DType dtype = DType::kFloat32) {
  TestJob job(1, 1);
  const int a = job.AddTensor({{4, 3}, dtype});
  const int b = job.AddTensor({{2, 3}, dtype});
  const int d = job.AddTensor({{3}, dtype});
  const int g = job.AddTensor({{2, 3}, dtype});
  const int y = job.AddTensor({{2, 3}, dtype});
  const int r = job.AddTensor({{2, 3}, dtype});
  const int s = job.AddTensor({{2, 3}, dtype});
  v1::Step dot;
  dot.set_op(v1::Step::OP_COMPUTE);
  dot.set_device(0);
  v1::RowDotAttrs* attrs = dot.mutable_compute()->mutable_row_dot();
  attrs->set_row(3);
  for (int64_t i : {0, 1, 3, -1, 2, 0}) attrs->add_index(i);
  *dot.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource));
  *dot.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, b, job.FullBox(b), BufferRole::kSource));
  *dot.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, d, job.FullBox(d), BufferRole::kDestination));
  job.AddStep(dot);
  const int gb = job.AddBuffer(0, g, job.FullBox(g), BufferRole::kSource);
  const int yb = job.AddBuffer(0, y, job.FullBox(y), BufferRole::kSource);
  for (auto [kind, out] :
       {std::pair{v1::ElementwiseAttrs::KIND_RELU_GRAD, r},
        std::pair{v1::ElementwiseAttrs::KIND_SIGMOID_GRAD, s}}) {
    v1::Step step;
    step.set_op(v1::Step::OP_COMPUTE);
    step.set_device(0);
    step.mutable_compute()->mutable_elementwise()->set_kind(kind);
    *step.add_inputs() = TestJob::Operand(gb);
    *step.add_inputs() = TestJob::Operand(yb);
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(0, out, job.FullBox(out), BufferRole::kDestination));
    job.AddStep(step);
  }
  return job;
}

TEST(ParseProgramTest, AcceptsRowDotsAndGradients) {
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    auto program = ParseProgram(BackwardJob(dtype).ProgramFor(0));
    ASSERT_TRUE(program.ok()) << DTypeName(dtype) << ": " << program.status();
    ASSERT_EQ(program->steps.size(), 3u);
    EXPECT_TRUE(program->steps[0].compute.has_row_dot());
    EXPECT_EQ(program->steps[0].inputs.size(), 2u);
    EXPECT_EQ(program->steps[1].inputs.size(), 2u);
    EXPECT_EQ(
        program->tensor_computed,
        (std::vector<bool>{false, false, true, false, false, true, true}));
  }
}

TEST(ParseProgramTest, RejectsBadRowDotsAndGradientsNamingTheField) {
  auto row_dot = [](v1::WorkerProgram& p) {
    return p.mutable_plan()
        ->mutable_steps(0)
        ->mutable_compute()
        ->mutable_row_dot();
  };
  const std::vector<BadCase> cases = {
      {"row 0", [&](v1::WorkerProgram& p) { row_dot(p)->set_row(0); },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 0: compute.row_dot.row = 0 must be >= 1"},
      {"row does not divide B",
       [&](v1::WorkerProgram& p) { row_dot(p)->set_row(4); },
       absl::StatusCode::kInvalidArgument,
       "compute.row_dot.row = 4: A has 12 elements and B 6; both must be "
       "whole rows"},
      {"index of A out of range",
       [&](v1::WorkerProgram& p) { row_dot(p)->set_index(4, 4); },
       absl::StatusCode::kInvalidArgument,
       "compute.row_dot.index[4] = 4 is outside [-1, rows(A) = 4)"},
      {"index of B out of range",
       [&](v1::WorkerProgram& p) { row_dot(p)->set_index(1, 2); },
       absl::StatusCode::kInvalidArgument,
       "compute.row_dot.index[1] = 2 is outside [-1, rows(B) = 2)"},
      {"index count", [&](v1::WorkerProgram& p) { row_dot(p)->add_index(0); },
       absl::StatusCode::kInvalidArgument,
       "compute.row_dot.index has 7 entries; it needs 2 * elements(D) = 2 * "
       "3 = 6"},
      {"one input",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->mutable_inputs()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 0: OP_COMPUTE (row_dot) needs 2 inputs and 1 output, "
       "has 1 and 1"},
      {"relu_grad with one input",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(1)->mutable_inputs()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 1: OP_COMPUTE (elementwise) needs 2 inputs and 1 "
       "output, has 1 and 1"},
      {"no op",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->clear_compute();
       },
       absl::StatusCode::kInvalidArgument,
       "OP_COMPUTE needs compute.gemm, compute.elementwise, compute.gather, "
       "compute.row_dot, compute.attention_block, compute.attention_finish or "
       "compute.attention_backward"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::WorkerProgram proto = BackwardJob().ProgramFor(0);
    bad.corrupt(proto);
    auto program = ParseProgram(proto);
    ASSERT_FALSE(program.ok());
    EXPECT_EQ(program.status().code(), bad.code) << program.status();
    EXPECT_NE(program.status().message().find(bad.message_part),
              std::string::npos)
        << program.status();
  }
  // Integers: a row dot, RELU_GRAD and SIGMOID_GRAD are not defined.
  auto integer = ParseProgram(BackwardJob(DType::kInt32).ProgramFor(0));
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument)
      << integer.status();
  EXPECT_NE(integer.status().message().find(
                "plan.steps id 0: compute.row_dot on int32 (output buffer 2) "
                "is not defined; allowed dtypes: float16"),
            std::string::npos)
      << integer.status();
  for (int step : {1, 2}) {
    v1::WorkerProgram proto = BackwardJob(DType::kInt32).ProgramFor(0);
    // Keep only step `step` (the row dot is rejected first otherwise).
    v1::Step keep = proto.plan().steps(step);
    proto.mutable_plan()->clear_steps();
    *proto.mutable_plan()->add_steps() = keep;
    integer = ParseProgram(proto);
    EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument)
        << integer.status();
    EXPECT_NE(integer.status().message().find(absl::StrCat(
                  "compute.elementwise.kind ",
                  step == 1 ? "KIND_RELU_GRAD" : "KIND_SIGMOID_GRAD",
                  " on int32 (output buffer ", step == 1 ? 5 : 6,
                  ") is not defined; allowed dtypes: float16")),
              std::string::npos)
        << integer.status();
  }
}

// Attention on device 0, `dtype` for every tensor: Q [1, 2, 3, 4] (batch
// 1, 2 heads, 3 query rows, head_dim 4), K and V [1, 1, 5, 4] (one kv
// head, 5 keys), the state S [1, 2, 3, 6] (scratch) and O [1, 2, 3, 4];
// step 0 a block from an empty state, step 1 a causal block in place on S,
// step 2 the finish. Buffers 0-4 in that order.
TestJob AttentionJob(DType dtype = DType::kFloat32) {
  TestJob job(1, 1);
  const int q = job.AddTensor({{1, 2, 3, 4}, dtype});
  const int k = job.AddTensor({{1, 1, 5, 4}, dtype});
  const int v = job.AddTensor({{1, 1, 5, 4}, dtype});
  const int s = job.AddTensor({{1, 2, 3, 6}, dtype});
  const int o = job.AddTensor({{1, 2, 3, 4}, dtype});
  const int qb = job.AddBuffer(0, q, job.FullBox(q), BufferRole::kSource);
  const int kb = job.AddBuffer(0, k, job.FullBox(k), BufferRole::kSource);
  const int vb = job.AddBuffer(0, v, job.FullBox(v), BufferRole::kSource);
  const int sb = job.AddBuffer(0, s, job.FullBox(s), BufferRole::kScratch);
  const int ob = job.AddBuffer(0, o, job.FullBox(o), BufferRole::kDestination);
  v1::AttentionBlockAttrs attrs;
  attrs.set_batch(1);
  attrs.set_heads(2);
  attrs.set_kv_heads(1);
  attrs.set_q_rows(3);
  attrs.set_kv_rows(5);
  attrs.set_head_dim(4);
  for (bool second : {false, true}) {
    v1::Step step;
    step.set_op(v1::Step::OP_COMPUTE);
    step.set_device(0);
    v1::AttentionBlockAttrs* a = step.mutable_compute()->mutable_attention_block();
    *a = attrs;
    if (second) {
      a->set_causal(true);
      for (int64_t p : {2, 3, 4}) a->add_q_position(p);
      for (int64_t p : {0, 1, 2, 3, 4}) a->add_kv_position(p);
    }
    for (int b : {qb, kb, vb}) *step.add_inputs() = TestJob::Operand(b);
    if (second) *step.add_inputs() = TestJob::Operand(sb);
    *step.add_outputs() = TestJob::Operand(sb);
    if (second) step.add_deps(0);
    job.AddStep(step);
  }
  v1::Step finish;
  finish.set_op(v1::Step::OP_COMPUTE);
  finish.set_device(0);
  finish.mutable_compute()->mutable_attention_finish()->set_head_dim(4);
  *finish.add_inputs() = TestJob::Operand(sb);
  *finish.add_outputs() = TestJob::Operand(ob);
  finish.add_deps(1);
  job.AddStep(finish);
  return job;
}

TEST(ParseProgramTest, AcceptsAttentionSteps) {
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    auto program = ParseProgram(AttentionJob(dtype).ProgramFor(0));
    ASSERT_TRUE(program.ok()) << DTypeName(dtype) << ": " << program.status();
    ASSERT_EQ(program->steps.size(), 3u);
    EXPECT_TRUE(program->steps[0].compute.has_attention_block());
    EXPECT_EQ(program->steps[0].inputs.size(), 3u);
    EXPECT_EQ(program->steps[1].inputs.size(), 4u);
    EXPECT_TRUE(program->steps[2].compute.has_attention_finish());
    EXPECT_EQ(program->steps[2].inputs.size(), 1u);
    EXPECT_EQ(program->tensor_computed,
              (std::vector<bool>{false, false, false, true, true}));
  }
}

TEST(ParseProgramTest, RejectsBadAttentionStepsNamingTheField) {
  auto block = [](v1::WorkerProgram& p, int step) {
    return p.mutable_plan()
        ->mutable_steps(step)
        ->mutable_compute()
        ->mutable_attention_block();
  };
  const std::vector<BadCase> cases = {
      {"q_rows does not fit Q",
       [&](v1::WorkerProgram& p) { block(p, 0)->set_q_rows(4); },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 0: compute.attention_block: Q has 24 elements; want "
       "batch * heads * q_rows * head_dim = 1 * 2 * 4 * 4 = 32"},
      {"q_position count",
       [&](v1::WorkerProgram& p) {
         block(p, 1)->mutable_q_position()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 1: compute.attention_block.q_position has 2 entries; "
       "want q_rows = 3"},
      {"kv_heads does not divide heads",
       [&](v1::WorkerProgram& p) { block(p, 0)->set_kv_heads(3); },
       absl::StatusCode::kInvalidArgument,
       "compute.attention_block.heads = 2 is not a multiple of kv_heads = 3"},
      {"head_dim 0", [&](v1::WorkerProgram& p) { block(p, 0)->set_head_dim(0); },
       absl::StatusCode::kInvalidArgument,
       "compute.attention_block.head_dim = 0 must be in [1, 2147483647]"},
      {"two inputs",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()->mutable_steps(0)->mutable_inputs()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 0: OP_COMPUTE (attention_block) needs 3 or 4 inputs and "
       "1 output, has 2 and 1"},
      {"finish with two inputs",
       [](v1::WorkerProgram& p) {
         v1::Step* finish = p.mutable_plan()->mutable_steps(2);
         *finish->add_inputs() = finish->inputs(0);
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 2: OP_COMPUTE (attention_finish) needs 1 inputs and 1 "
       "output, has 2 and 1"},
      {"finish head_dim",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(2)
             ->mutable_compute()
             ->mutable_attention_finish()
             ->set_head_dim(5);
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 2: compute.attention_finish.head_dim = 5: S has 36 "
       "elements, not whole rows of head_dim + 2 = 7"},
      {"backward with one input",
       [](v1::WorkerProgram& p) {
         p.mutable_plan()
             ->mutable_steps(2)
             ->mutable_compute()
             ->mutable_attention_backward()
             ->set_target(v1::AttentionBackwardAttrs::TARGET_DQ);
       },
       absl::StatusCode::kInvalidArgument,
       "plan.steps id 2: OP_COMPUTE (attention_backward) needs 6 inputs and 1 "
       "output, has 1 and 1"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::WorkerProgram proto = AttentionJob().ProgramFor(0);
    bad.corrupt(proto);
    auto program = ParseProgram(proto);
    ASSERT_FALSE(program.ok());
    EXPECT_EQ(program.status().code(), bad.code) << program.status();
    EXPECT_NE(program.status().message().find(bad.message_part),
              std::string::npos)
        << program.status();
  }
  // Integers: attention is not defined.
  auto integer = ParseProgram(AttentionJob(DType::kInt32).ProgramFor(0));
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument)
      << integer.status();
  EXPECT_NE(integer.status().message().find(
                "plan.steps id 0: compute.attention_block on int32 (output "
                "buffer 3) is not defined; allowed dtypes: float16"),
            std::string::npos)
      << integer.status();
  v1::WorkerProgram proto = AttentionJob(DType::kInt32).ProgramFor(0);
  v1::Step keep = proto.plan().steps(2);  // the finish alone
  keep.clear_deps();
  proto.mutable_plan()->clear_steps();
  *proto.mutable_plan()->add_steps() = keep;
  integer = ParseProgram(proto);
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument)
      << integer.status();
  EXPECT_NE(integer.status().message().find(
                "compute.attention_finish on int32 (output buffer 4) is not "
                "defined; allowed dtypes: float16"),
            std::string::npos)
      << integer.status();
}

TEST(DescribeRelayStepTest, NamesTheSliceOrTheOperandsAndTheChain) {
  StepDesc step;
  step.id = 5;
  step.tensor = 2;
  step.slice = {{0, 4}, {8, 16}};
  step.chain = {1, 3, 6};
  EXPECT_EQ(DescribeRelayStep(step),
            "step 5 (tensor 2 slice [0:4,8:16] chain 1->3->6)");
  EXPECT_EQ(DescribeRelayStep(step, "GPU"),
            "step 5 (tensor 2 slice [0:4,8:16] chain 1->3->6, GPU)");
  step.operand_form = true;
  step.tensor = -1;
  step.chain = {1, 3};
  OperandDesc in, out;
  in.buffer = 7;
  in.box = {{2, 6}};
  out.buffer = 9;
  out.box = {{0, 2}, {0, 2}};
  step.inputs = {in};
  step.outputs = {out};
  EXPECT_EQ(DescribeRelayStep(step, "GPU"),
            "step 5 (OP_SEND_RECV buffer 7 [2:6] -> buffer 9 [0:2,0:2] "
            "chain 1->3, GPU)");
}

}  // namespace
}  // namespace meshcast::worker
