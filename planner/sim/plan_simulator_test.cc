#include "planner/sim/plan_simulator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/strategy.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// Hosts with one NIC of 1 GB/s, device ports of 100 GB/s, no latency,
// negligible pipeline fill and a device of 1 TFLOP/s and 100 GB/s memory, so
// that times are easy to write down.
Topology PlainTopology(int hosts, int devices_per_host) {
  Topology topology;
  topology.num_hosts = hosts;
  topology.devices_per_host = devices_per_host;
  topology.inter_host_bandwidth = 1e9;
  topology.intra_host_bandwidth = 100e9;
  topology.inter_host_latency = 0;
  topology.intra_host_latency = 0;
  topology.pipeline_chunk_bytes = 1;
  topology.device_flops = 1e12;
  topology.device_memory_bandwidth = 100e9;
  return topology;
}

// Builds a v1::Plan by hand; step ids start at 100 (not positions) so that
// the id -> position mapping is exercised.
class PlanBuilder {
 public:
  int Group(const std::vector<int>& devices) {
    v1::CommGroup* group = plan_.add_groups();
    group->set_id(10 + plan_.groups_size());
    for (int device : devices) group->add_devices(device);
    return group->id();
  }
  int Tensor(std::vector<int64_t> shape, v1::DType dtype) {
    v1::TensorSpec* tensor = plan_.add_tensors();
    for (int64_t extent : shape) tensor->add_shape(extent);
    tensor->set_dtype(dtype);
    return plan_.tensors_size() - 1;
  }
  // A 1-D buffer [0, elements) of `tensor` on `device`.
  int Buffer(int tensor, int device, int64_t elements) {
    v1::Buffer* buffer = plan_.add_buffers();
    buffer->set_id(1000 + plan_.buffers_size());
    buffer->set_tensor(tensor);
    buffer->set_device(device);
    v1::Interval* interval = buffer->add_box();
    interval->set_begin(0);
    interval->set_end(elements);
    return buffer->id();
  }
  v1::Step* Step(v1::Step::Op op, std::vector<int> deps = {}) {
    v1::Step* step = plan_.add_steps();
    step->set_id(100 + plan_.steps_size() - 1);
    step->set_op(op);
    for (int dep : deps) step->add_deps(dep);
    return step;
  }
  int Comm(v1::Step::Op op, const std::vector<int>& devices, int64_t bytes,
           std::vector<int> deps = {}) {
    v1::Step* step = Step(op, std::move(deps));
    step->set_group(Group(devices));
    step->set_bytes(bytes);
    return step->id();
  }
  int Compute(int device, double flops, std::vector<int> deps = {}) {
    v1::Step* step = Step(v1::Step::OP_COMPUTE, std::move(deps));
    step->set_device(device);
    step->set_flops(flops);
    return step->id();
  }
  v1::Plan& plan() { return plan_; }

 private:
  v1::Plan plan_;
};

PlanSimulation MustSimulate(const v1::Plan& plan, const Topology& topology) {
  absl::StatusOr<PlanSimulation> result = SimulatePlan(plan, topology);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : PlanSimulation{};
}

// ---------------------------------------------------------------------------
// Analytic cases.

TEST(SimulatePlanTest, EmptyPlanTakesNoTime) {
  const PlanSimulation result = MustSimulate(v1::Plan(), PlainTopology(1, 1));
  EXPECT_EQ(result.seconds, 0);
  EXPECT_TRUE(result.step_start.empty());
}

TEST(SimulatePlanTest, SingleSendIsSetupPlusBytesOverBandwidthPlusLatency) {
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 10e-6;
  topology.transfer_setup_seconds = 50e-6;
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_SEND_RECV, {0, 1}, 2'000'000'000);
  const PlanSimulation result = MustSimulate(builder.plan(), topology);
  EXPECT_NEAR(result.seconds, 50e-6 + 2.0 + 10e-6, 1e-12);
  ASSERT_EQ(result.step_start.size(), 1u);
  EXPECT_EQ(result.step_start[0], 0);
  EXPECT_NEAR(result.step_finish[0], result.seconds, 1e-15);
}

