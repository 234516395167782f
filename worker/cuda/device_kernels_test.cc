// The GPU backend's kernel table and every op's GPU kernel, each checked by
// the executor's verification against the host's reference (computed
// tensors: worker/kernels/reference.h within the dtype's tolerance; moved
// ones bit for bit): collectives on virtual devices of one GPU
// (cuda:0xN), GEMM against the reference with its tolerance, elementwise
// ops (relu, sigmoid and their gradients included), the weighted row
// gather, the row dot, attention (blocks and finish), initializer bits
// against the host BufferSet's, the GEMM -> reduce-scatter DAG, and, on a
// machine with two GPUs, every collective across two workers over NCCL.
// The attention backward, which the reference does not model, is checked
// against the host kernel (attention.h RunAttentionBackward) on the same
// input bytes. The table test runs everywhere; the rest skip without a GPU
// (two GPUs for the last).
#include "worker/cuda/device_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_executor.h"
#include "worker/cuda/device_pattern.h"
#include "worker/in_memory_kv_store.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/element_core.h"
#include "worker/pattern.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker::cuda {
namespace {

using testing::TestJob;

TEST(CudaKernelTableTest, EveryOpOfTheIrHasAKernel) {
  for (int op = v1::Step::Op_MIN; op <= v1::Step::Op_MAX; ++op) {
    if (!v1::Step::Op_IsValid(op) || op == v1::Step::OP_UNSPECIFIED) continue;
    auto kernel = CudaKernels().Find(static_cast<v1::Step::Op>(op));
    EXPECT_TRUE(kernel.ok()) << v1::Step::Op_Name(
        static_cast<v1::Step::Op>(op));
  }
  auto none = CudaKernels().Find(v1::Step::OP_UNSPECIFIED);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(none.status().message().find("backend \"cuda\""),
            std::string::npos)
      << none.status();
  DeviceKernelTable table;
  const DeviceStepKernel ok = [](const StepDesc&, const DeviceRelayEnvironment&,
                                 const DeviceLane&,
                                 absl::Span<const cudaEvent_t>,
                                 const StepEvents&) {
    return absl::OkStatus();
  };
  ASSERT_TRUE(table.Register(v1::Step::OP_ALL_REDUCE, ok).ok());
  EXPECT_EQ(table.Register(v1::Step::OP_ALL_REDUCE, ok).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table.Register(v1::Step::OP_COMPUTE, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Find(v1::Step::OP_COMPUTE).status().code(),
            absl::StatusCode::kUnimplemented);
}

CudaBackendOptions Options() {
  CudaBackendOptions options;
  options.chunk_bytes = 1000;
  options.lanes = 3;
  options.rendezvous_timeout = absl::Seconds(30);
  options.op_timeout = absl::Seconds(30);
  return options;
}

absl::StatusOr<v1::JobResult> RunWorker(const TestJob& job, int w, int gpu,
                                        int devices, KvStore* kv = nullptr) {
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(w));
  if (!program.ok()) return program.status();
  DeviceSpec spec = *ParseDeviceSpec(absl::StrCat("cuda:", gpu, "x", devices));
  DeviceExecutor executor(spec, Options());
  return executor.Run(*program, kv);
}

void ExpectVerified(const absl::StatusOr<v1::JobResult>& result,
                    int64_t elements, double max_error = 0) {
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->mismatches(), 0);
  EXPECT_EQ(result->elements_verified(), elements);
  EXPECT_LE(result->max_abs_error(), max_error);
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

// IN = [n] + shape (row r on group[r]), OUT = shape: all of OUT on every
// rank (all-reduce) or chunk r along dim 0 (reduce-scatter).
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

// Shards along dim 0 gathered into a full copy on every rank.
void AddAllGather(TestJob& job, const std::vector<int>& group, DType dtype,
                  bool slices) {
  const int n = static_cast<int>(group.size());
  const std::vector<int64_t> shape = {10, 5};
  const int t = job.AddTensor({shape, dtype});
  job.SetInitializer(t, Random(9));
  v1::Step step;
  step.set_op(v1::Step::OP_ALL_GATHER);
  for (int r = 0; r < n; ++r) {
    const Box shard = TestJob::ShardBox(shape, 0, n, r);
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(group[r], t, shard, BufferRole::kSource),
        slices ? shard : Box{});
  }
  for (int r = 0; r < n; ++r) {
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(group[r], t, job.FullBox(t), BufferRole::kDestination));
  }
  job.AddStep(step, group);
}

// n x n counts with zeros and different sizes both ways; returns the
// elements of OUT.
int64_t AddAllToAll(TestJob& job, const std::vector<int>& group, DType dtype) {
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
  const int in = job.AddTensor({{total}, dtype});
  job.SetInitializer(in, Random(21));
  const int out = job.AddTensor({{total}, dtype});
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
  return total;
}

// Every rank r computes its partial product P[r] = A[r] B[r]; a
// reduce-scatter sums them and leaves chunk r of OUT on rank r.
int64_t AddGemmThenReduceScatter(TestJob& job, int n, DType dtype) {
  const int64_t m = 6, k = 7, cols = 5;
  const int a = job.AddTensor({{n, m, k}, dtype});
  const int b = job.AddTensor({{n, k, cols}, dtype});
  const int p = job.AddTensor({{n, m, cols}, dtype});
  const int out = job.AddTensor({{m, cols}, dtype});
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
  return n * m * cols + m * cols;
}

const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

class DeviceKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount reports none); "
                      "GPU kernels not tested";
    }
  }
};

TEST_F(DeviceKernelsTest, AllReduceInEveryDTypeAndBothReductions) {
  for (DType dtype : kAllTypes) {
    for (v1::Reduction reduction : {v1::REDUCTION_SUM, v1::REDUCTION_MAX}) {
      SCOPED_TRACE(
          absl::StrCat(DTypeName(dtype), " ", v1::Reduction_Name(reduction)));
      TestJob job(1, 3, absl::StrCat("ar-", DTypeName(dtype), reduction));
      AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1, 2}, {5, 3}, dtype,
                   reduction, Random(11));
      ExpectVerified(RunWorker(job, 0, 0, 3), 3 * 15, /*max_error=*/0.05);
    }
  }
}

// 91 elements over 4 virtual devices, the group in a shuffled order.
TEST_F(DeviceKernelsTest, AllReduceUnevenLengthShuffledGroup) {
  TestJob job(1, 4);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {2, 0, 3, 1}, {13, 7},
               DType::kFloat32, v1::REDUCTION_SUM, Random(7));
  ExpectVerified(RunWorker(job, 0, 0, 4), 4 * 91, 1e-5);
}

