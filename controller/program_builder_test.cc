#include "controller/program_builder.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/kinds/reshard/reshard_lowering.h"
#include "planner/strategy.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// 2 hosts x 2 devices; a 4x4 int32 tensor moves from mesh [0,1] (S0R: rows
// split) to mesh [2,3] (RS0: columns split).
ReshardPlan HandMadePlan() {
  ReshardProblem problem;
  problem.tensor.shape = {4, 4};
  problem.tensor.dtype = DType::kInt32;
  problem.src_mesh.shape = {1, 2};
  problem.src_mesh.devices = {0, 1};
  problem.src_spec = *ShardingSpec::Parse("S1R");
  problem.dst_mesh.shape = {1, 2};
  problem.dst_mesh.devices = {2, 3};
  problem.dst_spec = *ShardingSpec::Parse("RS1");
  ReshardPlan plan;
  plan.strategy = "hand";
  plan.problems = {problem};
  // Device 0 holds rows 0..2, device 1 rows 2..4. Device 2 needs columns
  // 0..2, device 3 columns 2..4.
  plan.transfers.push_back({0, {{0, 2}, {0, 2}}, 0, {2}, 16, 0, {}});  // 0 -> 2
  plan.transfers.push_back({0, {{0, 2}, {2, 4}}, 0, {3}, 16, 0, {}});  // 0 -> 3
  plan.transfers.push_back({0, {{2, 4}, {0, 2}}, 1, {2}, 16, 0, {}});  // 1 -> 2
  // A relay chain 1 -> 3 -> 2 of a slice 2 already has, to exercise groups
  // of three, and a dependency.
  plan.transfers.push_back({0, {{2, 4}, {2, 4}}, 1, {3, 2}, 16, 1, {2}});
  // Same chain as transfer 0: must share its group.
  plan.transfers.push_back({0, {{0, 1}, {0, 1}}, 0, {2}, 4, 1, {0}});
  return plan;
}

std::vector<WorkerSlot> TwoWorkers() {
  // Deliberately listed in reverse host order.
  return {{"beta", 1, {2, 3}}, {"alpha", 0, {0, 1}}};
}

// The reshard kind's lowering (planner/kinds/reshard/reshard_lowering.h) is
// what the controller projects for reshard jobs; these pin down the plans
// the projection tests below start from.
TEST(ReshardLoweringTest, BuffersFollowTheLayouts) {
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(HandMadePlan());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy(), "hand");
  ASSERT_EQ(plan->tensors_size(), 1);
  EXPECT_THAT(plan->tensors(0).shape(), ElementsAre(4, 4));
  EXPECT_EQ(plan->tensors(0).dtype(), v1::DTYPE_INT32);
  ASSERT_EQ(plan->buffers_size(), 4);
  for (int i = 0; i < plan->buffers_size(); ++i) {
    EXPECT_EQ(plan->buffers(i).id(), i);
  }
  // Sources: rows split over devices 0 and 1.
  EXPECT_EQ(plan->buffers(0).role(), v1::Buffer::ROLE_SOURCE);
  EXPECT_EQ(plan->buffers(0).device(), 0);
  EXPECT_EQ(plan->buffers(0).box(0).begin(), 0);
  EXPECT_EQ(plan->buffers(0).box(0).end(), 2);
  EXPECT_EQ(plan->buffers(0).box(1).end(), 4);
  EXPECT_EQ(plan->buffers(1).device(), 1);
  EXPECT_EQ(plan->buffers(1).box(0).begin(), 2);
  // Destinations: columns split over devices 2 and 3.
  EXPECT_EQ(plan->buffers(2).role(), v1::Buffer::ROLE_DESTINATION);
  EXPECT_EQ(plan->buffers(2).device(), 2);
  EXPECT_EQ(plan->buffers(2).box(1).end(), 2);
  EXPECT_EQ(plan->buffers(3).device(), 3);
  EXPECT_EQ(plan->buffers(3).box(1).begin(), 2);
  EXPECT_EQ(DestinationElements(*plan), 16);
}

