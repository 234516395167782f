// The engine's kernels end to end: every collective, local copy and compute
// run by the Executor on several workers in one process (Gloo over
// 127.0.0.1, as executor_test.cc), each output verified by the worker
// itself — moved data bit for bit against the initializer, computed data
// against the float64 reference within the dtype's tolerance
// (worker/kernels/reference.h) — so a wrong element is a mismatch here.
#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/collectives.h"
#include "worker/executor.h"
#include "worker/host_memory.h"
#include "worker/gloo_communicator.h"
#include "worker/in_memory_kv_store.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

// Tiny chunks: every ring phase and exchange is pipelined over many.
ExecutorOptions SmallChunks() {
  ExecutorOptions options;
  options.relay.chunk_bytes = 24;
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

v1::Initializer Random(uint64_t seed) {
  v1::Initializer init;
  init.set_kind(v1::Initializer::KIND_RANDOM);
  init.set_seed(seed);
  return init;
}

Box Row(const std::vector<int64_t>& shape, int64_t r) {
  Box box = {{r, r + 1}};
  for (int64_t extent : shape) box.push_back({0, extent});
  return box;
}

std::vector<int64_t> WithRows(int64_t n, const std::vector<int64_t>& shape) {
  std::vector<int64_t> in = {n};
  in.insert(in.end(), shape.begin(), shape.end());
  return in;
}

// IN = [n] + shape (row r on group[r], initialized), OUT = shape: the
// whole of OUT on every rank (all-reduce) or chunk r along dim 0
// (reduce-scatter).
void AddReduction(TestJob& job, v1::Step::Op op, const std::vector<int>& group,
                  const std::vector<int64_t>& shape, DType dtype,
                  v1::Reduction reduction, const v1::Initializer& init) {
  const int n = static_cast<int>(group.size());
  const int in = job.AddTensor({WithRows(n, shape), dtype});
  job.SetInitializer(in, init);
  const int out = job.AddTensor({shape, dtype});
  v1::Step step;
  step.set_op(op);
  step.set_reduction(reduction);
  for (int r = 0; r < n; ++r) {
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(group[r], in, Row(shape, r), BufferRole::kSource));
  }
  for (int r = 0; r < n; ++r) {
    const Box box = op == v1::Step::OP_ALL_REDUCE
                        ? job.FullBox(out)
                        : TestJob::ShardBox(shape, 0, n, r);
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(group[r], out, box, BufferRole::kDestination));
  }
  job.AddStep(step, group);
}

TEST(CollectivesTest, AllReduceSumOnTwoWorkersOfTwoDevicesUnevenLength) {
  TestJob job(2, 2);
  // 91 elements: not divisible by the 2 ring pieces nor the 4 ranks.
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, {13, 7},
               DType::kFloat32, v1::REDUCTION_SUM, Random(7));
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, 4 * 91);
  EXPECT_LT(outcome.max_abs_error, 1e-5);
  ASSERT_TRUE(outcome.results[0].ok());
  // Each worker's two ranks receive the whole output.
  EXPECT_EQ(outcome.results[0]->bytes_moved(), 0);  // Step.bytes unset
}

// The check can fail: device 2 holds a destination of the all-reduce's
// output but is not in the group, so nothing writes it and every element
// differs from the reference.
TEST(CollectivesTest, AComputedDestinationNobodyWroteIsAMismatch) {
  TestJob job(1, 3);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1}, {3, 4}, DType::kFloat32,
               v1::REDUCTION_SUM, Random(13));
  job.AddBuffer(2, /*tensor=*/1, job.FullBox(1), BufferRole::kDestination);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok) << outcome.results[0].status();
  EXPECT_EQ(outcome.elements_verified, 3 * 12);
  EXPECT_EQ(outcome.mismatches, 12);
  EXPECT_GT(outcome.max_abs_error, 0);
}