TEST_F(DeviceKernelsTest, ReduceScatterUnevenChunks) {
  TestJob job(1, 4);
  // 10 rows over 4 ranks: chunks of 3, 3, 3 and 1 rows.
  AddReduction(job, v1::Step::OP_REDUCE_SCATTER, {0, 1, 2, 3}, {10, 3},
               DType::kBFloat16, v1::REDUCTION_SUM, Random(5));
  ExpectVerified(RunWorker(job, 0, 0, 4), 30, 0.05);
}

TEST_F(DeviceKernelsTest, ReduceScatterWithAnEmptyChunkAndMax) {
  TestJob job(1, 4);
  AddReduction(job, v1::Step::OP_REDUCE_SCATTER, {0, 1, 2, 3}, {3, 2},
               DType::kInt32, v1::REDUCTION_MAX, v1::Initializer());
  ExpectVerified(RunWorker(job, 0, 0, 4), 6);
}

TEST_F(DeviceKernelsTest, AllGatherUnevenShards) {
  for (DType dtype : {DType::kInt8, DType::kBFloat16, DType::kFloat64}) {
    for (bool slices : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), slices ? " slices" : ""));
      TestJob job(1, 4, absl::StrCat("ag-", DTypeName(dtype), slices));
      AddAllGather(job, {0, 1, 2, 3}, dtype, slices);
      ExpectVerified(RunWorker(job, 0, 0, 4), 4 * 50);
    }
  }
}

TEST_F(DeviceKernelsTest, AllToAllUnevenCounts) {
  for (const std::vector<int>& group :
       {std::vector<int>{0, 1, 2, 3}, std::vector<int>{2, 0, 3, 1}}) {
    TestJob job(1, 4);
    const int64_t total = AddAllToAll(job, group, DType::kFloat16);
    ExpectVerified(RunWorker(job, 0, 0, 4), total);
  }
}

// The operands of an all-to-all may be whole buffers of tensors every rank
// holds in full (MoE's S1 and S2 schedules do this): rank r's part is then
// found by the counts, in tensor coordinates (test_job.h).
TEST_F(DeviceKernelsTest, AllToAllBetweenWholeBuffers) {
  for (const std::vector<int>& group :
       {std::vector<int>{0, 1, 2, 3}, std::vector<int>{2, 0, 3, 1}}) {
    TestJob job(1, 4);
    const int64_t total = testing::AddWholeBufferAllToAll(job, group);
    ExpectVerified(RunWorker(job, 0, 0, 4), total);
  }
}

v1::Step OperandSendRecv(int from, const Box& from_region, int to,
                         const Box& to_region) {
  v1::Step step;
  step.set_op(v1::Step::OP_SEND_RECV);
  *step.add_inputs() = TestJob::Operand(from, from_region);
  *step.add_outputs() = TestJob::Operand(to, to_region);
  return step;
}

// The operand form of OP_SEND_RECV (a copy between regions of different
// shapes, element e to element e in row-major order) between virtual
// devices: Z [24, 18] from two strided blocks of X [30, 20] (both sides
// strided: staged; then a contiguous input: unpacked straight from it), W
// [12, 5] whole from a strided block (packed straight into W), and V [4,
// 15] back from a tile of X that does not start at its origin. Every
// destination element is checked against the reference (the copies define
// Z, W and V).
TEST_F(DeviceKernelsTest, OperandCopiesBetweenRegions) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 2);
    const int x = job.AddTensor({{30, 20}, dtype});
    job.SetInitializer(x, Random(7));
    const int z = job.AddTensor({{24, 18}, dtype});
    const int w = job.AddTensor({{12, 5}, dtype});
    const int v = job.AddTensor({{4, 15}, dtype});
    const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
    const int to_z =
        job.AddBuffer(1, z, job.FullBox(z), BufferRole::kDestination);
    const int to_w =
        job.AddBuffer(1, w, job.FullBox(w), BufferRole::kDestination);
    const int to_v =
        job.AddBuffer(0, v, job.FullBox(v), BufferRole::kDestination);
    job.AddStep(
        OperandSendRecv(from, {{2, 26}, {3, 11}}, to_z, {{0, 24}, {0, 8}}),
        {0, 1});
    job.AddStep(
        OperandSendRecv(from, {{0, 12}, {0, 20}}, to_z, {{0, 24}, {8, 18}}),
        {0, 1});
    job.AddStep(OperandSendRecv(from, {{5, 17}, {10, 15}}, to_w, {}), {0, 1});
    // Back from device 1, out of a tile that starts at row 10.
    const int lower = job.AddBuffer(1, x, {{10, 30}, {0, 20}},
                                    BufferRole::kSource);
    job.AddStep(OperandSendRecv(lower, {{20, 26}, {0, 10}}, to_v, {}),
                {1, 0});
    ExpectVerified(RunWorker(job, 0, 0, 2), 24 * 18 + 12 * 5 + 4 * 15);
  }
}

// Only the copied rows hold the pattern; the rest stay poisoned, which
// verification must count.
TEST_F(DeviceKernelsTest, LocalCopyOfASlice) {
  TestJob job(1, 2);
  const int t = job.AddTensor({{10, 6}, DType::kInt32});
  const int from = job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  const int to = job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  v1::Step step;
  step.set_op(v1::Step::OP_LOCAL_COPY);
  *step.add_inputs() = TestJob::Operand(from, {{2, 7}, {0, 6}});
  *step.add_outputs() = TestJob::Operand(to, {{2, 7}, {0, 6}});
  job.AddStep(step);
  auto result = RunWorker(job, 0, 0, 2);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->elements_verified(), 60);
  EXPECT_EQ(result->mismatches(), 5 * 6);
}

// The check can fail: device 2 holds a destination of the all-reduce's
// output but is not in the group, so nothing writes it.
TEST_F(DeviceKernelsTest, AComputedDestinationNobodyWroteIsAMismatch) {
  TestJob job(1, 3);
  AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 1}, {4, 4}, DType::kFloat32,
               v1::REDUCTION_SUM, Random(2));
  job.AddBuffer(2, 1, job.FullBox(1), BufferRole::kDestination);
  auto result = RunWorker(job, 0, 0, 3);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->elements_verified(), 3 * 16);
  EXPECT_EQ(result->mismatches(), 16);
  EXPECT_GT(result->max_abs_error(), 0);
}