TEST(ReshardLoweringTest, StepsAndGroups) {
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(HandMadePlan());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps_size(), 5);
  // Distinct chains: [0,2], [0,3], [1,2], [1,3,2].
  ASSERT_EQ(plan->groups_size(), 4);
  EXPECT_THAT(plan->groups(3).devices(), ElementsAre(1, 3, 2));
  EXPECT_EQ(plan->steps(0).group(), plan->steps(4).group());
  EXPECT_NE(plan->steps(0).group(), plan->steps(1).group());
  EXPECT_EQ(plan->steps(0).op(), v1::Step::OP_SEND_RECV);
  EXPECT_EQ(plan->steps(3).op(), v1::Step::OP_BROADCAST);
  EXPECT_THAT(plan->steps(3).deps(), ElementsAre(2));
  EXPECT_EQ(plan->steps(3).stage(), 1);
  EXPECT_EQ(plan->steps(3).bytes(), 16);
  EXPECT_EQ(plan->steps(3).slice(1).begin(), 2);
  for (int i = 0; i < plan->steps_size(); ++i) {
    EXPECT_EQ(plan->steps(i).id(), i);
  }
}

TEST(ReshardLoweringTest, RejectsForwardDependency) {
  ReshardPlan bad = HandMadePlan();
  bad.transfers[0].deps = {3};
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(bad);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("transfer 0 depends on 3"));
}

TEST(ProjectPlanTest, RanksFollowHostOrder) {
  v1::Plan plan = *LowerReshardPlan(HandMadePlan());
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000007", TwoWorkers());
  ASSERT_TRUE(programs.ok()) << programs.status();
  ASSERT_EQ(programs->size(), 2u);
  const v1::WorkerProgram& alpha = (*programs)[0];
  const v1::WorkerProgram& beta = (*programs)[1];
  EXPECT_EQ(alpha.worker(), "alpha");
  EXPECT_EQ(alpha.rank(), 0);
  EXPECT_EQ(beta.worker(), "beta");
  EXPECT_EQ(beta.rank(), 1);
  for (const v1::WorkerProgram& p : *programs) {
    EXPECT_EQ(p.job_id(), "job-000007");
    EXPECT_EQ(p.world_size(), 2);
    EXPECT_THAT(p.rank_workers(), ElementsAre("alpha", "beta"));
    EXPECT_EQ(p.device_rank().size(), 4u);
    EXPECT_EQ(p.device_rank().at(0), 0);
    EXPECT_EQ(p.device_rank().at(1), 0);
    EXPECT_EQ(p.device_rank().at(2), 1);
    EXPECT_EQ(p.device_rank().at(3), 1);
    EXPECT_EQ(p.plan().tensors_size(), 1);
  }
  EXPECT_THAT(alpha.local_devices(), ElementsAre(0, 1));
  EXPECT_THAT(beta.local_devices(), ElementsAre(2, 3));
}

TEST(ProjectPlanTest, EachProgramHoldsItsBuffersStepsAndGroups) {
  v1::Plan plan = *LowerReshardPlan(HandMadePlan());
  // A third worker whose devices the plan never touches gets no program.
  std::vector<WorkerSlot> slots = TwoWorkers();
  slots.push_back({"idle", 2, {4, 5}});
  std::vector<v1::WorkerProgram> programs =
      *ProjectPlan(plan, "job-000001", slots);
  ASSERT_EQ(programs.size(), 2u);
  std::set<int> all_steps;
  for (const v1::WorkerProgram& p : programs) {
    const std::set<int> local(p.local_devices().begin(),
                              p.local_devices().end());
    for (const v1::Buffer& b : p.plan().buffers()) {
      EXPECT_TRUE(local.count(b.device())) << p.worker() << " " << b.device();
    }
    std::set<int> groups;
    for (const v1::CommGroup& g : p.plan().groups()) groups.insert(g.id());
    for (const v1::Step& s : p.plan().steps()) {
      all_steps.insert(s.id());
      EXPECT_TRUE(groups.count(s.group())) << "step " << s.id();
    }
    // Groups are only those the kept steps use.
    for (const v1::CommGroup& g : p.plan().groups()) {
      bool used = false;
      for (const v1::Step& s : p.plan().steps()) used |= s.group() == g.id();
      EXPECT_TRUE(used) << "group " << g.id();
    }
  }
  EXPECT_EQ(programs[0].plan().buffers_size(), 2);  // two sources
  EXPECT_EQ(programs[1].plan().buffers_size(), 2);  // two destinations
  // Every step touches both hosts here, so both programs have all steps.
  EXPECT_EQ(programs[0].plan().steps_size(), 5);
  EXPECT_EQ(programs[1].plan().steps_size(), 5);
  EXPECT_EQ(all_steps.size(), 5u);
  // Global ids and deps survive the projection.
  EXPECT_THAT(programs[1].plan().steps(3).deps(), ElementsAre(2));
}