TEST(CollectivesTest, AllReduceInEveryDTypeAndBothReductions) {
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (v1::Reduction reduction : {v1::REDUCTION_SUM, v1::REDUCTION_MAX}) {
      SCOPED_TRACE(
          absl::StrCat(DTypeName(dtype), " ", v1::Reduction_Name(reduction)));
      TestJob job(3, 1, absl::StrCat("ar-", DTypeName(dtype), reduction));
      AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1, 2}, {5, 3}, dtype,
                   reduction, Random(11));
      ExpectAllVerified(RunTestJob(job, SmallChunks()), 3 * 15);
    }
  }
}

// Group order 0, 2, 1, 3 alternates between the workers: the ring runs
// over workers in order of first appearance, each combining two ranks.
TEST(CollectivesTest, AllReduceOverAGroupThatAlternatesBetweenWorkers) {
  TestJob job(2, 2);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 2, 1, 3}, {4, 9},
               DType::kFloat64, v1::REDUCTION_SUM, Random(3));
  ExpectAllVerified(RunTestJob(job, SmallChunks()), 4 * 36);
}

TEST(CollectivesTest, ReduceScatterUnevenChunksOnTwoWorkersOfTwoDevices) {
  TestJob job(2, 2);
  // 10 rows over 4 ranks: chunks of 3, 3, 3 and 1 rows.
  AddReduction(job, v1::Step::OP_REDUCE_SCATTER, {0, 1, 2, 3}, {10, 3},
               DType::kFloat32, v1::REDUCTION_SUM, Random(5));
  ExpectAllVerified(RunTestJob(job, SmallChunks()), 30);
}

TEST(CollectivesTest, ReduceScatterWithAnEmptyChunkAndMax) {
  TestJob job(4, 1);
  // 3 rows over 4 ranks: rank 3's chunk is empty.
  AddReduction(job, v1::Step::OP_REDUCE_SCATTER, {0, 1, 2, 3}, {3, 2},
               DType::kInt32, v1::REDUCTION_MAX, v1::Initializer());
  ExpectAllVerified(RunTestJob(job, SmallChunks()), 6);
}

// Shards of 3, 3, 3 and 1 rows gathered into a full copy on every rank.
// Operands that name whole buffers make the workers exchange their inputs'
// extents first (a program holds only its own buffers); explicit slices
// skip that.
TEST(CollectivesTest, AllGatherUnevenShardsOnTwoWorkersOfTwoDevices) {
  for (DType dtype : {DType::kInt8, DType::kBFloat16, DType::kFloat64}) {
    for (bool slices : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), slices ? " slices" : ""));
      TestJob job(2, 2, absl::StrCat("ag-", DTypeName(dtype), slices));
      const std::vector<int64_t> shape = {10, 5};
      const int t = job.AddTensor({shape, dtype});
      job.SetInitializer(t, Random(9));
      v1::Step step;
      step.set_op(v1::Step::OP_ALL_GATHER);
      for (int r = 0; r < 4; ++r) {
        const Box shard = TestJob::ShardBox(shape, 0, 4, r);
        *step.add_inputs() =
            TestJob::Operand(job.AddBuffer(r, t, shard, BufferRole::kSource),
                             slices ? shard : Box{});
      }
      for (int r = 0; r < 4; ++r) {
        *step.add_outputs() = TestJob::Operand(
            job.AddBuffer(r, t, job.FullBox(t), BufferRole::kDestination));
      }
      job.AddStep(step, {0, 1, 2, 3});
      ExpectAllVerified(RunTestJob(job, SmallChunks()), 4 * 50);
    }
  }
}