// C = alpha op(A) op(B) (+ C) with cuBLAS in every float dtype, both
// transposes, against the reference within the dtype's tolerance;
// operands are slices of larger buffers (packed and unpacked).
TEST_F(DeviceKernelsTest, GemmAgainstTheReference) {
  const int64_t m = 9, n = 7, k = 33;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                      DType::kFloat64}) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      const bool ta = transposes & 1, tb = transposes & 2;
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " trans_a=", ta,
                                " trans_b=", tb));
      TestJob job(1, 1, absl::StrCat("gemm-", DTypeName(dtype), transposes));
      // A and B live in buffers two columns wider than the operand.
      const std::vector<int64_t> a_shape =
          ta ? std::vector<int64_t>{k, m + 2} : std::vector<int64_t>{m, k + 2};
      const std::vector<int64_t> b_shape =
          tb ? std::vector<int64_t>{n, k + 2} : std::vector<int64_t>{k, n + 2};
      const int a = job.AddTensor({a_shape, dtype});
      const int b = job.AddTensor({b_shape, dtype});
      const int c = job.AddTensor({{m, n}, dtype});
      job.SetInitializer(a, Random(31));
      job.SetInitializer(b, Random(32));
      v1::Step gemm;
      gemm.set_op(v1::Step::OP_COMPUTE);
      gemm.set_device(0);
      v1::GemmAttrs* attrs = gemm.mutable_compute()->mutable_gemm();
      attrs->set_m(m);
      attrs->set_n(n);
      attrs->set_k(k);
      attrs->set_trans_a(ta);
      attrs->set_trans_b(tb);
      attrs->set_alpha(0.75);
      *gemm.add_inputs() = TestJob::Operand(
          job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource),
          {{0, a_shape[0]}, {1, a_shape[1] - 1}});
      *gemm.add_inputs() = TestJob::Operand(
          job.AddBuffer(0, b, job.FullBox(b), BufferRole::kSource),
          {{0, b_shape[0]}, {1, b_shape[1] - 1}});
      *gemm.add_outputs() = TestJob::Operand(
          job.AddBuffer(0, c, job.FullBox(c), BufferRole::kDestination));
      job.AddStep(gemm);
      // max_abs_error: the reference's tolerance bounds each element; the
      // values are products of k terms in [-1, 1).
      ExpectVerified(RunWorker(job, 0, 0, 1), m * n, 0.75 * k);
    }
  }
}

TEST_F(DeviceKernelsTest, ElementwiseAddThenScale) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("ew-", DTypeName(dtype)));
    const int x = job.AddTensor({{4, 5}, dtype});
    const int y = job.AddTensor({{4, 5}, dtype});
    const int sum = job.AddTensor({{4, 5}, dtype});
    const int scaled = job.AddTensor({{4, 5}, dtype});
    job.SetInitializer(x, Random(4));
    job.SetInitializer(y, Random(5));
    v1::Step add;
    add.set_op(v1::Step::OP_COMPUTE);
    add.set_device(0);
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
    scale.set_device(0);
    scale.mutable_compute()->mutable_elementwise()->set_kind(
        v1::ElementwiseAttrs::KIND_SCALE);
    scale.mutable_compute()->mutable_elementwise()->set_alpha(-0.5);
    *scale.add_inputs() = TestJob::Operand(sum_buffer);
    *scale.add_outputs() = TestJob::Operand(job.AddBuffer(
        0, scaled, job.FullBox(scaled), BufferRole::kDestination));
    scale.add_deps(first);
    job.AddStep(scale);
    ExpectVerified(RunWorker(job, 0, 0, 1), 20, 0.01);
  }
}

// RELU and SIGMOID of one random input in every float dtype, against the
// reference (relu exact; sigmoid within its 4 terms).
TEST_F(DeviceKernelsTest, ReluAndSigmoid) {
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("act-", DTypeName(dtype)));
    const int x = job.AddTensor({{6, 7}, dtype});
    const int r = job.AddTensor({{6, 7}, dtype});
    const int s = job.AddTensor({{42}, dtype});
    job.SetInitializer(x, Random(8));
    const int xb = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
    for (auto [kind, out] :
         {std::pair{v1::ElementwiseAttrs::KIND_RELU, r},
          std::pair{v1::ElementwiseAttrs::KIND_SIGMOID, s}}) {
      v1::Step step;
      step.set_op(v1::Step::OP_COMPUTE);
      step.set_device(0);
      step.mutable_compute()->mutable_elementwise()->set_kind(kind);
      *step.add_inputs() = TestJob::Operand(xb);
      *step.add_outputs() = TestJob::Operand(
          job.AddBuffer(0, out, job.FullBox(out), BufferRole::kDestination));
      job.AddStep(step);
    }
    ExpectVerified(RunWorker(job, 0, 0, 1), 2 * 42, 0.01);
  }
}

// A weighted gather-sum (k = 3, some -1 indices) in every float dtype,
// with X a slice of a wider buffer (packed first), against the reference;
// then int8 row copies (k = 1, no W) that must be exact: a permutation
// with a -1 row, and a second one in place on its output.
TEST_F(DeviceKernelsTest, GatherWithWeightsAgainstTheReference) {
  const int64_t rows_x = 7, row = 6, rows_y = 5, k = 3;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("gather-", DTypeName(dtype)));
    const int x = job.AddTensor({{rows_x, row + 2}, dtype});
    const int w = job.AddTensor({{rows_y, k}, dtype});
    const int y = job.AddTensor({{rows_y, row}, dtype});
    job.SetInitializer(x, Random(41));
    job.SetInitializer(w, Random(42));
    v1::Step step;
    step.set_op(v1::Step::OP_COMPUTE);
    step.set_device(0);
    v1::GatherAttrs* g = step.mutable_compute()->mutable_gather();
    g->set_row(row);
    g->set_k(k);
    for (int64_t e = 0; e < rows_y * k; ++e) {
      g->add_index(e % 4 == 1 ? -1 : (e * 3 + 1) % rows_x);
    }
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource),
        {{0, rows_x}, {1, row + 1}});
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(0, w, job.FullBox(w), BufferRole::kSource));
    *step.add_outputs() = TestJob::Operand(
        job.AddBuffer(0, y, job.FullBox(y), BufferRole::kDestination));
    job.AddStep(step);
    // Sums of k products of magnitude < 1.
    ExpectVerified(RunWorker(job, 0, 0, 1), rows_y * row, 0.05);
  }
  TestJob job(1, 1, "gather-int8");
  const int x = job.AddTensor({{rows_x, row}, DType::kInt8});
  const int y = job.AddTensor({{rows_x, row}, DType::kInt8});
  job.SetInitializer(x, Random(43));
  const int xb = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
  const int yb = job.AddBuffer(0, y, job.FullBox(y), BufferRole::kDestination);
  v1::Step permute;
  permute.set_op(v1::Step::OP_COMPUTE);
  permute.set_device(0);
  v1::GatherAttrs* g = permute.mutable_compute()->mutable_gather();
  g->set_row(row);
  for (int64_t i : {6, 5, -1, 0, 1, 2, 2}) g->add_index(i);
  *permute.add_inputs() = TestJob::Operand(xb);
  *permute.add_outputs() = TestJob::Operand(yb);
  const int first = job.AddStep(permute);
  // Y permuted again in place: reads Y as it was before the step.
  v1::Step again = permute;
  again.clear_inputs();
  *again.add_inputs() = TestJob::Operand(yb);
  again.add_deps(first);
  job.AddStep(again);
  ExpectVerified(RunWorker(job, 0, 0, 1), rows_x * row, 0);
}