TEST(ProjectPlanTest, StepsOnOtherWorkersAreLeftOut) {
  // Intra-host transfer on host 0 only: host 1's worker must not see it.
  ReshardPlan plan = HandMadePlan();
  plan.transfers.push_back({0, {{0, 1}, {0, 1}}, 0, {1}, 4, 0, {}});
  v1::Plan proto = *LowerReshardPlan(plan);
  std::vector<v1::WorkerProgram> programs =
      *ProjectPlan(proto, "job-000001", TwoWorkers());
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(programs[0].plan().steps_size(), 6);
  EXPECT_EQ(programs[1].plan().steps_size(), 5);
  for (const v1::Step& s : programs[1].plan().steps()) EXPECT_NE(s.id(), 5);
}

TEST(ProjectPlanTest, DeviceWithoutWorkerIsAnError) {
  v1::Plan plan = *LowerReshardPlan(HandMadePlan());
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000001", {{"alpha", 0, {0, 1}}});
  ASSERT_FALSE(programs.ok());
  EXPECT_THAT(programs.status().message(), HasSubstr("has no worker"));
}

TEST(ProjectPlanTest, DeviceOwnedTwiceIsAnError) {
  v1::Plan plan = *LowerReshardPlan(HandMadePlan());
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000001", {{"a", 0, {0, 1}}, {"b", 1, {1, 2, 3}}});
  EXPECT_FALSE(programs.ok());
}

// A broadcast counts once per receiver, a send/recv and a local copy once;
// the plain sum of step bytes would be 100 + 10 + 1 = 111.
TEST(DeliveredBytesTest, BroadcastCountsEveryReceiver) {
  v1::Plan plan;
  auto add_group = [&](int id, std::vector<int> devices) {
    v1::CommGroup* group = plan.add_groups();
    group->set_id(id);
    for (int d : devices) group->add_devices(d);
  };
  add_group(0, {0, 2, 4, 6});
  add_group(1, {1, 3});
  add_group(2, {5});
  auto add_step = [&](int group, v1::Step::Op op, int64_t bytes) {
    v1::Step* step = plan.add_steps();
    step->set_id(plan.steps_size() - 1);
    step->set_group(group);
    step->set_op(op);
    step->set_bytes(bytes);
  };
  add_step(0, v1::Step::OP_BROADCAST, 100);
  add_step(1, v1::Step::OP_SEND_RECV, 10);
  add_step(2, v1::Step::OP_LOCAL_COPY, 1);
  EXPECT_EQ(DeliveredBytes(plan), 3 * 100 + 10 + 1);
  EXPECT_EQ(DeliveredBytes(v1::Plan()), 0);
}