// n x n counts with zeros and different sizes both ways.
void AddAllToAll(TestJob& job, const std::vector<int>& group) {
  const int n = static_cast<int>(group.size());
  std::vector<int64_t> counts(n * n);
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) counts[r * n + s] = (r * 3 + s * 5 + 1) % 6;
  }
  std::vector<int64_t> in_row(n + 1, 0), out_row(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    in_row[r + 1] = in_row[r];
    out_row[r + 1] = out_row[r];
    for (int s = 0; s < n; ++s) {
      in_row[r + 1] += counts[r * n + s];
      out_row[r + 1] += counts[s * n + r];
    }
  }
  const int64_t total = in_row[n];
  const int in = job.AddTensor({{total}, DType::kFloat32});
  job.SetInitializer(in, Random(21));
  const int out = job.AddTensor({{total}, DType::kFloat32});
  v1::Step step;
  step.set_op(v1::Step::OP_ALL_TO_ALL);
  for (int64_t c : counts) step.add_counts(c);
  for (int r = 0; r < n; ++r) {
    *step.add_inputs() = TestJob::Operand(job.AddBuffer(
        group[r], in, {{in_row[r], in_row[r + 1]}}, BufferRole::kSource));
  }
  for (int s = 0; s < n; ++s) {
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(group[s], out, {{out_row[s], out_row[s + 1]}},
                      BufferRole::kDestination));
  }
  job.AddStep(step, group);
}

TEST(CollectivesTest, AllToAllUnevenCountsOnTwoWorkersOfTwoDevices) {
  TestJob job(2, 2);
  AddAllToAll(job, {0, 1, 2, 3});
  // Every element of OUT lands once: the sum of the counts.
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    for (int s = 0; s < 4; ++s) total += (r * 3 + s * 5 + 1) % 6;
  }
  ExpectAllVerified(RunTestJob(job, SmallChunks()), total);
}

TEST(CollectivesTest, AllToAllPairwiseOverThreeWorkers) {
  TestJob job(3, 1);
  AddAllToAll(job, {2, 0, 1});
  int64_t total = 0;
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) total += (r * 3 + s * 5 + 1) % 6;
  }
  ExpectAllVerified(RunTestJob(job, SmallChunks()), total);
}

// Operands that are whole buffers holding all of IN and OUT (MoE's S1 and
// S2 schedules): each rank's part is found by the counts (test_job.h).
TEST(CollectivesTest, AllToAllBetweenWholeBuffers) {
  TestJob job(2, 2);
  const int64_t total =
      testing::AddWholeBufferAllToAll(job, {1, 3, 0, 2});
  ExpectAllVerified(RunTestJob(job, SmallChunks()), total);
}

// Only the copied rows hold the pattern; the rest stay poisoned, which
// verification must count.
TEST(CollectivesTest, LocalCopyOfASlice) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{10, 6}, DType::kInt32});
  const int from = job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  const int to = job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  v1::Step step;
  step.set_op(v1::Step::OP_LOCAL_COPY);
  *step.add_inputs() = TestJob::Operand(from, {{2, 7}, {0, 6}});
  *step.add_outputs() = TestJob::Operand(to, {{2, 7}, {0, 6}});
  job.AddStep(step);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok) << outcome.results[0].status();
  EXPECT_EQ(outcome.elements_verified, 60);
  EXPECT_EQ(outcome.mismatches, 5 * 6);
}

// The DAG of the issue: every rank computes its partial product with a
// GEMM, then a reduce-scatter sums the partials and leaves chunk r on rank
// r. Both the products and the chunks are checked against the reference.
void GemmThenReduceScatter(int workers, int devices_per_worker) {
  const int n = workers * devices_per_worker;
  const int64_t m = 6, k = 7, cols = 5;
  TestJob job(workers, devices_per_worker,
              absl::StrCat("gemm-rs-", workers, "x", devices_per_worker));
  const int a = job.AddTensor({{n, m, k}, DType::kFloat32});
  const int b = job.AddTensor({{n, k, cols}, DType::kFloat32});
  const int p = job.AddTensor({{n, m, cols}, DType::kFloat32});
  const int out = job.AddTensor({{m, cols}, DType::kFloat32});
  job.SetInitializer(a, Random(1));
  job.SetInitializer(b, Random(2));
  std::vector<int> group(n), gemms;
  std::iota(group.begin(), group.end(), 0);
  v1::Step reduce;
  reduce.set_op(v1::Step::OP_REDUCE_SCATTER);
  for (int r = 0; r < n; ++r) {
    v1::Step gemm;
    gemm.set_op(v1::Step::OP_COMPUTE);
    gemm.set_device(r);
    v1::GemmAttrs* attrs = gemm.mutable_compute()->mutable_gemm();
    attrs->set_m(m);
    attrs->set_n(cols);
    attrs->set_k(k);
    *gemm.add_inputs() = TestJob::Operand(
        job.AddBuffer(r, a, Row({m, k}, r), BufferRole::kSource));
    *gemm.add_inputs() = TestJob::Operand(
        job.AddBuffer(r, b, Row({k, cols}, r), BufferRole::kSource));
    const int product =
        job.AddBuffer(r, p, Row({m, cols}, r), BufferRole::kDestination);
    *gemm.add_outputs() = TestJob::Operand(product);
    gemms.push_back(job.AddStep(gemm));
    *reduce.add_inputs() = TestJob::Operand(product);
  }
  for (int r = 0; r < n; ++r) {
    *reduce.add_outputs() = TestJob::Operand(
        job.AddBuffer(r, out, TestJob::ShardBox({m, cols}, 0, n, r),
                      BufferRole::kDestination));
  }
  for (int gemm : gemms) reduce.add_deps(gemm);
  reduce.set_stage(1);
  job.AddStep(reduce, group);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, n * m * cols + m * cols);
  EXPECT_LT(outcome.max_abs_error, 1e-4);
}