// The backward ops in every float dtype against the reference: RELU_GRAD
// and SIGMOID_GRAD of a random gradient G with H = relu(X) and S =
// sigmoid(X) computed on the GPU first, and a row dot of G's rows with a
// slice of X's (packed first), some pairs -1; then a row dot in place on
// one of its inputs (staged), which must read the old rows.
TEST_F(DeviceKernelsTest, GradientsAndRowDotAgainstTheReference) {
  const int64_t rows = 6, row = 7;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("grad-", DTypeName(dtype)));
    const int x = job.AddTensor({{rows, row + 2}, dtype});
    const int g = job.AddTensor({{rows, row}, dtype});
    const int h = job.AddTensor({{rows, row}, dtype});
    const int s = job.AddTensor({{rows, row}, dtype});
    const int dh = job.AddTensor({{rows, row}, dtype});
    const int ds = job.AddTensor({{rows, row}, dtype});
    const int dw = job.AddTensor({{5}, dtype});
    job.SetInitializer(x, Random(51));
    job.SetInitializer(g, Random(52));
    const int xb = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
    const Box x_slice = {{0, rows}, {1, row + 1}};
    const int gb = job.AddBuffer(0, g, job.FullBox(g), BufferRole::kSource);
    std::vector<int> firsts;
    int buffers[2];
    int which = 0;
    for (auto [kind, out] :
         {std::pair{v1::ElementwiseAttrs::KIND_RELU, h},
          std::pair{v1::ElementwiseAttrs::KIND_SIGMOID, s}}) {
      v1::Step step;
      step.set_op(v1::Step::OP_COMPUTE);
      step.set_device(0);
      step.mutable_compute()->mutable_elementwise()->set_kind(kind);
      *step.add_inputs() = TestJob::Operand(xb, x_slice);
      buffers[which] =
          job.AddBuffer(0, out, job.FullBox(out), BufferRole::kDestination);
      *step.add_outputs() = TestJob::Operand(buffers[which++]);
      firsts.push_back(job.AddStep(step));
    }
    which = 0;
    for (auto [kind, out] :
         {std::pair{v1::ElementwiseAttrs::KIND_RELU_GRAD, dh},
          std::pair{v1::ElementwiseAttrs::KIND_SIGMOID_GRAD, ds}}) {
      v1::Step step;
      step.set_op(v1::Step::OP_COMPUTE);
      step.set_device(0);
      step.mutable_compute()->mutable_elementwise()->set_kind(kind);
      *step.add_inputs() = TestJob::Operand(gb);
      *step.add_inputs() = TestJob::Operand(buffers[which]);
      *step.add_outputs() = TestJob::Operand(
          job.AddBuffer(0, out, job.FullBox(out), BufferRole::kDestination));
      step.add_deps(firsts[which++]);
      job.AddStep(step);
    }
    v1::Step dot;
    dot.set_op(v1::Step::OP_COMPUTE);
    dot.set_device(0);
    v1::RowDotAttrs* r = dot.mutable_compute()->mutable_row_dot();
    r->set_row(row);
    for (int64_t i : {0, 0, 5, 1, -1, 2, 3, -1, 2, 4}) r->add_index(i);
    *dot.add_inputs() = TestJob::Operand(gb);
    *dot.add_inputs() = TestJob::Operand(xb, x_slice);
    *dot.add_outputs() = TestJob::Operand(
        job.AddBuffer(0, dw, job.FullBox(dw), BufferRole::kDestination));
    job.AddStep(dot);
    // 4 outputs of rows * row elements and the row dot's 5; sums of `row`
    // products of magnitude < 1.
    ExpectVerified(RunWorker(job, 0, 0, 1), 4 * rows * row + 5, 0.05);
  }
  // In place (float32): Y = a copy of A (SCALE by 1), then Y's first row
  // replaced by [Y0 . Y1, Y1 . Y1, 0] read from Y itself, as it was
  // before the step.
  TestJob job(1, 1, "row-dot-in-place");
  const int a = job.AddTensor({{3, 4}, DType::kFloat32});
  const int y = job.AddTensor({{3, 4}, DType::kFloat32});
  job.SetInitializer(a, Random(53));
  const int ab = job.AddBuffer(0, a, job.FullBox(a), BufferRole::kSource);
  const int yb = job.AddBuffer(0, y, job.FullBox(y), BufferRole::kDestination);
  v1::Step copy;
  copy.set_op(v1::Step::OP_COMPUTE);
  copy.set_device(0);
  copy.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_SCALE);
  copy.mutable_compute()->mutable_elementwise()->set_alpha(1.0);
  *copy.add_inputs() = TestJob::Operand(ab);
  *copy.add_outputs() = TestJob::Operand(yb);
  const int first = job.AddStep(copy);
  v1::Step dot;
  dot.set_op(v1::Step::OP_COMPUTE);
  dot.set_device(0);
  v1::RowDotAttrs* r = dot.mutable_compute()->mutable_row_dot();
  r->set_row(4);
  for (int64_t i : {0, 1, 1, 1, -1, 0}) r->add_index(i);
  *dot.add_inputs() = TestJob::Operand(yb);
  *dot.add_inputs() = TestJob::Operand(yb);
  *dot.add_outputs() = TestJob::Operand(yb, {{0, 1}, {0, 3}});
  dot.add_deps(first);
  job.AddStep(dot);
  ExpectVerified(RunWorker(job, 0, 0, 1), 12, 0.05);
}

// Attention in every float dtype against the reference (4 heads on 2 kv
// heads, 6 query rows, head_dim 8): a causal chain whose first block has
// 300 keys (two 256-key chunks) at positions 0-299 and whose queries sit
// at -1 (every key masked: the empty state, m = -inf, verified exactly, and
// O = 0), 5, 100, 260, 299 and 400, then a block of 7 keys at 300-306 on
// the state, then the finish; the state is a strided slice of its buffer
// (columns 1 to head_dim + 2 of head_dim + 4: packed, staged, unpacked).
// Then a non-causal chain whose state is its whole buffer, updated in
// place (S' is S). Both states and outputs are destinations; an l of up to
// ~300 in bfloat16 errs by up to about 1, hence the loose max_error.
// An attention_block step on device 0 (inputs and outputs left to the
// caller).
v1::Step AttentionBlockStep(int64_t heads, int64_t kv_heads, int64_t q_rows,
                            int64_t kv_rows, int64_t d, bool causal) {
  v1::Step block;
  block.set_op(v1::Step::OP_COMPUTE);
  block.set_device(0);
  v1::AttentionBlockAttrs* a =
      block.mutable_compute()->mutable_attention_block();
  a->set_batch(1);
  a->set_heads(heads);
  a->set_kv_heads(kv_heads);
  a->set_q_rows(q_rows);
  a->set_kv_rows(kv_rows);
  a->set_head_dim(d);
  a->set_causal(causal);
  return block;
}