// Collectives count what arrives at their ranks (program_builder.h); a
// compute step delivers nothing.
TEST(DeliveredBytesTest, EveryOpCountsWhatArrives) {
  v1::Plan plan;
  v1::TensorSpec* tensor = plan.add_tensors();
  tensor->add_shape(10);
  tensor->set_dtype(v1::DTYPE_FLOAT32);
  v1::CommGroup* four = plan.add_groups();
  four->set_id(0);
  for (int d : {0, 1, 2, 3}) four->add_devices(d);
  v1::CommGroup* two = plan.add_groups();
  two->set_id(1);
  for (int d : {0, 1}) two->add_devices(d);
  v1::Buffer* in = plan.add_buffers();  // the all-to-all's rank-0 input
  in->set_id(0);
  in->set_tensor(0);
  auto add_step = [&](int group, v1::Step::Op op, int64_t bytes) {
    v1::Step* step = plan.add_steps();
    step->set_id(plan.steps_size() - 1);
    step->set_group(group);
    step->set_op(op);
    step->set_bytes(bytes);
    return step;
  };
  const auto only = [&](v1::Step::Op op, int group, int64_t bytes) {
    plan.clear_steps();
    return add_step(group, op, bytes);
  };
  only(v1::Step::OP_ALL_GATHER, 0, 100);
  EXPECT_EQ(DeliveredBytes(plan), 3 * 100);
  only(v1::Step::OP_REDUCE_SCATTER, 0, 100);
  EXPECT_EQ(DeliveredBytes(plan), 3 * 100);
  only(v1::Step::OP_ALL_REDUCE, 0, 100);
  EXPECT_EQ(DeliveredBytes(plan), 2 * 3 * 100);
  // Counts [[1, 2], [3, 4]] float32: 2 + 3 elements leave their rank.
  v1::Step* a2a = only(v1::Step::OP_ALL_TO_ALL, 1, 40);
  for (int64_t c : {1, 2, 3, 4}) a2a->add_counts(c);
  a2a->add_inputs()->set_buffer(0);
  EXPECT_EQ(DeliveredBytes(plan), (2 + 3) * 4);
  // Without counts: (n - 1) / n of the bytes.
  only(v1::Step::OP_ALL_TO_ALL, 0, 100);
  EXPECT_EQ(DeliveredBytes(plan), 75);
  v1::Step* gemm = only(v1::Step::OP_COMPUTE, 0, 0);
  gemm->set_flops(1e9);
  EXPECT_EQ(DeliveredBytes(plan), 0);
  // A collective over one rank moves nothing.
  v1::CommGroup* one = plan.add_groups();
  one->set_id(2);
  one->add_devices(5);
  only(v1::Step::OP_ALL_REDUCE, 2, 100);
  EXPECT_EQ(DeliveredBytes(plan), 0);
}

// A DAG of every kind of step over three workers (two devices each):
//   GEMM on device 0 (A0 x B0 -> IN0) and on device 2 (A2 x B2 -> IN2);
//   reduce-scatter over [0, 2]: IN0, IN2 -> OUT0, OUT2;
//   send/recv [2, 4] of OUT's chunk on device 2 into X4 (a move);
//   send/recv [1, 3] of tensor T from S1 into D3 (a move);
//   local copy on device 5: Y5 -> Z5.
class DagPlan {
 public:
  enum Tensor { kA, kB, kIn, kOut, kT };