TEST(PredictPlanTest, WritesThePredictionIntoThePlan) {
  PlanBuilder builder;
  const int first = builder.Comm(v1::Step::OP_SEND_RECV, {0, 1}, 1'000'000);
  builder.Compute(1, 1e9, {first});
  // A stale prediction is replaced, not appended to.
  builder.plan().add_predicted_step_start(42);
  absl::StatusOr<PlanSimulation> result =
      PredictPlan(builder.plan(), PlainTopology(2, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::Plan& plan = builder.plan();
  EXPECT_DOUBLE_EQ(plan.predicted_seconds(), result->seconds);
  ASSERT_EQ(plan.predicted_step_start_size(), 2);
  ASSERT_EQ(plan.predicted_step_finish_size(), 2);
  EXPECT_DOUBLE_EQ(plan.predicted_step_start(1), result->step_start[1]);
  EXPECT_GE(plan.predicted_step_start(1), plan.predicted_step_finish(0));
}

TEST(SimulatePlanTest, RingAllReduceOnOneHostLoadsEachPortOnce) {
  // n = 4: every rank sends 2(n-1)/n x 4 GB = 6 GB to the next at 100 GB/s;
  // 2(n-1) = 6 rounds of 2 us latency.
  Topology topology = PlainTopology(1, 4);
  topology.intra_host_latency = 2e-6;
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, 4'000'000'000);
  EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds,
              6e9 / 100e9 + 6 * 2e-6, 1e-12);
}

TEST(SimulatePlanTest, AllReduceOnTwoHostsCombinesLocallyThenRingsTheHosts) {
  // 2 hosts x 2, as the engines run it: device 1 sends its 4 GB to device 0
  // and device 3 to device 2 (0.04 s at 100 GB/s, + 2 us); the leaders 0
  // and 2 ring 2(h-1)/h x 4 GB = 4 GB each way at 1 GB/s, 2(h-1) = 2 rounds
  // of 10 us; then each leader copies 4 GB back (0.04 s + 2 us). A flat
  // ring over the 4 devices would carry 6 GB per NIC.
  Topology topology = PlainTopology(2, 2);
  topology.intra_host_latency = 2e-6;
  topology.inter_host_latency = 10e-6;
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, 4'000'000'000);
  const double expected = 0.04 + 2e-6 + 4.0 + 2 * 10e-6 + 0.04 + 2e-6;
  EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds, expected, 1e-9);
  // Ranks alternating between hosts: the engines still group them by host
  // (leaders 0 and 2), so the time is the same.
  PlanBuilder interleaved;
  interleaved.Comm(v1::Step::OP_ALL_REDUCE, {0, 2, 1, 3}, 4'000'000'000);
  EXPECT_NEAR(MustSimulate(interleaved.plan(), topology).seconds, expected,
              1e-9);
}

TEST(SimulatePlanTest, AllGatherAndReduceScatterMoveHalfOfAllReduce) {
  Topology topology = PlainTopology(1, 4);
  topology.intra_host_latency = 2e-6;
  for (v1::Step::Op op :
       {v1::Step::OP_ALL_GATHER, v1::Step::OP_REDUCE_SCATTER}) {
    PlanBuilder builder;
    builder.Comm(op, {3, 2, 1, 0}, 4'000'000'000);
    // (n-1)/n x 4 GB = 3 GB at 100 GB/s, n-1 = 3 rounds.
    EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds,
                3e9 / 100e9 + 3 * 2e-6, 1e-12)
        << v1::Step::Op_Name(op);
  }
}

// ---------------------------------------------------------------------------
// Hierarchical collectives: several hosts, several devices on some
// (worker/engine/collectives.h, worker/cuda/device_collectives.h).

TEST(SimulatePlanTest, AllReduceThreeHostsByTwoIsLocalPhasesAndAHostRing) {
  // 3 hosts x 2, B = 3 GB. Local combine: 1 -> 0, 3 -> 2, 5 -> 4, B each
  // at 100 GB/s = 0.03 s + 2 us. Host ring 0 -> 2 -> 4 -> 0: each NIC
  // carries 2(h-1)/h x B = 4 GB at 1 GB/s = 4 s, 2(h-1) = 4 rounds of
  // 10 us. Distribution: B from each leader, 0.03 s + 2 us. Setup once.
  Topology topology = PlainTopology(3, 2);
  topology.intra_host_latency = 2e-6;
  topology.inter_host_latency = 10e-6;
  topology.transfer_setup_seconds = 1e-4;
  PlanBuilder builder;
  const int first =
      builder.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3, 4, 5}, 3'000'000'000);
  builder.Compute(5, 1e9, {first});  // 1 ms after the collective
  const double collective =
      1e-4 + (0.03 + 2e-6) + (4.0 + 4 * 10e-6) + (0.03 + 2e-6);
  const PlanSimulation result = MustSimulate(builder.plan(), topology);
  EXPECT_NEAR(result.seconds, collective + 1e-3, 1e-9);
  ASSERT_EQ(result.step_start.size(), 2u);
  EXPECT_EQ(result.step_start[0], 0);
  EXPECT_NEAR(result.step_finish[0], collective, 1e-9);
  EXPECT_NEAR(result.step_start[1], collective, 1e-9);
  // Listed the other way round (a dep on a later step), the same times.
  {
    PlanBuilder reversed;
    v1::Step* compute = reversed.Step(v1::Step::OP_COMPUTE, {101});
    compute->set_device(5);
    compute->set_flops(1e9);
    reversed.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3, 4, 5}, 3'000'000'000);
    const PlanSimulation later = MustSimulate(reversed.plan(), topology);
    ASSERT_EQ(later.step_start.size(), 2u);
    EXPECT_NEAR(later.step_start[0], collective, 1e-9);
    EXPECT_NEAR(later.step_finish[1], collective, 1e-9);
    EXPECT_NEAR(later.seconds, collective + 1e-3, 1e-9);
  }
  // The NIC term is the lower bound's: the simulation exceeds the bound by
  // the local phases and 3 more latencies.
  const double bound = CollectiveLowerBoundSeconds(
      v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3, 4, 5}, 3'000'000'000, topology);
  EXPECT_NEAR(bound, 1e-4 + 4.0 + 10e-6, 1e-12);

  // With a host copy of 10 GB/s (CPU hosts): each local phase is one B
  // through its host's copy (0.3 s); the ring packs and unpacks 4 GB on
  // every host's copy (0.8 s), under the NIC's 4 s.
  topology.host_copy_bandwidth = 10e9;
  PlanBuilder cpu;
  cpu.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3, 4, 5}, 3'000'000'000);
  EXPECT_NEAR(MustSimulate(cpu.plan(), topology).seconds,
              1e-4 + (0.3 + 2e-6) + (4.0 + 4 * 10e-6) + (0.3 + 2e-6), 1e-9);
}