// The attention_finish step of the state `state_buffer` (its `slice`)
// into tensor `out`, after step `previous`.
void AddAttentionFinish(TestJob& job, int state_buffer, const Box& slice,
                        int out, int64_t d, int previous) {
  v1::Step finish;
  finish.set_op(v1::Step::OP_COMPUTE);
  finish.set_device(0);
  finish.mutable_compute()->mutable_attention_finish()->set_head_dim(d);
  *finish.add_inputs() = TestJob::Operand(state_buffer, slice);
  *finish.add_outputs() = TestJob::Operand(
      job.AddBuffer(0, out, job.FullBox(out), BufferRole::kDestination));
  finish.add_deps(previous);
  job.AddStep(finish);
}

TEST_F(DeviceKernelsTest, AttentionAgainstTheReference) {
  const int64_t heads = 4, n = 6, d = 8;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 1, absl::StrCat("attention-", DTypeName(dtype)));
    const int q = job.AddTensor({{1, heads, n, d}, dtype});
    job.SetInitializer(q, Random(61));
    const int qb = job.AddBuffer(0, q, job.FullBox(q), BufferRole::kSource);
    v1::Initializer zeros;
    zeros.set_kind(v1::Initializer::KIND_ZEROS);
    int64_t verified = 0;
    for (bool causal : {true, false}) {
      const int64_t width = causal ? d + 4 : d + 2;
      const int state = job.AddTensor({{1, heads, n, width}, dtype});
      job.SetInitializer(state, zeros);
      const int sb =
          job.AddBuffer(0, state, job.FullBox(state), BufferRole::kDestination);
      const Box slice = causal ? Box{{0, 1}, {0, heads}, {0, n}, {1, d + 3}}
                               : Box{};
      const int o = job.AddTensor({{1, heads, n, d}, dtype});
      int previous = -1;
      for (const auto& [rows, first] :
           {std::pair<int64_t, int64_t>{300, 0}, {7, 300}}) {
        const int k = job.AddTensor({{1, 2, rows, d}, dtype});
        const int v = job.AddTensor({{1, 2, rows, d}, dtype});
        job.SetInitializer(k, Random(62 + k));
        job.SetInitializer(v, Random(62 + v));
        v1::Step block = AttentionBlockStep(heads, 2, n, rows, d, causal);
        v1::AttentionBlockAttrs* a =
            block.mutable_compute()->mutable_attention_block();
        if (causal) {
          for (int64_t p : {-1, 5, 100, 260, 299, 400}) a->add_q_position(p);
          for (int64_t j = 0; j < rows; ++j) a->add_kv_position(first + j);
        }
        *block.add_inputs() = TestJob::Operand(qb);
        *block.add_inputs() = TestJob::Operand(
            job.AddBuffer(0, k, job.FullBox(k), BufferRole::kSource));
        *block.add_inputs() = TestJob::Operand(
            job.AddBuffer(0, v, job.FullBox(v), BufferRole::kSource));
        if (previous >= 0) {
          *block.add_inputs() = TestJob::Operand(sb, slice);
          block.add_deps(previous);
        }
        *block.add_outputs() = TestJob::Operand(sb, slice);
        previous = job.AddStep(block);
      }
      AddAttentionFinish(job, sb, slice, o, d, previous);
      verified += heads * n * width + heads * n * d;
    }
    ExpectVerified(RunWorker(job, 0, 0, 1), verified, 4.0);
  }
}

// The tiled kernel's shapes (compute_kernels.h): query rows over several
// 64-row tiles with a partial last one, keys over several 64-key tiles
// with a partial last one, grouped-query heads, head_dim not a multiple of
// 16 and the largest it takes (128), causal positions in zigzag order
// (whole key tiles masked for some query tiles, not for others), a chain
// of two blocks updated in place; and head_dim 130, which falls back to
// the row kernel. Every state and output element is verified by the
// executor against the float64 reference (its tolerance, 4 ulps of slack).
TEST_F(DeviceKernelsTest, TiledAttentionShapesAgainstTheReference) {
  struct Shape {
    int64_t heads, kv_heads, q_rows, kv_rows, d;
    bool causal;
  };
  const Shape shapes[] = {{4, 2, 150, 200, 72, true},
                          {2, 2, 64, 64, 128, false},
                          {2, 1, 70, 90, 130, true}};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " q_rows ", sh.q_rows,
                                " kv_rows ", sh.kv_rows, " head_dim ", sh.d,
                                sh.causal ? " causal" : ""));
      TestJob job(1, 1, absl::StrCat("tiled-attention-", DTypeName(dtype)));
      const int q = job.AddTensor({{1, sh.heads, sh.q_rows, sh.d}, dtype});
      job.SetInitializer(q, Random(71));
      const int qb = job.AddBuffer(0, q, job.FullBox(q), BufferRole::kSource);
      v1::Initializer zeros;
      zeros.set_kind(v1::Initializer::KIND_ZEROS);
      const int64_t width = sh.d + 2;
      const int state = job.AddTensor({{1, sh.heads, sh.q_rows, width}, dtype});
      job.SetInitializer(state, zeros);
      const int sb =
          job.AddBuffer(0, state, job.FullBox(state), BufferRole::kDestination);
      // Zigzag: query row i sits at position 2i or 2i + 1 alternately, the
      // keys of chunk c at c * kv_rows + j (the second chunk sees more).
      int previous = -1;
      for (int chunk = 0; chunk < 2; ++chunk) {
        const int k =
            job.AddTensor({{1, sh.kv_heads, sh.kv_rows, sh.d}, dtype});
        const int v =
            job.AddTensor({{1, sh.kv_heads, sh.kv_rows, sh.d}, dtype});
        job.SetInitializer(k, Random(72 + k));
        job.SetInitializer(v, Random(72 + v));
        v1::Step block = AttentionBlockStep(sh.heads, sh.kv_heads, sh.q_rows,
                                            sh.kv_rows, sh.d, sh.causal);
        v1::AttentionBlockAttrs* a =
            block.mutable_compute()->mutable_attention_block();
        if (sh.causal) {
          for (int64_t i = 0; i < sh.q_rows; ++i) {
            a->add_q_position(i < sh.q_rows / 2 ? 2 * i : 4 * i - sh.q_rows);
          }
          for (int64_t j = 0; j < sh.kv_rows; ++j) {
            a->add_kv_position(chunk * sh.kv_rows + j);
          }
        }
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
      const int o = job.AddTensor({{1, sh.heads, sh.q_rows, sh.d}, dtype});
      AddAttentionFinish(job, sb, Box{}, o, sh.d, previous);
      ExpectVerified(RunWorker(job, 0, 0, 1),
                     sh.heads * sh.q_rows * (width + sh.d), 4.0);
    }
  }
}