  DagPlan() {
    for (int t = 0; t < 5; ++t) {
      v1::TensorSpec* tensor = plan_.add_tensors();
      tensor->add_shape(t == kIn ? 2 : 4);
      tensor->add_shape(4);
      tensor->set_dtype(v1::DTYPE_FLOAT32);
      plan_.add_tensor_inits()->set_kind(t == kA || t == kB
                                             ? v1::Initializer::KIND_RANDOM
                                             : v1::Initializer::KIND_ZEROS);
    }
    a0_ = Buffer(kA, 0, v1::Buffer::ROLE_SOURCE);
    b0_ = Buffer(kB, 0, v1::Buffer::ROLE_SOURCE);
    in0_ = Buffer(kIn, 0, v1::Buffer::ROLE_SCRATCH);
    a2_ = Buffer(kA, 2, v1::Buffer::ROLE_SOURCE);
    b2_ = Buffer(kB, 2, v1::Buffer::ROLE_SOURCE);
    in2_ = Buffer(kIn, 2, v1::Buffer::ROLE_SCRATCH);
    out0_ = Buffer(kOut, 0, v1::Buffer::ROLE_DESTINATION);
    out2_ = Buffer(kOut, 2, v1::Buffer::ROLE_DESTINATION);
    x4_ = Buffer(kOut, 4, v1::Buffer::ROLE_DESTINATION);
    s1_ = Buffer(kT, 1, v1::Buffer::ROLE_SOURCE);
    d3_ = Buffer(kT, 3, v1::Buffer::ROLE_DESTINATION);
    y5_ = Buffer(kT, 5, v1::Buffer::ROLE_SOURCE);
    z5_ = Buffer(kT, 5, v1::Buffer::ROLE_DESTINATION);
    rs_group_ = Group({0, 2});
    move_group_ = Group({2, 4});
    other_group_ = Group({1, 3});
    gemm0_ = Compute(0, {a0_, b0_}, in0_);
    gemm2_ = Compute(2, {a2_, b2_}, in2_);
    v1::Step* rs = Step(v1::Step::OP_REDUCE_SCATTER, rs_group_);
    rs->add_inputs()->set_buffer(in0_);
    rs->add_inputs()->set_buffer(in2_);
    rs->add_outputs()->set_buffer(out0_);
    rs->add_outputs()->set_buffer(out2_);
    rs->add_deps(gemm0_);
    rs->add_deps(gemm2_);
    rs_ = rs->id();
    v1::Step* move = Step(v1::Step::OP_SEND_RECV, move_group_);
    move->set_tensor(kOut);
    move->add_deps(rs_);
    move_ = move->id();
    other_ = Step(v1::Step::OP_SEND_RECV, other_group_)->id();
    v1::Step* copy = Step(v1::Step::OP_LOCAL_COPY, /*group=*/0);
    copy->add_inputs()->set_buffer(y5_);
    copy->add_outputs()->set_buffer(z5_);
    copy_ = copy->id();
  }

  const v1::Plan& plan() const { return plan_; }
  static std::vector<WorkerSlot> Workers() {
    return {{"w0", 0, {0, 1}}, {"w1", 1, {2, 3}}, {"w2", 2, {4, 5}}};
  }

  int a0_, b0_, in0_, a2_, b2_, in2_, out0_, out2_, x4_, s1_, d3_, y5_, z5_;
  int rs_group_, move_group_, other_group_;
  int gemm0_, gemm2_, rs_, move_, other_, copy_;

 private:
  int Buffer(int tensor, int device, v1::Buffer::Role role) {
    v1::Buffer* buffer = plan_.add_buffers();
    buffer->set_id(plan_.buffers_size() - 1);
    buffer->set_tensor(tensor);
    buffer->set_device(device);
    for (int extent : {tensor == kIn ? 1 : 2, 4}) {
      v1::Interval* interval = buffer->add_box();
      interval->set_begin(0);
      interval->set_end(extent);
    }
    buffer->set_role(role);
    return buffer->id();
  }
  int Group(std::vector<int> devices) {
    v1::CommGroup* group = plan_.add_groups();
    group->set_id(plan_.groups_size() - 1);
    for (int d : devices) group->add_devices(d);
    return group->id();
  }
  v1::Step* Step(v1::Step::Op op, int group) {
    v1::Step* step = plan_.add_steps();
    step->set_id(plan_.steps_size() - 1);
    step->set_op(op);
    step->set_group(group);
    step->set_bytes(64);
    return step;
  }
  int Compute(int device, std::vector<int> inputs, int output) {
    // group 0 is the reduce-scatter's; a compute step must ignore it.
    v1::Step* step = Step(v1::Step::OP_COMPUTE, /*group=*/0);
    step->set_bytes(0);
    step->set_device(device);
    for (int b : inputs) step->add_inputs()->set_buffer(b);
    step->add_outputs()->set_buffer(output);
    v1::GemmAttrs* gemm = step->mutable_compute()->mutable_gemm();
    gemm->set_m(2);
    gemm->set_n(4);
    gemm->set_k(4);
    return step->id();
  }