TEST(CollectivesTest, GemmThenReduceScatterOnFourWorkers) {
  GemmThenReduceScatter(4, 1);
}

TEST(CollectivesTest, GemmThenReduceScatterOnTwoWorkersOfTwoDevices) {
  GemmThenReduceScatter(2, 2);
}

TEST(CollectivesTest, ElementwiseAddThenScaleOnOneDevice) {
  TestJob job(1, 1);
  const int x = job.AddTensor({{4, 5}, DType::kFloat32});
  const int y = job.AddTensor({{4, 5}, DType::kFloat32});
  const int sum = job.AddTensor({{4, 5}, DType::kFloat32});
  const int scaled = job.AddTensor({{4, 5}, DType::kFloat32});
  job.SetInitializer(x, Random(4));
  job.SetInitializer(y, Random(5));
  v1::Step add;
  add.set_op(v1::Step::OP_COMPUTE);
  add.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_ADD);
  *add.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource));
  *add.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, y, job.FullBox(y), BufferRole::kSource));
  const int sum_buffer =
      job.AddBuffer(0, sum, job.FullBox(sum), BufferRole::kScratch);
  *add.add_outputs() = TestJob::Operand(sum_buffer);
  const int first = job.AddStep(add);
  v1::Step scale;
  scale.set_op(v1::Step::OP_COMPUTE);
  scale.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_SCALE);
  scale.mutable_compute()->mutable_elementwise()->set_alpha(-0.5);
  *scale.add_inputs() = TestJob::Operand(sum_buffer);
  *scale.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, scaled, job.FullBox(scaled), BufferRole::kDestination));
  scale.add_deps(first);
  job.AddStep(scale);
  // The scratch sum is not verified; the scaled output is.
  ExpectAllVerified(RunTestJob(job, SmallChunks()), 20);
}