// Element e of `bytes` (dtype elements) as a double, and `value` rounded to
// the dtype into element e.
double ElementAt(DType dtype, const std::vector<uint8_t>& bytes, int64_t e) {
  const int size = DTypeSize(dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, bytes.data() + e * size, size);
  return CoreFloatValue(ToPatternType(dtype), bits);
}
void SetElement(DType dtype, std::vector<uint8_t>& bytes, int64_t e,
                double value) {
  const int size = DTypeSize(dtype);
  const uint64_t bits = CoreFloatStoreBits(ToPatternType(dtype), value);
  std::memcpy(bytes.data() + e * size, &bits, size);
}

// `n` elements uniform in [-1, 1), rounded to the dtype.
std::vector<uint8_t> RandomElements(DType dtype, int64_t n,
                                    std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<uint8_t> bytes(n * DTypeSize(dtype));
  for (int64_t e = 0; e < n; ++e) SetElement(dtype, bytes, e, uniform(rng));
  return bytes;
}

// Rows of `width` elements of a dense array to and from columns [first,
// first + width) of an array whose rows hold `full` elements.
void WidenRows(const std::vector<uint8_t>& dense, int64_t width, int64_t first,
               int64_t full, int size, std::vector<uint8_t>& wide) {
  const int64_t rows = static_cast<int64_t>(dense.size()) / (width * size);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(wide.data() + (r * full + first) * size,
                dense.data() + r * width * size, width * size);
  }
}
std::vector<uint8_t> NarrowRows(const std::vector<uint8_t>& wide, int64_t width,
                                int64_t first, int64_t full, int size) {
  const int64_t rows = static_cast<int64_t>(wide.size()) / (full * size);
  std::vector<uint8_t> dense(rows * width * size);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dense.data() + r * width * size,
                wide.data() + (r * full + first) * size, width * size);
  }
  return dense;
}