  v1::Plan plan_;
};

std::vector<int> StepIds(const v1::WorkerProgram& program) {
  std::vector<int> ids;
  for (const v1::Step& s : program.plan().steps()) ids.push_back(s.id());
  return ids;
}
std::vector<int> BufferIds(const v1::WorkerProgram& program) {
  std::vector<int> ids;
  for (const v1::Buffer& b : program.plan().buffers()) ids.push_back(b.id());
  return ids;
}
std::vector<int> GroupIds(const v1::WorkerProgram& program) {
  std::vector<int> ids;
  for (const v1::CommGroup& g : program.plan().groups()) ids.push_back(g.id());
  return ids;
}

TEST(ProjectPlanTest, AnyOpGoesToTheWorkersOfItsDevicesPlusTheReference) {
  const DagPlan dag;
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(dag.plan(), "job-000003", DagPlan::Workers());
  ASSERT_TRUE(programs.ok()) << programs.status();
  ASSERT_EQ(programs->size(), 3u);
  const v1::WorkerProgram& w0 = (*programs)[0];
  const v1::WorkerProgram& w1 = (*programs)[1];
  const v1::WorkerProgram& w2 = (*programs)[2];
  EXPECT_THAT(w0.local_devices(), ElementsAre(0, 1));
  EXPECT_THAT(w1.local_devices(), ElementsAre(2, 3));
  EXPECT_THAT(w2.local_devices(), ElementsAre(4, 5));
  // Value-defining steps (both GEMMs, the reduce-scatter) are everywhere;
  // a move only where its group is; the local copy only on device 5's
  // worker, found through its operands.
  EXPECT_THAT(StepIds(w0),
              ElementsAre(dag.gemm0_, dag.gemm2_, dag.rs_, dag.other_));
  EXPECT_THAT(StepIds(w1), ElementsAre(dag.gemm0_, dag.gemm2_, dag.rs_,
                                       dag.move_, dag.other_));
  EXPECT_THAT(StepIds(w2), ElementsAre(dag.gemm0_, dag.gemm2_, dag.rs_,
                                       dag.move_, dag.copy_));
  // Buffers: its own, plus every operand of a value-defining step.
  const std::vector<int> reference = {dag.a0_, dag.b0_,  dag.in0_,  dag.a2_,
                                      dag.b2_, dag.in2_, dag.out0_, dag.out2_};
  EXPECT_THAT(BufferIds(w0),
              ElementsAre(dag.a0_, dag.b0_, dag.in0_, dag.a2_, dag.b2_,
                          dag.in2_, dag.out0_, dag.out2_, dag.s1_));
  EXPECT_THAT(BufferIds(w1),
              ElementsAre(dag.a0_, dag.b0_, dag.in0_, dag.a2_, dag.b2_,
                          dag.in2_, dag.out0_, dag.out2_, dag.d3_));
  EXPECT_THAT(BufferIds(w2), ElementsAre(dag.a0_, dag.b0_, dag.in0_, dag.a2_,
                                         dag.b2_, dag.in2_, dag.out0_,
                                         dag.out2_, dag.x4_, dag.y5_, dag.z5_));
  for (const v1::WorkerProgram& p : *programs) {
    for (int id : reference) {
      EXPECT_THAT(BufferIds(p), ::testing::Contains(id)) << p.worker();
    }
  }
  // Groups of the kept collective steps only (compute and local copy use
  // none, although their `group` field reads 0).
  EXPECT_THAT(GroupIds(w0), ElementsAre(dag.rs_group_, dag.other_group_));
  EXPECT_THAT(GroupIds(w1),
              ElementsAre(dag.rs_group_, dag.move_group_, dag.other_group_));
  EXPECT_THAT(GroupIds(w2), ElementsAre(dag.rs_group_, dag.move_group_));
  // Tensors and their initializers travel whole; deps keep global ids.
  for (const v1::WorkerProgram& p : *programs) {
    EXPECT_EQ(p.plan().tensors_size(), 5);
    ASSERT_EQ(p.plan().tensor_inits_size(), 5);
    EXPECT_EQ(p.plan().tensor_inits(0).kind(), v1::Initializer::KIND_RANDOM);
    EXPECT_EQ(p.world_size(), 3);
    EXPECT_EQ(p.device_rank().size(), 6u);
    EXPECT_EQ(p.device_rank().at(4), 2);
    EXPECT_THAT(p.plan().steps(2).deps(), ElementsAre(dag.gemm0_, dag.gemm2_));
  }
  // OUT0, OUT2, X4 (2x4 each), D3 and Z5 (2x4 each).
  EXPECT_EQ(DestinationElements(dag.plan()), 5 * 8);
}