// The MoE layer's data path on one device, run and verified by the
// executor in every float dtype: dispatch (a k = 1 gather of token rows
// into expert slots, -1 for empty slots), relu, gate weights = sigmoid of
// the gate logits, combine (a weighted k = 2 gather-sum back to tokens);
// the dispatch writes into a slice of a wider buffer, the combine reads it
// packed. The dispatched and combined outputs are destinations (verified),
// the rest scratch.
void AddMoeChain(TestJob& job, DType dtype, bool zero_slots = true) {
  const int64_t tokens = 6, hidden = 5, slots = 8, k = 2;
  const int x = job.AddTensor({{tokens, hidden}, dtype});
  const int d = job.AddTensor({{slots, hidden + 2}, dtype});
  const int h = job.AddTensor({{slots, hidden}, dtype});
  const int l = job.AddTensor({{tokens, k}, dtype});
  const int g = job.AddTensor({{tokens, k}, dtype});
  const int y = job.AddTensor({{tokens, hidden}, dtype});
  job.SetInitializer(x, Random(21));
  job.SetInitializer(l, Random(22));
  if (zero_slots) {
    v1::Initializer zeros;
    zeros.set_kind(v1::Initializer::KIND_ZEROS);
    job.SetInitializer(d, zeros);
  }
  const Box slots_box = {{0, slots}, {1, hidden + 1}};
  v1::Step dispatch;
  dispatch.set_op(v1::Step::OP_COMPUTE);
  v1::GatherAttrs* dg = dispatch.mutable_compute()->mutable_gather();
  dg->set_row(hidden);
  for (int64_t i : {0, 2, 4, -1, 1, 3, 5, 0}) dg->add_index(i);
  *dispatch.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource));
  const int db = job.AddBuffer(0, d, job.FullBox(d), BufferRole::kDestination);
  *dispatch.add_outputs() = TestJob::Operand(db, slots_box);
  const int first = job.AddStep(dispatch);
  v1::Step relu;
  relu.set_op(v1::Step::OP_COMPUTE);
  relu.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_RELU);
  *relu.add_inputs() = TestJob::Operand(db, slots_box);
  const int hb = job.AddBuffer(0, h, job.FullBox(h), BufferRole::kScratch);
  *relu.add_outputs() = TestJob::Operand(hb);
  relu.add_deps(first);
  const int second = job.AddStep(relu);
  v1::Step gate;
  gate.set_op(v1::Step::OP_COMPUTE);
  gate.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_SIGMOID);
  *gate.add_inputs() = TestJob::Operand(
      job.AddBuffer(0, l, job.FullBox(l), BufferRole::kSource));
  const int gb = job.AddBuffer(0, g, job.FullBox(g), BufferRole::kScratch);
  *gate.add_outputs() = TestJob::Operand(gb);
  const int third = job.AddStep(gate);
  // Token t's two experts' slots (slot s holds token dispatch[s]).
  v1::Step combine;
  combine.set_op(v1::Step::OP_COMPUTE);
  v1::GatherAttrs* cg = combine.mutable_compute()->mutable_gather();
  cg->set_row(hidden);
  cg->set_k(k);
  for (int64_t i : {0, 7, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1}) cg->add_index(i);
  *combine.add_inputs() = TestJob::Operand(hb);
  *combine.add_inputs() = TestJob::Operand(gb);
  *combine.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, y, job.FullBox(y), BufferRole::kDestination));
  combine.add_deps(second);
  combine.add_deps(third);
  job.AddStep(combine);
}

TEST(CollectivesTest, MoeDispatchReluGateCombineOnOneDevice) {
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("moe-", DTypeName(dtype)));
    AddMoeChain(job, dtype);
    // D (8 x 7, of which 8 x 5 gathered; its two outer columns nothing
    // writes: zeros, as its ZEROS initializer says) and Y (6 x 5).
    ExpectAllVerified(RunTestJob(job, SmallChunks()), 8 * 7 + 6 * 5);
  }
}