// The attention backward (AttentionBackwardAttrs) on the GPU against the
// host kernel RunAttentionBackward on the same input bytes, element by
// element: every float dtype, TARGET_DQ and TARGET_DKV, with and without
// accumulate, causal and not, GQA (4 heads on 2 kv heads, batch 2), in two
// shapes: 7 query rows against 300 keys (two 256-key chunks of the dQ
// kernel), head_dim 8, and 300 query rows (two chunks of the dK / dV
// kernel) against 7 keys, head_dim 130 (more columns than threads). Q, K,
// V, dO and the output's previous value are random in [-1, 1); S and O come
// from the host's forward (RunAttentionBlock, RunAttentionFinish), so m and
// l are the real ones; the causal positions leave query rows with no kept
// key (l = 0: no gradient) and a key no query row keeps. The step runs
// through the GPU backend's OP_COMPUTE kernel on a DeviceBufferSet built
// from a TestJob, so the dispatch, the packing of a strided S (non-causal
// cases) and of a strided output (causal cases: packed first when
// accumulating, unpacked after; the columns around it must keep their
// bytes) are covered too. Tolerance per element, with G the gradient
// alone (the host's result without accumulate): 2 ulps of the dtype
// relative to the element (the final rounding may fall either way) plus a
// floor for the order of the sums, relative to max |G|: 4 ulps of the
// dtype for float16 / bfloat16, 2e-5 for float32 (the host accumulates it
// in float, the GPU in double: up to 300 terms of float rounding, about
// 300 x 2^-24) and 1e-12 for float64 (double accumulators on both).
TEST_F(DeviceKernelsTest, AttentionBackwardAgainstTheHostKernel) {
  struct Shape {
    int64_t q_rows, kv_rows, head_dim;
    std::vector<int64_t> q_position, kv_position;  // when causal
  };
  std::vector<Shape> shapes(2);
  shapes[0] = {7, 300, 8, {-1, 5, 100, 260, 299, 400, 0}, {}};
  for (int64_t j = 0; j < 300; ++j) shapes[0].kv_position.push_back(j);
  shapes[1] = {300, 7, 130, {}, {0, 3, 50, 255, 256, 290, 310}};
  for (int64_t i = 0; i < 300; ++i) shapes[1].q_position.push_back(i - 2);
  const int64_t batch = 2, heads = 4, kv_heads = 2;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    const int size = DTypeSize(dtype);
    const double eps = dtype == DType::kFloat16    ? std::ldexp(1.0, -10)
                       : dtype == DType::kBFloat16 ? std::ldexp(1.0, -7)
                       : dtype == DType::kFloat32  ? std::ldexp(1.0, -23)
                                                   : std::ldexp(1.0, -52);
    const double floor_rel =
        dtype == DType::kFloat16 || dtype == DType::kBFloat16 ? 4 * eps
        : dtype == DType::kFloat32                            ? 2e-5
                                                              : 1e-12;
    for (size_t shape_index = 0; shape_index < shapes.size(); ++shape_index) {
      const Shape& shape = shapes[shape_index];
      const int64_t d = shape.head_dim;
      for (bool causal : {false, true}) {
        v1::AttentionBlockAttrs block;
        block.set_batch(batch);
        block.set_heads(heads);
        block.set_kv_heads(kv_heads);
        block.set_q_rows(shape.q_rows);
        block.set_kv_rows(shape.kv_rows);
        block.set_head_dim(d);
        block.set_causal(causal);
        if (causal) {
          for (int64_t p : shape.q_position) block.add_q_position(p);
          for (int64_t p : shape.kv_position) block.add_kv_position(p);
        } else {
          block.set_scale(0.3);  // causal: 0, read as 1 / sqrt(head_dim)
        }
        const int64_t q_elements = batch * heads * shape.q_rows * d;
        const int64_t kv_elements = batch * kv_heads * shape.kv_rows * d;
        std::mt19937_64 rng(1000 + 10 * shape_index + causal);
        const std::vector<uint8_t> q = RandomElements(dtype, q_elements, rng);
        const std::vector<uint8_t> k = RandomElements(dtype, kv_elements, rng);
        const std::vector<uint8_t> v = RandomElements(dtype, kv_elements, rng);
        const std::vector<uint8_t> dout =
            RandomElements(dtype, q_elements, rng);
        // S and O from the host's forward.
        std::vector<uint8_t> state(batch * heads * shape.q_rows * (d + 2) *
                                   size);
        std::vector<uint8_t> o(q_elements * size);
        ASSERT_TRUE(
            RunAttentionBlock(block, dtype, q, k, v, {}, absl::MakeSpan(state))
                .ok());
        v1::AttentionFinishAttrs finish;
        finish.set_head_dim(d);
        ASSERT_TRUE(
            RunAttentionFinish(finish, dtype, state, absl::MakeSpan(o)).ok());
        for (auto target : {v1::AttentionBackwardAttrs::TARGET_DQ,
                            v1::AttentionBackwardAttrs::TARGET_DKV}) {
          const bool dkv = target == v1::AttentionBackwardAttrs::TARGET_DKV;
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE(absl::StrCat(
                DTypeName(dtype), " q_rows=", shape.q_rows, " kv_rows=",
                shape.kv_rows, " head_dim=", d, causal ? " causal" : "",
                dkv ? " dKV" : " dQ", accumulate ? " accumulate" : ""));
            TestJob job(1, 1,
                        absl::StrCat("attention-backward-", DTypeName(dtype),
                                     shape_index, causal, dkv, accumulate));
            // Strided S without causal, strided output with: columns 1 to
            // width + 1 of rows two elements wider.
            const bool strided_s = !causal, strided_out = causal;
            const int64_t out_elements = dkv ? 2 * kv_elements : q_elements;
            std::vector<int64_t> out_shape =
                dkv ? std::vector<int64_t>{2, batch, kv_heads, shape.kv_rows, d}
                    : std::vector<int64_t>{batch, heads, shape.q_rows, d};
            if (strided_out) out_shape.back() += 2;
            const std::vector<int64_t> s_shape = {batch, heads, shape.q_rows,
                                                  d + (strided_s ? 4 : 2)};
            const int tq =
                job.AddTensor({{batch, heads, shape.q_rows, d}, dtype});
            const int tk =
                job.AddTensor({{batch, kv_heads, shape.kv_rows, d}, dtype});
            const int tv =
                job.AddTensor({{batch, kv_heads, shape.kv_rows, d}, dtype});
            const int tdo =
                job.AddTensor({{batch, heads, shape.q_rows, d}, dtype});
            const int to =
                job.AddTensor({{batch, heads, shape.q_rows, d}, dtype});
            const int ts = job.AddTensor({s_shape, dtype});
            const int tout = job.AddTensor({out_shape, dtype});
            std::vector<std::pair<int, std::vector<uint8_t>>> tiles;
            auto source = [&](int tensor, std::vector<uint8_t> bytes) {
              const int buffer = job.AddBuffer(0, tensor, job.FullBox(tensor),
                                               BufferRole::kSource);
              tiles.emplace_back(buffer, std::move(bytes));
              return buffer;
            };
            v1::Step step;
            step.set_op(v1::Step::OP_COMPUTE);
            step.set_device(0);
            v1::AttentionBackwardAttrs* attrs =
                step.mutable_compute()->mutable_attention_backward();
            *attrs->mutable_block() = block;
            attrs->set_target(target);
            attrs->set_accumulate(accumulate);
            *step.add_inputs() = TestJob::Operand(source(tq, q));
            *step.add_inputs() = TestJob::Operand(source(tk, k));
            *step.add_inputs() = TestJob::Operand(source(tv, v));
            *step.add_inputs() = TestJob::Operand(source(tdo, dout));
            *step.add_inputs() = TestJob::Operand(source(to, o));
            Box s_slice, out_slice;
            if (strided_s) {
              std::vector<uint8_t> wide =
                  RandomElements(dtype, NumElements(job.FullBox(ts)), rng);
              WidenRows(state, d + 2, 1, d + 4, size, wide);
              s_slice = job.FullBox(ts);
              s_slice.back() = {1, d + 3};
              *step.add_inputs() = TestJob::Operand(source(ts, wide), s_slice);
            } else {
              *step.add_inputs() = TestJob::Operand(source(ts, state));
            }
            // The output's tile starts random (its previous value).
            const std::vector<uint8_t> before =
                RandomElements(dtype, NumElements(job.FullBox(tout)), rng);
            const int out_buffer = job.AddBuffer(0, tout, job.FullBox(tout),
                                                 BufferRole::kDestination);
            tiles.emplace_back(out_buffer, before);
            if (strided_out) {
              out_slice = job.FullBox(tout);
              out_slice.back() = {1, d + 1};
            }
            *step.add_outputs() = TestJob::Operand(out_buffer, out_slice);
            job.AddStep(step);

            // The host: the gradient alone (G), then the step's result.
            const std::vector<uint8_t> previous =
                strided_out ? NarrowRows(before, d, 1, d + 2, size) : before;
            std::vector<uint8_t> gradient(out_elements * size);
            v1::AttentionBackwardAttrs alone = *attrs;
            alone.set_accumulate(false);
            ASSERT_TRUE(RunAttentionBackward(alone, dtype, q, k, v, dout, o,
                                             state, absl::MakeSpan(gradient))
                            .ok());
            std::vector<uint8_t> want = previous;
            ASSERT_TRUE(RunAttentionBackward(*attrs, dtype, q, k, v, dout, o,
                                             state, absl::MakeSpan(want))
                            .ok());

            // The GPU: the step through the backend's OP_COMPUTE kernel.
            absl::StatusOr<ParsedProgram> program =
                ParseProgram(job.ProgramFor(0));
            ASSERT_TRUE(program.ok()) << program.status();
            Cancellation cancellation;
            absl::StatusOr<DeviceBufferSet> buffers =
                DeviceBufferSet::Create(*program, {{0, 0}}, cancellation);
            ASSERT_TRUE(buffers.ok()) << buffers.status();
            for (const auto& [buffer, bytes] : tiles) {
              const DeviceTile* tile = buffers->ById(buffer);
              ASSERT_NE(tile, nullptr);
              ASSERT_EQ(tile->size_bytes(), static_cast<int64_t>(bytes.size()));
              ASSERT_EQ(cudaMemcpy(tile->data(), bytes.data(), bytes.size(),
                                   cudaMemcpyHostToDevice),
                        cudaSuccess);
            }
            // A copy from pageable memory may return before its DMA ends.
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
            ASSERT_TRUE(stream.ok()) << stream.status();
            absl::StatusOr<CudaEvent> start = CudaEvent::Create(0);
            absl::StatusOr<CudaEvent> done = CudaEvent::Create(0);
            ASSERT_TRUE(start.ok() && done.ok());
            DeviceLane lane;
            lane.streams[0] = stream->get();
            StepEvents events;
            events.start = start->get();
            events.done = done->get();
            DeviceRelayEnvironment env;
            env.program = &*program;
            env.buffers = &*buffers;
            auto kernel = CudaKernels().Find(v1::Step::OP_COMPUTE);
            ASSERT_TRUE(kernel.ok()) << kernel.status();
            const StepDesc* compute = nullptr;
            for (const StepDesc& desc : program->steps) {
              if (desc.op == v1::Step::OP_COMPUTE) compute = &desc;
            }
            ASSERT_NE(compute, nullptr);
            const absl::Status enqueued =
                (**kernel)(*compute, env, lane, {}, events);
            ASSERT_TRUE(enqueued.ok()) << enqueued;
            ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
            std::vector<uint8_t> after(before.size());
            ASSERT_EQ(
                cudaMemcpy(after.data(), buffers->ById(out_buffer)->data(),
                           after.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
            std::vector<uint8_t> got = after;
            if (strided_out) {
              got = NarrowRows(after, d, 1, d + 2, size);
              // The columns around the slice keep their bytes.
              const int64_t rows = NumElements(job.FullBox(tout)) / (d + 2);
              int64_t changed = 0;
              for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c : {int64_t{0}, d + 1}) {
                  changed +=
                      std::memcmp(after.data() + (r * (d + 2) + c) * size,
                                  before.data() + (r * (d + 2) + c) * size,
                                  size) != 0;
                }
              }
              EXPECT_EQ(changed, 0);
            }
            double max_gradient = 0;
            for (int64_t e = 0; e < out_elements; ++e) {
              max_gradient = std::max(max_gradient,
                                      std::abs(ElementAt(dtype, gradient, e)));
            }
            ASSERT_GT(max_gradient, 0);  // the case computes something
            const double floor = floor_rel * max_gradient;
            int64_t mismatches = 0;
            for (int64_t e = 0; e < out_elements; ++e) {
              const double w = ElementAt(dtype, want, e);
              const double g = ElementAt(dtype, got, e);
              const double tolerance = 2 * eps * std::abs(w) + floor;
              if (!(std::abs(g - w) <= tolerance)) {
                if (++mismatches <= 5) {
                  ADD_FAILURE()
                      << "element " << e << " of " << (dkv ? "dKV" : "dQ")
                      << ": GPU " << g << ", host " << w << ", tolerance "
                      << tolerance;
                }
              }
            }
            EXPECT_EQ(mismatches, 0) << "of " << out_elements << " elements";
          }
        }
      }
    }
  }
}