TEST(ProjectPlanTest, AnOperandSendRecvJoinsTheReferenceClosure) {
  // OP_SEND_RECV without a slice, between two operands (plan.proto), copies
  // OUT2 on device 2 into X4 on device 4: it defines X4's values, so the
  // step and both buffers reach w0 too, which touches neither device. The
  // tensor-form move of the same group stays away from w0.
  const DagPlan dag;
  v1::Plan plan = dag.plan();
  v1::Step* copy = plan.add_steps();
  copy->set_id(plan.steps_size() - 1);
  copy->set_op(v1::Step::OP_SEND_RECV);
  copy->set_group(dag.move_group_);
  copy->add_inputs()->set_buffer(dag.out2_);
  copy->add_outputs()->set_buffer(dag.x4_);
  copy->add_deps(dag.rs_);
  EXPECT_TRUE(DefinesValues(*copy));
  EXPECT_FALSE(DefinesValues(plan.steps(dag.move_)));
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000004", DagPlan::Workers());
  ASSERT_TRUE(programs.ok()) << programs.status();
  for (const v1::WorkerProgram& p : *programs) {
    EXPECT_THAT(StepIds(p), ::testing::Contains(copy->id())) << p.worker();
    EXPECT_THAT(StepIds(p), ::testing::Contains(dag.gemm0_)) << p.worker();
    EXPECT_THAT(BufferIds(p), ::testing::Contains(dag.out2_)) << p.worker();
    EXPECT_THAT(BufferIds(p), ::testing::Contains(dag.x4_)) << p.worker();
    EXPECT_THAT(GroupIds(p), ::testing::Contains(dag.move_group_))
        << p.worker();
  }
  EXPECT_THAT(StepIds((*programs)[0]),
              ::testing::Not(::testing::Contains(dag.move_)));
}

