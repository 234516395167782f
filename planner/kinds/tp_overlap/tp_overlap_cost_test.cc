#include "planner/kinds/tp_overlap/tp_overlap_cost.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "planner/sim/plan_simulator.h"

namespace meshcast {
namespace {

const std::vector<int> kDevices = {0, 1, 2, 3};

// Four hosts of one device (a ring of NIC hops), compute-bound GEMMs: the
// memory bandwidth is made huge so flops alone set compute time.
Topology Ring(double gbps, double flops) {
  Topology t = Topology::FromGbps(4, 1, gbps, 1000);
  t.device_flops = flops;
  t.device_memory_bandwidth = 1e18;
  t.inter_host_latency = 0;
  t.intra_host_latency = 0;
  t.transfer_setup_seconds = 0;
  return t;
}

// GEMM seconds of the whole m x n x k/tp product at the modelled
// efficiency, and a ring reduce-scatter's seconds of B bytes.
double GemmSeconds(const TpShape& s, int tp, const Topology& t,
                   const TpCostModel& model) {
  return EffectiveGemmFlops(s.m, s.n, s.k / tp, model) / t.device_flops;
}
double RingReduceScatterSeconds(const TpShape& s, int tp, const Topology& t) {
  const double bytes = static_cast<double>(s.m) * s.n * 4;
  return bytes * (tp - 1) / tp / t.inter_host_bandwidth;
}

TEST(TpOverlapCostTest, EfficiencyFollowsTheHalfRateCurve) {
  TpCostModel model;
  model.half_rate_rows = 16;
  EXPECT_DOUBLE_EQ(GemmEfficiency(16, model), 0.5);
  EXPECT_DOUBLE_EQ(GemmEfficiency(48, model), 0.75);
  EXPECT_DOUBLE_EQ(GemmEfficiency(0, model), 0);
  // Effective flops = 2 (rows + r_half) n k.
  EXPECT_DOUBLE_EQ(EffectiveGemmFlops(48, 10, 20, model), 2.0 * 64 * 10 * 20);
  model.half_rate_rows = 0;
  EXPECT_DOUBLE_EQ(EffectiveGemmFlops(48, 10, 20, model), 2.0 * 48 * 10 * 20);
}

// Sequential = GEMM then collective: the mode phase is the sum of the two
// alone phases, and both match the analytic formulas.
TEST(TpOverlapCostTest, SequentialIsGemmPlusComm) {
  const TpShape shape{1024, 512, 2048, DType::kFloat32, false};
  const Topology topology = Ring(10, 1e11);
  const TpCostModel model;
  absl::StatusOr<TpPrediction> p =
      PredictTpMode(shape, TpMode::kSequential, 1, kDevices, topology, model);
  ASSERT_TRUE(p.ok()) << p.status();
  const double gemm = GemmSeconds(shape, 4, topology, model);
  const double comm = RingReduceScatterSeconds(shape, 4, topology);
  EXPECT_NEAR(p->seconds, gemm + comm, 1e-6 * (gemm + comm));
  const v1::Plan& plan = p->lowering.plan;
  EXPECT_NEAR(plan.predicted_step_finish(0) - plan.predicted_step_start(0),
              gemm, 1e-9 * gemm);
  const int c = p->lowering.comm_alone_step;
  EXPECT_NEAR(plan.predicted_step_finish(c) - plan.predicted_step_start(c),
              comm, 1e-6 * comm);
}

// With communication far cheaper than the GEMM, fused hides all of it but
// the last piece's final hop: about gemm (at tile efficiency) + one
// sub-chunk's transfer and add.
TEST(TpOverlapCostTest, FusedWithCheapCommIsAboutTheGemm) {
  const TpShape shape{1024, 512, 2048, DType::kFloat32, false};
  const Topology topology = Ring(1000, 1e10);  // comm << gemm
  const TpCostModel model;
  absl::StatusOr<TpPrediction> fused =
      PredictTpMode(shape, TpMode::kFused, 8, kDevices, topology, model);
  ASSERT_TRUE(fused.ok()) << fused.status();
  // j = 2: sub-chunks of 128 rows, one tile each; the ring's additions are
  // timed as a collective's reductions are (free).
  ASSERT_EQ(model.TileCount(128), 1);
  const double tiles =
      4 * 2 * EffectiveGemmFlops(128, 512, 512, model) / topology.device_flops;
  const double adds = 0;
  const double sub_chunk_bytes = 128.0 * 512 * 4;
  const double one_hop = sub_chunk_bytes / topology.inter_host_bandwidth;
  EXPECT_GE(fused->seconds, (tiles + adds) * (1 - 1e-9));
  EXPECT_LE(fused->seconds, tiles + adds + 2 * one_hop + 1e-6 * tiles);
  const double comm = RingReduceScatterSeconds(shape, 4, topology);
  EXPECT_LT(one_hop, comm);  // a fraction of the whole collective
}

// More chunks hide more of the collective until the small-chunk efficiency
// loss wins: with comm ~ gemm and a cheap r_half, 8 chunks beat 2 and 2
// beat sequential; with a costly r_half, 16 chunks lose to 4.
TEST(TpOverlapCostTest, MoreChunksHelpUntilEfficiencyWins) {
  const TpShape shape{1024, 512, 2048, DType::kFloat32, false};
  const Topology topology = Ring(10, 5e11);
  auto chunked = [&](int chunks, double r_half) {
    TpCostModel model;
    model.half_rate_rows = r_half;
    TpMode mode = chunks == 1 ? TpMode::kSequential : TpMode::kChunked;
    absl::StatusOr<TpPrediction> p =
        PredictTpMode(shape, mode, chunks, kDevices, topology, model);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->seconds : 0;
  };
  const double gemm = GemmSeconds(shape, 4, topology, TpCostModel{});
  const double comm = RingReduceScatterSeconds(shape, 4, topology);
  ASSERT_GT(comm, 0.3 * gemm);
  ASSERT_LT(comm, 3 * gemm);
  EXPECT_LT(chunked(2, 1), chunked(1, 1));
  EXPECT_LT(chunked(8, 1), chunked(2, 1));
  EXPECT_GT(chunked(16, 512), chunked(4, 512));
}

// auto never predicts worse than sequential, and picks the candidate of
// least predicted time among all it tried.
TEST(TpOverlapCostTest, AutoPicksTheMinimumAndNeverLosesToSequential) {
  const TpCostModel model;
  for (double gbps : {1.0, 10.0, 100.0}) {
    for (bool ar : {false, true}) {
      for (int64_t m : {64, 512, 2048}) {
        const TpShape shape{m, 256, 1024, DType::kFloat32, ar};
        const Topology topology = Ring(gbps, 5e10);
        SCOPED_TRACE(testing::Message()
                     << gbps << " Gbps m=" << m << (ar ? " all_reduce" : ""));
        absl::StatusOr<TpSearch> search = SearchTpModes(
            shape, TpMode::kAuto, 0, kDevices, topology, model, false);
        ASSERT_TRUE(search.ok()) << search.status();
        absl::StatusOr<TpPrediction> sequential = PredictTpMode(
            shape, TpMode::kSequential, 1, kDevices, topology, model);
        ASSERT_TRUE(sequential.ok());
        EXPECT_LE(search->best.seconds, sequential->seconds);
        // Every candidate of every mode, independently.
        double least = sequential->seconds;
        for (TpMode mode : {TpMode::kChunked, TpMode::kFused}) {
          for (int chunks : TpCandidateChunks(shape, 4, mode)) {
            absl::StatusOr<TpPrediction> p =
                PredictTpMode(shape, mode, chunks, kDevices, topology, model);
            ASSERT_TRUE(p.ok());
            least = std::min(least, p->seconds);
          }
        }
        EXPECT_DOUBLE_EQ(search->best.seconds, least);
        EXPECT_EQ(search->best.lowering.plan.strategy(), search->best.name);
        ASSERT_EQ(search->alternatives.size(), 3u);
        EXPECT_EQ(search->alternatives[0].name, "sequential");
      }
    }
  }
}

// CPU devices with less than a core each: auto picks sequential even where
// an overlap mode is predicted faster, and lists the others with a note; a
// core or more each, or not known, and nothing changes. A forced mode
// still runs.
TEST(TpOverlapCostTest, CrowdedCoresKeepOverlapOutOfAuto) {
  const TpCostModel model;
  // GEMM and ring of similar time: fused is predicted well ahead.
  const TpShape shape{2048, 256, 1024, DType::kFloat32, false};
  Topology topology = Ring(1.0, 5e10);
  absl::StatusOr<TpSearch> free =
      SearchTpModes(shape, TpMode::kAuto, 0, kDevices, topology, model, false);
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_NE(free->best.mode, TpMode::kSequential);
  for (const TpAlternative& row : free->alternatives) {
    EXPECT_EQ(row.note, "") << row.name;
  }
  for (double cores : {1.0, 2.0}) {
    topology.cpu_cores_per_device = cores;
    absl::StatusOr<TpSearch> roomy = SearchTpModes(
        shape, TpMode::kAuto, 0, kDevices, topology, model, false);
    ASSERT_TRUE(roomy.ok());
    EXPECT_EQ(roomy->best.name, free->best.name) << cores;
  }
  topology.cpu_cores_per_device = 0.5;
  absl::StatusOr<TpSearch> crowded =
      SearchTpModes(shape, TpMode::kAuto, 0, kDevices, topology, model, false);
  ASSERT_TRUE(crowded.ok());
  EXPECT_EQ(crowded->best.mode, TpMode::kSequential);
  ASSERT_EQ(crowded->alternatives.size(), 3u);
  EXPECT_EQ(crowded->alternatives[0].note, "");
  for (size_t i = 1; i < crowded->alternatives.size(); ++i) {
    const TpAlternative& row = crowded->alternatives[i];
    EXPECT_NE(row.note.find("0.50 cores per CPU device"), std::string::npos)
        << row.name << ": " << row.note;
    // Still predicted, as without the crowding.
    EXPECT_DOUBLE_EQ(row.seconds, free->alternatives[i].seconds);
  }
  absl::StatusOr<TpSearch> forced =
      SearchTpModes(shape, TpMode::kFused, 0, kDevices, topology, model, false);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->best.mode, TpMode::kFused);
}

// A forced mode with chunks = 0 takes the best of its own chunk counts and
// lists each one tried.
TEST(TpOverlapCostTest, ForcedModePicksItsBestChunkCount) {
  const TpShape shape{1024, 512, 2048, DType::kFloat32, true};
  const Topology topology = Ring(10, 1e11);
  absl::StatusOr<TpSearch> search = SearchTpModes(
      shape, TpMode::kFused, 0, kDevices, topology, TpCostModel{}, false);
  ASSERT_TRUE(search.ok()) << search.status();
  ASSERT_EQ(search->alternatives.size(), 4u);  // fused/4, /8, /16, /32
  double least = search->alternatives[0].seconds;
  for (const TpAlternative& a : search->alternatives) {
    least = std::min(least, a.seconds);
    EXPECT_EQ(a.name.rfind("fused/", 0), 0u) << a.name;
  }
  EXPECT_DOUBLE_EQ(search->best.seconds, least);
  EXPECT_EQ(search->best.mode, TpMode::kFused);
}

// Every candidate the planner may emit simulates without error (the
// simulator accepts the operand-form OP_SEND_RECV with a group of two).
TEST(TpOverlapCostTest, EveryCandidateSimulates) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  for (bool ar : {false, true}) {
    const TpShape shape{256, 64, 128, DType::kBFloat16, ar};
    for (TpMode mode :
         {TpMode::kSequential, TpMode::kChunked, TpMode::kFused}) {
      for (int chunks : TpCandidateChunks(shape, 4, mode)) {
        absl::StatusOr<TpPrediction> p = PredictTpMode(
            shape, mode, chunks, kDevices, topology, TpCostModel{});
        ASSERT_TRUE(p.ok()) << p.status();
        EXPECT_GT(p->seconds, 0) << p->name;
      }
    }
  }
}

}  // namespace
}  // namespace meshcast