// RANDOM and ZEROS sources hold the host BufferSet's bits (the fill kernel
// and FillInitializer share initializer_core.h), destinations of computed
// tensors start at zero, of moved ones poisoned.
TEST_F(DeviceKernelsTest, InitializerBitsEqualTheHosts) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    TestJob job(1, 2, absl::StrCat("init-", DTypeName(dtype)));
    const std::vector<int64_t> shape = {9, 11};
    const int random = job.AddTensor({shape, dtype});
    const int zeros = job.AddTensor({shape, dtype});
    job.SetInitializer(random, Random(77));
    v1::Initializer zero;
    zero.set_kind(v1::Initializer::KIND_ZEROS);
    job.SetInitializer(zeros, zero);
    for (int d = 0; d < 2; ++d) {
      job.AddBuffer(d, random, TestJob::ShardBox(shape, 0, 2, d),
                    BufferRole::kSource);
      job.AddBuffer(d, zeros, TestJob::ShardBox(shape, 1, 2, d),
                    BufferRole::kSource);
      job.AddBuffer(d, random, TestJob::ShardBox(shape, 1, 2, d),
                    BufferRole::kDestination);
    }
    auto program = ParseProgram(job.ProgramFor(0));
    ASSERT_TRUE(program.ok()) << program.status();
    Cancellation cancellation;
    auto host = BufferSet::Create(*program, cancellation, 1);
    ASSERT_TRUE(host.ok()) << host.status();
    auto device = DeviceBufferSet::Create(*program, {{0, 0}, {1, 0}},
                                          cancellation);
    ASSERT_TRUE(device.ok()) << device.status();
    for (const BufferDesc& buffer : program->buffers) {
      const TileBuffer* want = host->ById(buffer.id);
      const DeviceTile* got = device->ById(buffer.id);
      ASSERT_NE(got, nullptr);
      std::vector<uint8_t> bytes(got->size_bytes());
      ASSERT_EQ(cudaMemcpy(bytes.data(), got->data(), bytes.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), want->bytes().begin()))
          << "buffer " << buffer.id;
    }
    // Moved RANDOM data is verified on the host, bit for bit, like the
    // CPU's: only the pre-copied overlap matches.
    auto host_summary = host->VerifyDestinations(1);
    auto device_summary = device->VerifyDestinations();
    ASSERT_TRUE(device_summary.ok()) << device_summary.status();
    EXPECT_EQ(device_summary->elements, host_summary->elements);
    EXPECT_EQ(device_summary->mismatches, host_summary->mismatches);
  }
}

// The DAG of the issue on four virtual devices of one GPU: GEMMs, then a
// reduce-scatter of their products.
TEST_F(DeviceKernelsTest, GemmThenReduceScatterOnFourVirtualDevices) {
  TestJob job(1, 4, "gemm-rs");
  const int64_t elements = AddGemmThenReduceScatter(job, 4, DType::kFloat32);
  ExpectVerified(RunWorker(job, 0, 0, 4), elements, 1e-4);
}

// Two workers in threads, one GPU each with two virtual devices, NCCL
// between them: every collective across workers (groups that alternate
// between them), and the GEMM -> reduce-scatter DAG.
TEST_F(DeviceKernelsTest, EveryCollectiveAcrossTwoWorkersOverNccl) {
  if (GpuCount() < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL allows one rank per GPU); "
                 << GpuCount() << " visible";
  }
  struct Case {
    std::string name;
    std::function<int64_t(TestJob&)> build;  // returns elements verified
  };
  const std::vector<Case> cases = {
      {"all_reduce",
       [](TestJob& job) {
         AddReduction(job, v1::Step::OP_ALL_REDUCE, {0, 2, 1, 3}, {13, 7},
                      DType::kFloat32, v1::REDUCTION_SUM, Random(3));
         return int64_t{4 * 91};
       }},
      {"reduce_scatter",
       [](TestJob& job) {
         AddReduction(job, v1::Step::OP_REDUCE_SCATTER, {0, 2, 1, 3}, {10, 3},
                      DType::kInt32, v1::REDUCTION_MAX, Random(5));
         return int64_t{30};
       }},
      {"all_gather",
       [](TestJob& job) {
         // Whole-buffer inputs: the workers learn each other's input
         // boxes through the rendezvous store.
         AddAllGather(job, {0, 2, 1, 3}, DType::kBFloat16, /*slices=*/false);
         return int64_t{4 * 50};
       }},
      {"all_to_all",
       [](TestJob& job) {
         return AddAllToAll(job, {2, 0, 1, 3}, DType::kFloat64);
       }},
      {"gemm_reduce_scatter",
       [](TestJob& job) {
         return AddGemmThenReduceScatter(job, 4, DType::kFloat32);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestJob job(2, 2, absl::StrCat("nccl-", c.name));
    const int64_t elements = c.build(job);
    InMemoryKvStore kv;
    std::vector<absl::StatusOr<v1::JobResult>> results(
        2, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back(
          [&, w] { results[w] = RunWorker(job, w, /*gpu=*/w, 2, &kv); });
    }
    for (std::thread& thread : threads) thread.join();
    int64_t verified = 0;
    for (int w = 0; w < 2; ++w) {
      ASSERT_TRUE(results[w].ok()) << "worker " << w << ": "
                                   << results[w].status();
      EXPECT_EQ(results[w]->mismatches(), 0) << "worker " << w;
      verified += results[w]->elements_verified();
    }
    EXPECT_EQ(verified, elements);
  }
}

}  // namespace
}  // namespace meshcast::worker::cuda