TEST(ProjectPlanTest, AComputeDeviceOrOperandBringsItsWorkerIn) {
  DagPlan dag;
  v1::Plan plan = dag.plan();
  // A GEMM on device 6 (a fourth worker) reading A0 and writing a buffer on
  // device 6: that worker joins the job through the step's device.
  v1::Buffer* c6 = plan.add_buffers();
  c6->set_id(plan.buffers_size() - 1);
  c6->set_tensor(DagPlan::kIn);
  c6->set_device(6);
  c6->set_role(v1::Buffer::ROLE_SCRATCH);
  v1::Step* gemm = plan.add_steps();
  gemm->set_id(plan.steps_size() - 1);
  gemm->set_op(v1::Step::OP_COMPUTE);
  gemm->set_device(6);
  gemm->add_inputs()->set_buffer(dag.a0_);
  gemm->add_outputs()->set_buffer(c6->id());
  std::vector<WorkerSlot> slots = DagPlan::Workers();
  slots.push_back({"w3", 3, {6, 7}});
  std::vector<v1::WorkerProgram> programs =
      *ProjectPlan(plan, "job-000004", slots);
  ASSERT_EQ(programs.size(), 4u);
  EXPECT_EQ(programs[3].worker(), "w3");
  EXPECT_THAT(programs[3].local_devices(), ElementsAre(6));
  // The new GEMM is value-defining: every worker has it and its operands.
  for (const v1::WorkerProgram& p : programs) {
    EXPECT_THAT(StepIds(p), ::testing::Contains(gemm->id())) << p.worker();
    EXPECT_THAT(BufferIds(p), ::testing::Contains(c6->id())) << p.worker();
  }
  // Without w3 the device has no worker.
  absl::StatusOr<std::vector<v1::WorkerProgram>> missing =
      ProjectPlan(plan, "job-000004", DagPlan::Workers());
  EXPECT_TRUE(absl::IsFailedPrecondition(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("device 6 has no worker"));
}

TEST(ProjectPlanTest, MalformedStepsAreNamed) {
  DagPlan dag;
  v1::Plan plan = dag.plan();
  plan.mutable_steps(dag.rs_)->set_group(42);
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000005", DagPlan::Workers());
  EXPECT_TRUE(absl::IsInternal(programs.status()));
  EXPECT_THAT(programs.status().message(),
              HasSubstr("step 2 (OP_REDUCE_SCATTER) uses unknown group 42"));
  plan = dag.plan();
  plan.mutable_steps(dag.gemm0_)->mutable_inputs(1)->set_buffer(99);
  programs = ProjectPlan(plan, "job-000005", DagPlan::Workers());
  EXPECT_THAT(programs.status().message(),
              HasSubstr("step 0 (OP_COMPUTE) names unknown buffer 99"));
  plan = dag.plan();
  plan.mutable_steps(dag.copy_)->clear_inputs();
  plan.mutable_steps(dag.copy_)->clear_outputs();
  programs = ProjectPlan(plan, "job-000005", DagPlan::Workers());
  EXPECT_THAT(programs.status().message(),
              HasSubstr("(OP_LOCAL_COPY) touches no device"));
}

// With the real planner: every strategy's plan converts and projects, every
// step lands on the workers of its chain, and destination buffers cover the
// destination mesh.
TEST(ProgramBuilderWithPlannerTest, EveryStrategyProjects) {
  Topology topology;
  topology.num_hosts = 4;
  topology.devices_per_host = 2;
  ReshardProblem problem;
  problem.tensor.shape = {8, 6, 4};
  problem.tensor.dtype = DType::kFloat32;
  problem.src_mesh = {{2, 2}, {0, 1, 2, 3}};
  problem.src_spec = *ShardingSpec::Parse("RS0R");
  problem.dst_mesh = {{2, 2}, {4, 5, 6, 7}};
  problem.dst_spec = *ShardingSpec::Parse("S0RS1");
  std::vector<WorkerSlot> slots;
  for (int h = 0; h < 4; ++h) {
    slots.push_back({"w" + std::to_string(h), h, {2 * h, 2 * h + 1}});
  }
  for (Strategy strategy : ConcreteStrategies()) {
    SCOPED_TRACE(StrategyName(strategy));
    absl::StatusOr<ReshardPlan> plan =
        PlanReshard({problem}, topology, strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<v1::Plan> proto = LowerReshardPlan(*plan);
    ASSERT_TRUE(proto.ok()) << proto.status();
    EXPECT_EQ(proto->steps_size(), static_cast<int>(plan->transfers.size()));
    EXPECT_EQ(DestinationElements(*proto), 8 * 6 * 4);
    std::vector<v1::WorkerProgram> programs =
        *ProjectPlan(*proto, "job-000001", slots);
    EXPECT_EQ(programs.size(), 4u);
    for (const v1::Step& step : proto->steps()) {
      const v1::CommGroup& group = proto->groups(step.group());
      // Every worker on the chain has the step; no other worker has it.
      for (const v1::WorkerProgram& p : programs) {
        const bool on_chain = std::any_of(
            group.devices().begin(), group.devices().end(), [&](int d) {
              return std::find(p.local_devices().begin(),
                               p.local_devices().end(),
                               d) != p.local_devices().end();
            });
        const bool has =
            std::any_of(p.plan().steps().begin(), p.plan().steps().end(),
                        [&](const v1::Step& s) { return s.id() == step.id(); });
        EXPECT_EQ(on_chain, has) << p.worker() << " step " << step.id();
      }
    }
  }
}

}  // namespace
}  // namespace meshcast