TEST(SimulatePlanTest, OneDevicePerHostOrOneHostKeepsTheFlatRing) {
  // 3 hosts x 1: the ring of devices is the ring of hosts, 2(n-1)/n x B per
  // NIC, 2(n-1) rounds.
  Topology topology = PlainTopology(3, 1);
  topology.inter_host_latency = 10e-6;
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2}, 3'000'000'000);
  EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds, 4.0 + 4 * 10e-6,
              1e-9);
  // 3 hosts x 2, a group of one device per host: the same.
  PlanBuilder spread;
  spread.Comm(v1::Step::OP_ALL_REDUCE, {0, 2, 4}, 3'000'000'000);
  EXPECT_NEAR(MustSimulate(spread.plan(), PlainTopology(3, 2)).seconds, 4.0,
              1e-9);
}

TEST(SimulatePlanTest, ReduceScatterAndAllGatherTwoHostsByFour) {
  // 2 hosts x 4, n = 8, B = 8 GB (one chunk B/n = 1 GB); leaders 0 and 4.
  Topology topology = PlainTopology(2, 4);
  topology.intra_host_latency = 2e-6;
  topology.inter_host_latency = 10e-6;
  const std::vector<int> group = {0, 1, 2, 3, 4, 5, 6, 7};
  const int64_t b = 8'000'000'000;
  // Reduce-scatter: 3 inputs of 8 GB into each leader (24 GB on its port,
  // 0.24 s); each host sends the other's 4 chunks, (n-k)/n B = 4 GB, at
  // 1 GB/s, h-1 = 1 round; each leader sends a 1 GB chunk to each of its 3
  // other ranks (3 GB out of its port, 0.03 s).
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_REDUCE_SCATTER, group, b);
    EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds,
                (0.24 + 2e-6) + (4.0 + 10e-6) + (0.03 + 2e-6), 1e-9);
  }
  // All-gather: every local input (1 GB) to the 3 other local ranks (3 GB
  // in and out of every port, 0.03 s); each host forwards its 4 GB bundle;
  // each leader copies the other host's 4 GB to its 3 other ranks (12 GB
  // out of its port, 0.12 s).
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_ALL_GATHER, group, b);
    EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds,
                (0.03 + 2e-6) + (4.0 + 10e-6) + (0.12 + 2e-6), 1e-9);
  }
  // Uneven hosts, 3 ranks on host 0 and 1 on host 1 (n = 4, B/n = 2 GB):
  // reduce-scatter host 0 sends host 1's chunk (2 GB), host 1 sends host
  // 0's three (6 GB): 6 s on host 1's NIC; the local phases (16 GB into
  // device 0, 0.16 s; 2 GB chunks to devices 1 and 2, 0.04 s) only on
  // host 0.
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_REDUCE_SCATTER, {0, 4, 1, 2}, b);
    EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds,
                (0.16 + 2e-6) + (6.0 + 10e-6) + (0.04 + 2e-6), 1e-9);
  }
}

TEST(SimulatePlanTest, NetclusterAllReduceThreeByTwoRegression) {
  // The emulated cluster of tests/netcluster (3 hosts x 2 CPU devices,
  // 300 Mbit/s links: TCP goodput 0.3 x 1448/1514 Gbit/s; transfer setup
  // 300 us; default latencies) with, as assumptions for this machine,
  // memcpy-speed ports (88 Gbit/s) and a host copy of 10 Gbit/s. A 4 MiB
  // float32 all_reduce on the 3x2 mesh measured busbw 0.331 Gbps
  // (docs/benchmarks.md) where the flat ring over 6 devices predicted 0.286
  // (2(n-1)/n x B per NIC, n = 6); the hierarchical model moves
  // 2(h-1)/h x B per NIC (h = 3), so it predicts between the measurement
  // and the link bound (0.358 Gbps).
  Topology topology = Topology::FromGbps(3, 2, 0.3 * 1448 / 1514, 88);
  topology.host_copy_bandwidth = 10e9 / 8;
  topology.transfer_setup_seconds = 300e-6;
  const int64_t b = 4 << 20;
  const std::vector<int> group = {0, 1, 2, 3, 4, 5};
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, group, b);
  const double seconds = MustSimulate(builder.plan(), topology).seconds;
  auto busbw_gbps = [&](double s) { return b * 8 / s * (2.0 * 5 / 6) / 1e9; };
  const double predicted = busbw_gbps(seconds);
  const double bound = busbw_gbps(
      CollectiveLowerBoundSeconds(v1::Step::OP_ALL_REDUCE, group, b, topology));
  EXPECT_GT(predicted, 0.331);
  EXPECT_LT(predicted, bound);
  EXPECT_NEAR(bound, 0.358, 0.002);
  EXPECT_NEAR(predicted, 0.343, 0.001);  // the flat ring: 0.286
  // Analytic: 300 us + two local phases of 4 MiB at 1.25 GB/s + the ring,
  // 2(h-1)/h x 4 MiB at the NIC rate, 4 rounds of 10 us (+ 2 x 2 us).
  const double nic = 0.3e9 * 1448 / 1514 / 8;
  EXPECT_NEAR(seconds,
              300e-6 + 2 * (b / 1.25e9 + 2e-6) + 4.0 / 3 * b / nic + 40e-6,
              1e-9);
}