// Attention on one device through the engine's compute step, in every
// float dtype: 4 heads on 2 kv heads, 6 query rows at positions -1, 0, 1,
// 2, 10, 11, a causal block against keys 0-3 from an empty state, then a
// block against keys 8-12 in place on the state (the state's buffer is
// the whole operand: S' aliases S), then the finish. The query at -1 keeps
// the empty state (m = -inf, verified exactly) and gets O = 0. The state
// and O are destinations.
TEST(CollectivesTest, AttentionBlocksThenFinishOnOneDevice) {
  const int64_t heads = 4, n = 6, d = 8;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("attention-", DTypeName(dtype)));
    const int q = job.AddTensor({{1, heads, n, d}, dtype});
    job.SetInitializer(q, Random(31));
    const int state = job.AddTensor({{1, heads, n, d + 2}, dtype});
    v1::Initializer zeros;
    zeros.set_kind(v1::Initializer::KIND_ZEROS);
    job.SetInitializer(state, zeros);
    const int o = job.AddTensor({{1, heads, n, d}, dtype});
    const int qb = job.AddBuffer(0, q, job.FullBox(q), BufferRole::kSource);
    const int sb =
        job.AddBuffer(0, state, job.FullBox(state), BufferRole::kDestination);
    int previous = -1;
    for (const std::vector<int64_t>& keys :
         {std::vector<int64_t>{0, 1, 2, 3},
          std::vector<int64_t>{8, 9, 10, 11, 12}}) {
      const int64_t rows = static_cast<int64_t>(keys.size());
      const int k = job.AddTensor({{1, 2, rows, d}, dtype});
      const int v = job.AddTensor({{1, 2, rows, d}, dtype});
      job.SetInitializer(k, Random(32 + k));
      job.SetInitializer(v, Random(32 + v));
      v1::Step block;
      block.set_op(v1::Step::OP_COMPUTE);
      v1::AttentionBlockAttrs* a =
          block.mutable_compute()->mutable_attention_block();
      a->set_batch(1);
      a->set_heads(heads);
      a->set_kv_heads(2);
      a->set_q_rows(n);
      a->set_kv_rows(rows);
      a->set_head_dim(d);
      a->set_causal(true);
      for (int64_t p : {-1, 0, 1, 2, 10, 11}) a->add_q_position(p);
      for (int64_t p : keys) a->add_kv_position(p);
      *block.add_inputs() = TestJob::Operand(qb);
      *block.add_inputs() = TestJob::Operand(
          job.AddBuffer(0, k, job.FullBox(k), BufferRole::kSource));
      *block.add_inputs() = TestJob::Operand(
          job.AddBuffer(0, v, job.FullBox(v), BufferRole::kSource));
      if (previous >= 0) {
        *block.add_inputs() = TestJob::Operand(sb);
        block.add_deps(previous);
      }
      *block.add_outputs() = TestJob::Operand(sb);
      previous = job.AddStep(block);
    }
    v1::Step finish;
    finish.set_op(v1::Step::OP_COMPUTE);
    finish.mutable_compute()->mutable_attention_finish()->set_head_dim(d);
    *finish.add_inputs() = TestJob::Operand(sb);
    *finish.add_outputs() = TestJob::Operand(
        job.AddBuffer(0, o, job.FullBox(o), BufferRole::kDestination));
    finish.add_deps(previous);
    job.AddStep(finish);
    ExpectAllVerified(RunTestJob(job, SmallChunks()),
                      heads * n * (d + 2) + heads * n * d);
  }
}

// The check can fail: with D's initializer left PATTERN, the two columns
// of D's buffer that the dispatch does not write (zeros, as every computed
// destination starts) differ from the reference there, and only those: the
// 40 gathered elements and the combine still verify.
TEST(CollectivesTest, ElementsAGatherDoesNotWriteAreMismatches) {
  TestJob job(1, 1);
  AddMoeChain(job, DType::kFloat32, /*zero_slots=*/false);
  const TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok) << outcome.results[0].status();
  EXPECT_EQ(outcome.elements_verified, 8 * 7 + 6 * 5);
  EXPECT_EQ(outcome.mismatches, 8 * 2);
}

// Default chunks (1 MiB) and pieces of several chunks each: 4 MiB per rank.
TEST(CollectivesTest, AllReduceOfMegabytesWithDefaultChunks) {
  TestJob job(2, 2);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1, 2, 3}, {1 << 20},
               DType::kFloat32, v1::REDUCTION_SUM, Random(17));
  ExpectAllVerified(RunTestJob(job, ExecutorOptions()), 4 << 20);
}

// An abort in the middle of a ring phase ends both workers promptly: the
// kernel checks before every chunk, the peer's waits fail with the closed
// connections.
TEST(CollectivesTest, AbortDuringAnAllReduceEndsBothWorkersPromptly) {
  TestJob job(2, 1);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1}, {1 << 20},
               DType::kFloat32, v1::REDUCTION_SUM, Random(19));
  std::vector<ParsedProgram> programs;
  for (int w = 0; w < 2; ++w) {
    auto program = ParseProgram(job.ProgramFor(w));
    ASSERT_TRUE(program.ok()) << program.status();
    programs.push_back(*std::move(program));
  }
  InMemoryKvStore kv;
  std::unique_ptr<GlooCommunicator> comms[2];
  std::thread connect0([&] {
    comms[0] = *GlooCommunicator::Create(kv, "slow-ar/", 0, 2, GlooOptions());
  });
  comms[1] = *GlooCommunicator::Create(kv, "slow-ar/", 1, 2, GlooOptions());
  connect0.join();

  ExecutorOptions options;
  options.relay.chunk_bytes = 16 << 10;  // 128 chunks a phase
  options.slicing.bytes = 8 << 20;       // local work: one slice
  std::atomic<int> chunks{0};
  options.slicing.before_slice = [&] {
    ++chunks;
    absl::SleepFor(absl::Milliseconds(20));
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
  absl::SleepFor(absl::Milliseconds(1000));
  const absl::Time aborted = absl::Now();
  executors[1].Abort("cancelled by user");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled)
      << results[1].status();
  EXPECT_FALSE(results[0].ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_LT(ended[w] - aborted, absl::Seconds(3)) << "worker " << w;
  }
  // Two phases of 128 chunks on each worker were not all run.
  EXPECT_LT(chunks.load(), 2 * 2 * 128);
}

// The memory check counts a collective's staging besides its tiles.
TEST(CollectivesTest, StagingCountsInTheMemoryCheck) {
  TestJob job(2, 1);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1}, {1000}, DType::kFloat32,
               v1::REDUCTION_SUM, Random(1));
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->steps.size(), 1u);
  // Accumulator, scratch and two ring buffers of one 4000-byte row.
  EXPECT_EQ(CollectiveStagingBytes(program->steps[0], *program), 16000);
  const HostMemoryNeed need =
      HostMemoryNeedOf(*program, RelayOptions(), /*max_concurrent_steps=*/4);
  EXPECT_EQ(need.tile_bytes, 4000 + 4000);
  EXPECT_EQ(need.staging_bytes, 16000);
}

// A moved tensor with the random initializer is checked bit for bit, and
// rows that were never sent are mismatches.
TEST(VerificationTest, MovedRandomDataIsCheckedBitForBit) {
  TestJob job(2, 1);
  const int t = job.AddTensor({{8, 16}, DType::kBFloat16});
  job.SetInitializer(t, Random(42));
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, {{0, 6}, {0, 16}}, {0, 1});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.elements_verified, 8 * 16);
  EXPECT_EQ(outcome.mismatches, 2 * 16);
}

TEST(VerificationTest, SampleChecksAFixedSubsetAndOffChecksNothing) {
  for (v1::VerifyMode mode : {v1::VERIFY_MODE_SAMPLE, v1::VERIFY_MODE_OFF}) {
    SCOPED_TRACE(v1::VerifyMode_Name(mode));
    TestJob job(2, 1);
    const int t = job.AddTensor({{100, 100}, DType::kFloat32});
    job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
    job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
    // Half the rows: a sample must find mismatches in the other half.
    job.AddTransfer(t, {{0, 50}, {0, 100}}, {0, 1});
    job.set_verify(mode);
    TestJobOutcome outcome = RunTestJob(job, ExecutorOptions());
    ASSERT_TRUE(outcome.all_ok);
    if (mode == v1::VERIFY_MODE_OFF) {
      EXPECT_EQ(outcome.elements_verified, 0);
      EXPECT_EQ(outcome.mismatches, 0);
    } else {
      EXPECT_EQ(outcome.elements_verified, kSampledElements);
      // Equal strides over the tile: half of them in the unsent half.
      EXPECT_EQ(outcome.mismatches, kSampledElements / 2);
    }
  }
}