TEST(SimulatePlanTest, OneRankCollectiveMovesNothing) {
  Topology topology = PlainTopology(1, 2);
  topology.transfer_setup_seconds = 1e-3;
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, {1}, 1'000'000);
  EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds, 1e-3, 1e-15);
}

TEST(SimulatePlanTest, AllToAllSendsEveryPairAtOnce) {
  // 2 hosts x 1 device, float32: rank 0 sends 2e8 elements (0.8 GB) to
  // rank 1 and rank 1 sends 1e8 (0.4 GB) back; each direction has its own
  // NIC. The diagonal (1e9 elements, 4 GB, on device 0) is a local copy on
  // device 0's memory: 8 GB of traffic at 100 GB/s = 0.08 s.
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 10e-6;
  PlanBuilder builder;
  const int out = builder.Tensor({1'300'000'000}, v1::DTYPE_FLOAT32);
  const int buffer = builder.Buffer(out, 1, 1);
  v1::Step* step = builder.Step(v1::Step::OP_ALL_TO_ALL);
  step->set_group(builder.Group({0, 1}));
  step->add_outputs()->set_buffer(buffer);
  for (int64_t count : {1'000'000'000, 200'000'000, 100'000'000, 0}) {
    step->add_counts(count);
  }
  const PlanSimulation result = MustSimulate(builder.plan(), topology);
  EXPECT_NEAR(result.seconds, 0.8 + 10e-6, 1e-9);
}

TEST(SimulatePlanTest, LocalCopyBetweenDevicesUsesThePortsOnOneDeviceMemory) {
  Topology topology = PlainTopology(1, 2);
  topology.intra_host_latency = 2e-6;
  topology.transfer_setup_seconds = 1e-3;  // local copies pay none
  PlanBuilder builder;
  const int tensor = builder.Tensor({1 << 30}, v1::DTYPE_INT8);
  const int on0 = builder.Buffer(tensor, 0, 1 << 30);
  const int on1 = builder.Buffer(tensor, 1, 1 << 30);
  const int on0_too = builder.Buffer(tensor, 0, 1 << 30);
  v1::Step* across = builder.Step(v1::Step::OP_LOCAL_COPY);
  across->add_inputs()->set_buffer(on0);
  across->add_outputs()->set_buffer(on1);
  across->set_bytes(1'000'000'000);
  v1::Step* back = builder.Step(v1::Step::OP_LOCAL_COPY, {across->id()});
  back->add_inputs()->set_buffer(on1);
  back->add_outputs()->set_buffer(on0_too);
  back->set_bytes(1'000'000'000);
  v1::Step* same = builder.Step(v1::Step::OP_LOCAL_COPY, {back->id()});
  same->add_inputs()->set_buffer(on0);
  same->add_outputs()->set_buffer(on0_too);
  same->set_bytes(1'000'000'000);
  const PlanSimulation result = MustSimulate(builder.plan(), topology);
  // Two port hops of 10 ms + 2 us each, then 2 GB of memory traffic.
  EXPECT_NEAR(result.step_finish[0], 0.01 + 2e-6, 1e-12);
  EXPECT_NEAR(result.step_finish[1], 0.02 + 4e-6, 1e-12);
  EXPECT_NEAR(result.seconds, 0.02 + 4e-6 + 0.02, 1e-12);
}

TEST(SimulatePlanTest, ComputeOnlyDagFollowsItsDeps) {
  // 1 TFLOP/s devices: a (2 s) -> b (1 s) on device 0, c (1.5 s) on device
  // 1 in parallel.
  PlanBuilder builder;
  const int a = builder.Compute(0, 2e12);
  builder.Compute(0, 1e12, {a});
  builder.Compute(1, 1.5e12);
  const PlanSimulation result =
      MustSimulate(builder.plan(), PlainTopology(1, 2));
  EXPECT_NEAR(result.step_finish[0], 2.0, 1e-12);
  EXPECT_NEAR(result.step_start[1], 2.0, 1e-12);
  EXPECT_NEAR(result.step_finish[1], 3.0, 1e-12);
  EXPECT_NEAR(result.step_finish[2], 1.5, 1e-12);
  EXPECT_NEAR(result.seconds, 3.0, 1e-12);
}

TEST(SimulatePlanTest, ConcurrentComputeOnOneDeviceSharesIt) {
  PlanBuilder builder;
  builder.Compute(0, 1e12);
  builder.Compute(0, 3e12);
  const PlanSimulation result =
      MustSimulate(builder.plan(), PlainTopology(1, 1));
  // Half the device each until the first is done at 2 s; then the second
  // runs alone for its last 1 TFLOP.
  EXPECT_NEAR(result.step_finish[0], 2.0, 1e-12);
  EXPECT_NEAR(result.step_finish[1], 4.0, 1e-12);
}

TEST(SimulatePlanTest, ComputeIsBoundByFlopsOrMemoryWhicheverIsSlower) {
  // A float32 GEMM C[m x n] = A[m x k] B[k x n], m = n = k = 10000:
  // 2mnk = 2e12 FLOP (2 s at 1 TFLOP/s); it touches 3 x 4e8 bytes (12 ms at
  // 100 GB/s): compute bound.
  PlanBuilder builder;
  const int t = builder.Tensor({100'000'000}, v1::DTYPE_FLOAT32);
  const int a = builder.Buffer(t, 0, 100'000'000);
  const int b = builder.Buffer(t, 0, 100'000'000);
  const int c = builder.Buffer(t, 0, 100'000'000);
  const auto gemm = [&](double flops, bool accumulate) {
    v1::Step* step = builder.Step(v1::Step::OP_COMPUTE);
    step->set_device(0);
    step->set_flops(flops);
    step->add_inputs()->set_buffer(a);
    step->add_inputs()->set_buffer(b);
    step->add_outputs()->set_buffer(c);
    v1::GemmAttrs* attrs = step->mutable_compute()->mutable_gemm();
    attrs->set_m(10000);
    attrs->set_n(10000);
    attrs->set_k(10000);
    attrs->set_accumulate(accumulate);
  };
  gemm(2e12, false);
  EXPECT_NEAR(MustSimulate(builder.plan(), PlainTopology(1, 1)).seconds, 2.0,
              1e-12);
  // With 1 GFLOP the memory traffic dominates: 1.2 GB, and 1.6 GB when C is
  // read too (accumulate).
  builder.plan().clear_steps();
  gemm(1e9, false);
  EXPECT_NEAR(MustSimulate(builder.plan(), PlainTopology(1, 1)).seconds,
              1.2e9 / 100e9, 1e-12);
  builder.plan().clear_steps();
  gemm(1e9, true);
  EXPECT_NEAR(MustSimulate(builder.plan(), PlainTopology(1, 1)).seconds,
              1.6e9 / 100e9, 1e-12);
  // An operand slice narrows what is touched: half of A.
  builder.plan().clear_steps();
  gemm(1e9, false);
  v1::Interval* half =
      builder.plan().mutable_steps(0)->mutable_inputs(0)->add_slice();
  half->set_begin(0);
  half->set_end(50'000'000);
  EXPECT_NEAR(MustSimulate(builder.plan(), PlainTopology(1, 1)).seconds,
              1.0e9 / 100e9, 1e-12);
}

TEST(SimulatePlanTest, ComputeOverlapsAnIndependentTransfer) {
  // Compute on device 0 (2 s) and a send from device 0 to host 1 (1 s) have
  // no dependency: they use different resources and overlap.
  PlanBuilder builder;
  builder.Compute(0, 2e12);
  builder.Comm(v1::Step::OP_SEND_RECV, {0, 1}, 1'000'000'000);
  const PlanSimulation result =
      MustSimulate(builder.plan(), PlainTopology(2, 1));
  EXPECT_NEAR(result.step_finish[0], 2.0, 1e-12);
  EXPECT_NEAR(result.step_finish[1], 1.0, 1e-12);
  EXPECT_NEAR(result.seconds, 2.0, 1e-12);  // max, not the sum 3.0
}

TEST(SimulatePlanTest, DependentComputeAndCommunicationAddUp) {
  // compute (2 s) -> send (1 s + setup + latency) -> compute (0.5 s).
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 10e-6;
  topology.transfer_setup_seconds = 1e-4;
  PlanBuilder builder;
  const int produce = builder.Compute(0, 2e12);
  const int send =
      builder.Comm(v1::Step::OP_SEND_RECV, {0, 1}, 1'000'000'000, {produce});
  builder.Compute(1, 0.5e12, {send});
  const PlanSimulation result = MustSimulate(builder.plan(), topology);
  EXPECT_NEAR(result.step_start[1], 2.0, 1e-12);
  EXPECT_NEAR(result.step_finish[1], 2.0 + 1e-4 + 1.0 + 10e-6, 1e-12);
  EXPECT_NEAR(result.seconds, 2.0 + 1e-4 + 1.0 + 10e-6 + 0.5, 1e-12);
}

TEST(SimulatePlanTest, DepsMayNameLaterSteps) {
  // Steps need not be listed in dependency order.
  PlanBuilder builder;
  v1::Step* late = builder.Step(v1::Step::OP_COMPUTE, {101});
  late->set_device(0);
  late->set_flops(1e12);
  builder.Compute(0, 1e12);
  const PlanSimulation result =
      MustSimulate(builder.plan(), PlainTopology(1, 1));
  EXPECT_NEAR(result.step_start[0], 1.0, 1e-12);
  EXPECT_NEAR(result.seconds, 2.0, 1e-12);
}

// ---------------------------------------------------------------------------
// A ReshardPlan and its plan IR (one broadcast per transfer) simulate alike.

v1::Plan ToPlanIr(const ReshardPlan& reshard) {
  v1::Plan plan;
  const auto id_of = [](int t) { return 7 + 3 * t; };
  for (size_t t = 0; t < reshard.transfers.size(); ++t) {
    const Transfer& transfer = reshard.transfers[t];
    v1::CommGroup* group = plan.add_groups();
    group->set_id(id_of(static_cast<int>(t)));
    group->add_devices(transfer.src_device);
    for (int device : transfer.dst_devices) group->add_devices(device);
    v1::Step* step = plan.add_steps();
    step->set_id(id_of(static_cast<int>(t)));
    step->set_op(v1::Step::OP_BROADCAST);
    step->set_group(group->id());
    step->set_tensor(transfer.tensor);
    for (const Interval& interval : transfer.slice) {
      v1::Interval* out = step->add_slice();
      out->set_begin(interval.begin);
      out->set_end(interval.end);
    }
    step->set_bytes(transfer.bytes);
    step->set_stage(transfer.stage);
    for (int dep : transfer.deps) step->add_deps(id_of(dep));
  }
  return plan;
}

// Exact equality (tolerance 0): both run the same flows through the same
// engine in the same order.
void ExpectSameTimes(const ReshardPlan& reshard, const Topology& topology) {
  const absl::StatusOr<SimulationResult> expected =
      Simulate(reshard, topology);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const PlanSimulation actual = MustSimulate(ToPlanIr(reshard), topology);
  EXPECT_EQ(actual.seconds, expected->seconds);
  ASSERT_EQ(actual.step_start.size(), reshard.transfers.size());
  ASSERT_EQ(actual.step_finish.size(), reshard.transfers.size());
  for (size_t t = 0; t < reshard.transfers.size(); ++t) {
    ASSERT_EQ(actual.step_start[t], expected->transfer_start[t]) << t;
    ASSERT_EQ(actual.step_finish[t], expected->transfer_finish[t]) << t;
  }
}

TEST(SimulatePlanPropertyTest, RandomTransferListsMatchSimulate) {
  std::mt19937 rng(12345);
  int checked = 0;
  for (int round = 0; round < 200; ++round) {
    Topology topology = PlainTopology(1 + rng() % 4, 1 + rng() % 4);
    if (topology.num_devices() < 2) continue;
    topology.inter_host_latency = (rng() % 2) * 10e-6;
    topology.intra_host_latency = (rng() % 2) * 2e-6;
    topology.pipeline_chunk_bytes = 1 << (10 + rng() % 12);
    if (rng() % 2) topology.host_copy_bandwidth = 3e9;
    if (rng() % 2) topology.transfer_setup_seconds = 1e-4;
    ReshardPlan reshard;
    ReshardProblem problem;
    problem.tensor = TensorSpec{{int64_t{1} << 40}, DType::kInt8};
    reshard.problems.push_back(problem);
    const int transfers = 1 + rng() % 60;
    const int devices = topology.num_devices();
    for (int t = 0; t < transfers; ++t) {
      std::vector<int> order(devices);
      for (int d = 0; d < devices; ++d) order[d] = d;
      std::shuffle(order.begin(), order.end(), rng);
      const int chain = 2 + rng() % (devices - 1);
      Transfer transfer;
      transfer.src_device = order[0];
      transfer.dst_devices.assign(order.begin() + 1, order.begin() + chain);
      transfer.bytes = rng() % 10 == 0 ? 0 : rng() % 100'000'000;
      transfer.slice = {Interval{0, transfer.bytes}};
      for (int k = rng() % 3; k > 0 && t > 0; --k) {
        const int dep = rng() % t;
        if (std::find(transfer.deps.begin(), transfer.deps.end(), dep) ==
            transfer.deps.end()) {
          transfer.deps.push_back(dep);
        }
      }
      reshard.transfers.push_back(std::move(transfer));
    }
    ExpectSameTimes(reshard, topology);
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

TEST(SimulatePlanPropertyTest, PlannedReshardsMatchSimulateForEveryStrategy) {
  for (bool cpu_costs : {false, true}) {
    Topology topology = Topology::FromGbps(4, 4, 100, 2400);
    if (cpu_costs) {
      topology.host_copy_bandwidth = 6e9;
      topology.transfer_setup_seconds = 3e-4;
    }
    ReshardProblem problem;
    problem.tensor = TensorSpec{{1024, 1024, 32}, DType::kFloat32};
    problem.src_mesh = ParseMesh("2x4@0", topology).value();
    problem.dst_mesh = ParseMesh("2x4@2", topology).value();
    problem.src_spec = ShardingSpec::Parse("S0RR").value();
    problem.dst_spec = ShardingSpec::Parse("RS0R").value();
    for (Strategy strategy : ConcreteStrategies()) {
      const absl::StatusOr<ReshardPlan> plan =
          PlanReshard({problem}, topology, strategy);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ExpectSameTimes(*plan, topology);
    }
  }
}

TEST(SimulatePlanSpeedTest, SixteenThousandBroadcastStepsStayFast) {
  // The planning-speed target (128x8 -> 128x8 transpose, 16K transfers) as
  // plan IR, with CPU costs on; the same times as Simulate.
  Topology topology = Topology::FromGbps(256, 8, 100, 2400);
  topology.host_copy_bandwidth = 6.25e9;
  topology.transfer_setup_seconds = 0.5e-3;
  ReshardProblem problem;
  problem.tensor = TensorSpec{{65536, 65536}, DType::kBFloat16};
  problem.src_mesh = ParseMesh("128x8@0", topology).value();
  problem.dst_mesh = ParseMesh("128x8@128", topology).value();
  problem.src_spec = ShardingSpec::Parse("S0,S1").value();
  problem.dst_spec = ShardingSpec::Parse("S1,S0").value();
  const absl::StatusOr<ReshardPlan> reshard =
      PlanReshard({problem}, topology, Strategy::kMeshcast);
  ASSERT_TRUE(reshard.ok()) << reshard.status();
  ASSERT_EQ(reshard->transfers.size(), 16384u);
  const v1::Plan plan = ToPlanIr(*reshard);
  const auto start = std::chrono::steady_clock::now();
  const PlanSimulation result = MustSimulate(plan, topology);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(seconds, 2.0);  // tens of ms in Release; loose for slow CI
  EXPECT_EQ(result.seconds, Simulate(*reshard, topology)->seconds);
}

// ---------------------------------------------------------------------------
// Errors name the step and the field.

absl::Status SimulateError(const v1::Plan& plan,
                           const Topology& topology = PlainTopology(2, 2)) {
  return SimulatePlan(plan, topology).status();
}

TEST(SimulatePlanErrorTest, RejectsMalformedPlans) {
  {
    PlanBuilder builder;
    builder.Compute(0, 1, {123});
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("plan step 100 (OP_COMPUTE): dep 123 is not a step"));
  }
  {
    PlanBuilder builder;
    builder.Compute(0, 1, {101});
    builder.Compute(0, 1, {100});
    const absl::Status status = SimulateError(builder.plan());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("cycle"));
  }
  {
    PlanBuilder builder;
    builder.Compute(0, 1);
    builder.Compute(0, 1);
    builder.plan().mutable_steps(1)->set_id(100);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("step id 100 appears twice"));
  }
  {
    PlanBuilder builder;
    builder.Compute(4, 1);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("device 4 is not a device of the topology "
                          "(allowed 0..3)"));
  }
  {
    PlanBuilder builder;
    builder.Compute(0, -1);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("flops must be >= 0"));
  }
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_SEND_RECV, {0, 1, 2}, 10);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("has 3 devices; the op needs 2"));
  }
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_BROADCAST, {0}, 10);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("the op needs at least 2"));
  }
  {
    // A relay tree whose rank lists a later rank as its parent.
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_BROADCAST, {0, 1, 2}, 10);
    for (int parent : {-1, 2, 0}) {
      builder.plan().mutable_groups(0)->add_parents(parent);
    }
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("parents[1] is 2; must be a rank in [0, 0]"));
  }
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_ALL_GATHER, {0, 1, 0}, 10);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("device 0 appears twice"));
  }
  {
    PlanBuilder builder;
    builder.Comm(v1::Step::OP_ALL_GATHER, {0, 1}, -5);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("bytes must be >= 0, got -5"));
  }
  {
    PlanBuilder builder;
    v1::Step* step = builder.Step(v1::Step::OP_ALL_REDUCE);
    step->set_group(77);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("group 77 is not a group id"));
  }
  {
    PlanBuilder builder;
    const int t = builder.Tensor({4}, v1::DTYPE_FLOAT32);
    v1::Step* step = builder.Step(v1::Step::OP_ALL_TO_ALL);
    step->set_group(builder.Group({0, 1}));
    step->set_tensor(t);
    step->add_counts(1);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("counts has 1 entries; the group of 2 devices "
                          "needs n x n = 4"));
  }
  {
    PlanBuilder builder;
    const int t = builder.Tensor({4}, v1::DTYPE_UNSPECIFIED);
    v1::Step* step = builder.Step(v1::Step::OP_ALL_TO_ALL);
    step->set_group(builder.Group({0, 1}));
    step->set_tensor(t);
    for (int i = 0; i < 4; ++i) step->add_counts(1);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("DTYPE_UNSPECIFIED"));
  }
  {
    PlanBuilder builder;
    v1::Step* step = builder.Step(v1::Step::OP_COMPUTE);
    step->set_device(0);
    step->add_inputs()->set_buffer(5);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("inputs[0] buffer 5 is not a buffer id"));
  }
  {
    PlanBuilder builder;
    builder.Step(v1::Step::OP_UNSPECIFIED);
    EXPECT_THAT(SimulateError(builder.plan()).message(),
                HasSubstr("op must be one of"));
  }
  {
    Topology topology = PlainTopology(1, 1);
    topology.device_flops = 0;
    EXPECT_THAT(SimulateError(v1::Plan(), topology).message(),
                HasSubstr("device_flops"));
  }
}

// ---------------------------------------------------------------------------
// Collective lower bounds.

TEST(CollectiveLowerBoundTest, AllReduceOnOneHostIsThePortBound) {
  Topology topology = PlainTopology(1, 4);
  topology.intra_host_latency = 2e-6;
  topology.transfer_setup_seconds = 1e-4;
  // 2(n-1)/n x 4 GB = 6 GB over a 100 GB/s port.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_REDUCE,
                                          {0, 1, 2, 3}, 4'000'000'000,
                                          topology),
              1e-4 + 0.06 + 2e-6, 1e-12);
}

TEST(CollectiveLowerBoundTest, AllReduceOnTwoHostsIsTheNicBound) {
  Topology topology = PlainTopology(2, 2);
  topology.intra_host_latency = 2e-6;
  topology.inter_host_latency = 10e-6;
  // Hosts: 2(h-1)/h x 4 GB = 4 GB over 1 GB/s, plus the inter-host latency;
  // ports: 6 GB over 100 GB/s is far less.
  const double bound = CollectiveLowerBoundSeconds(
      v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, 4'000'000'000, topology);
  EXPECT_NEAR(bound, 4.0 + 10e-6, 1e-12);
  // The hierarchical all-reduce the simulator runs meets the NIC term of
  // the bound; only its local phases (2 x 0.04 s + 2 x 2 us) and one more
  // ring round's latency come on top.
  PlanBuilder builder;
  builder.Comm(v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, 4'000'000'000);
  EXPECT_NEAR(MustSimulate(builder.plan(), topology).seconds - bound,
              0.08 + 4e-6 + 10e-6, 1e-9);
}

TEST(CollectiveLowerBoundTest, GatherScatterAllToAllAndBroadcast) {
  const Topology topology = PlainTopology(2, 2);
  const std::vector<int> group = {0, 1, 2, 3};
  const int64_t b = 4'000'000'000;
  // All-gather / reduce-scatter: each host lacks (n-k_h)/n = 1/2 of B.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_GATHER, group, b,
                                          topology),
              2.0, 1e-12);
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_REDUCE_SCATTER, group,
                                          b, topology),
              2.0, 1e-12);
  // All-to-all: host h sends k_h (n-k_h)/n B = B.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_TO_ALL, group, b,
                                          topology),
              4.0, 1e-12);
  // Broadcast: host 1 must take in B once.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_BROADCAST, group, b,
                                          topology),
              4.0, 1e-12);
  // On one host the ports bound: all-gather (n-1)/n B, broadcast B.
  const Topology one_host = PlainTopology(1, 4);
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_GATHER, group, b,
                                          one_host),
              0.03, 1e-12);
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_BROADCAST, group, b,
                                          one_host),
              0.04, 1e-12);
  // Uneven all-to-all counts: rank 0 sends 3 GB in all, the most.
  EXPECT_NEAR(AllToAllLowerBoundSeconds({0, 1}, {5'000'000'000, 3'000'000'000,
                                                 1'000'000'000, 0},
                                        one_host),
              0.03, 1e-12);
  // Nothing moves: 0.
  EXPECT_EQ(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_REDUCE, {2}, b,
                                        topology),
            0);
  EXPECT_EQ(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_REDUCE, group, 0,
                                        topology),
            0);
  EXPECT_EQ(CollectiveLowerBoundSeconds(v1::Step::OP_COMPUTE, group, b,
                                        topology),
            0);
}