TEST(TimelineTest, EveryStepHasItsStartEndAndDevice) {
  TestJob job(2, 2);
  const int t = job.AddTensor({{64, 33}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d = 1; d < 4; ++d) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  const int first = job.AddTransfer(t, job.FullBox(t), {0, 2});
  job.AddTransfer(t, job.FullBox(t), {2, 3, 1}, {first}, 1);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, 3 * 64 * 33);
  const v1::JobResult& result = *outcome.results[1];
  ASSERT_EQ(result.steps_size(), 2);
  EXPECT_EQ(result.steps(0).device(), 2);
  EXPECT_EQ(result.steps(1).device(), 2);
  for (const v1::StepResult& step : result.steps()) {
    EXPECT_GE(step.start_seconds(), 0);
    EXPECT_LE(step.start_seconds(), step.end_seconds());
    EXPECT_NEAR(step.seconds(), step.end_seconds() - step.start_seconds(),
                1e-9);
  }
  // The second step depends on the first: it starts after it ended.
  EXPECT_GE(result.steps(1).start_seconds(), result.steps(0).end_seconds());
  EXPECT_EQ(outcome.results[0]->steps(1).device(), 1);
}

// A step reports the CPU time its thread used: a GEMM's is positive and,
// on one thread, no more than its span.
TEST(TimelineTest, AComputeStepReportsTheCpuItsThreadUsed) {
  TestJob job(1, 1);
  const int64_t size = 192;
  const int a = job.AddTensor({{size, size}, DType::kFloat32});
  const int c = job.AddTensor({{size, size}, DType::kFloat32});
  job.SetInitializer(a, Random(3));
  v1::Step gemm;
  gemm.set_op(v1::Step::OP_COMPUTE);
  gemm.set_device(0);
  v1::GemmAttrs* attrs = gemm.mutable_compute()->mutable_gemm();
  attrs->set_m(size);
  attrs->set_n(size);
  attrs->set_k(size);
  const int input = job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource);
  *gemm.add_inputs() = TestJob::Operand(input);
  *gemm.add_inputs() = TestJob::Operand(input);
  *gemm.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, c, job.FullBox(c), BufferRole::kDestination));
  job.AddStep(gemm);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ExpectAllVerified(outcome, size * size);
  ASSERT_EQ(outcome.results[0]->steps_size(), 1);
  const v1::StepResult& step = outcome.results[0]->steps(0);
  EXPECT_GT(step.cpu_seconds(), 0);
  EXPECT_LE(step.cpu_seconds(), step.seconds() + 1e-4);
}

// A chain of dependent steps reuses one thread; independent ones get one
// each, up to the program's width.
TEST(SchedulerTest, ThePoolGrowsOnlyToTheDagWidth) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{40, 4}, DType::kInt32});
  const int from = job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  const int to = job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  int previous = -1;
  for (int row = 0; row < 40; ++row) {
    v1::Step step;
    step.set_op(v1::Step::OP_LOCAL_COPY);
    *step.add_inputs() = TestJob::Operand(from, {{row, row + 1}, {0, 4}});
    *step.add_outputs() = TestJob::Operand(to, {{row, row + 1}, {0, 4}});
    if (previous >= 0) step.add_deps(previous);
    previous = job.AddStep(step);
  }
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  Executor executor{ExecutorOptions()};
  absl::StatusOr<v1::JobResult> result = executor.Run(*program, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->mismatches(), 0);
  EXPECT_EQ(result->elements_verified(), 160);
  EXPECT_EQ(result->steps_size(), 40);
  EXPECT_EQ(executor.peak_threads(), 1);
}

TEST(SchedulerTest, AStepOfAnOpWithoutAKernelFailsUnimplemented) {
  TestJob job(1, 1);
  const int t = job.AddTensor({{4}, DType::kInt32});
  const int b = job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  v1::Step step;
  step.set_op(v1::Step::OP_LOCAL_COPY);
  *step.add_inputs() = TestJob::Operand(b);
  *step.add_outputs() = TestJob::Operand(b);
  job.AddStep(step);
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  program->steps[0].op = static_cast<v1::Step::Op>(99);
  Executor executor{ExecutorOptions()};
  absl::StatusOr<v1::JobResult> result = executor.Run(*program, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(result.status().message().find("\"cpu\""), std::string::npos)
      << result.status();
}

}  // namespace
}  // namespace meshcast::worker