TEST(CollectiveLowerBoundTest, HostCopyLimitsCpuHosts) {
  Topology topology = PlainTopology(1, 4);
  topology.host_copy_bandwidth = 10e9;
  const int64_t b = 1'000'000'000;
  // Broadcast: 3 receivers' hops each use the host copy: 3 GB at 10 GB/s.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_BROADCAST,
                                          {0, 1, 2, 3}, b, topology),
              0.3, 1e-12);
  // All-reduce: 2(n-1) B = 6 GB of hops through the one host's copy.
  EXPECT_NEAR(CollectiveLowerBoundSeconds(v1::Step::OP_ALL_REDUCE,
                                          {0, 1, 2, 3}, b, topology),
              0.6, 1e-12);
}

TEST(CollectiveLowerBoundPropertyTest, SimulatedCollectivesNeverBeatTheBound) {
  std::mt19937 rng(99);
  const v1::Step::Op ops[] = {
      v1::Step::OP_BROADCAST,      v1::Step::OP_SEND_RECV,
      v1::Step::OP_ALL_GATHER,     v1::Step::OP_REDUCE_SCATTER,
      v1::Step::OP_ALL_REDUCE,     v1::Step::OP_ALL_TO_ALL};
  int checked = 0;
  for (int round = 0; round < 400; ++round) {
    Topology topology;
    topology.num_hosts = 1 + rng() % 4;
    topology.devices_per_host = 1 + rng() % 4;
    if (topology.num_devices() < 2) continue;
    topology.inter_host_bandwidth = 1e9 * (1 + rng() % 10);
    topology.intra_host_bandwidth = 1e9 * (1 + rng() % 100);
    topology.inter_host_latency = (rng() % 3) * 5e-6;
    topology.intra_host_latency = (rng() % 3) * 1e-6;
    if (rng() % 2) topology.host_copy_bandwidth = 1e9 * (1 + rng() % 20);
    if (rng() % 2) topology.transfer_setup_seconds = 1e-4;
    const v1::Step::Op op = ops[rng() % 6];
    std::vector<int> devices(topology.num_devices());
    for (size_t d = 0; d < devices.size(); ++d) devices[d] = d;
    std::shuffle(devices.begin(), devices.end(), rng);
    const int n = op == v1::Step::OP_SEND_RECV
                      ? 2
                      : 2 + rng() % (topology.num_devices() - 1);
    devices.resize(n);
    const int64_t per_pair = 1 + rng() % 10'000'000;  // float32 elements
    const int64_t bytes = n * per_pair * 4;
    PlanBuilder builder;
    if (op == v1::Step::OP_ALL_TO_ALL) {
      const int t = builder.Tensor({n * n * per_pair}, v1::DTYPE_FLOAT32);
      v1::Step* step = builder.Step(op);
      step->set_group(builder.Group(devices));
      step->set_tensor(t);
      step->set_bytes(bytes);
      for (int k = 0; k < n * n; ++k) step->add_counts(per_pair);
    } else {
      builder.Comm(op, devices, bytes);
    }
    const double simulated = MustSimulate(builder.plan(), topology).seconds;
    const double bound =
        CollectiveLowerBoundSeconds(op, devices, bytes, topology);
    EXPECT_GT(bound, 0);
    EXPECT_GE(simulated, bound * (1 - 1e-9))
        << v1::Step::Op_Name(op) << " n=" << n << " " << topology.ToString();
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace meshcast
