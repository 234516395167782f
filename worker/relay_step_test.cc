// Relay steps across workers on both paths of relay_step.cc: direct (the
// slice is one contiguous range of the tile, so chunks are sent from and
// received into the tile at an offset) and staged (anything else). Every
// destination element is verified against the pattern.
#include "worker/relay_step.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/executor.h"
#include "worker/gloo_communicator.h"
#include "worker/in_memory_kv_store.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

ExecutorOptions SmallChunks() {
  ExecutorOptions options;
  options.relay.chunk_bytes = 96;  // many chunks, more than the window
  options.relay.pipeline_depth = 2;
  return options;
}

struct Case {
  const char* name;
  std::vector<int64_t> shape;
  Box source_box;       // the sender's tile
  Box destination_box;  // every receiver's tile
  Box slice;
  int64_t verified;     // destination elements checked
  int64_t mismatches;   // destination elements outside the slice
};

// A chain 0 -> 2 -> 3 -> 1 over two workers of two devices: worker 0 sends
// (position 0) and receives last (position 3); worker 1 receives into device
// 2, copies to device 3 and forwards from there.
void RunChain(const Case& c) {
  SCOPED_TRACE(c.name);
  TestJob job(2, 2, c.name);
  const int t = job.AddTensor({c.shape, DType::kInt32});
  job.AddBuffer(0, t, c.source_box, BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, c.destination_box, BufferRole::kDestination);
  }
  job.AddTransfer(t, c.slice, {0, 2, 3, 1});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  for (size_t w = 0; w < outcome.results.size(); ++w) {
    ASSERT_TRUE(outcome.results[w].ok())
        << "worker " << w << ": " << outcome.results[w].status();
  }
  EXPECT_EQ(outcome.elements_verified, c.verified);
  EXPECT_EQ(outcome.mismatches, c.mismatches);
}

TEST(RelayStepTest, WholeTensorGoesDirect) {
  RunChain({"whole", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {0, 17}},
            {{0, 40}, {0, 17}}, 3 * 40 * 17, 0});
}

TEST(RelayStepTest, RowsInsideLargerTilesGoDirectAtAnOffset) {
  // Slice rows [10, 30) of tiles that start at rows 0 (sender) and 5
  // (receivers): offsets 10 * 17 and 5 * 17 elements.
  RunChain({"rows", {40, 17}, {{0, 40}, {0, 17}}, {{5, 35}, {0, 17}},
            {{10, 30}, {0, 17}}, 3 * 30 * 17, 3 * 10 * 17});
}

TEST(RelayStepTest, ThreeDimensionsContiguousAfterAUnitDimension) {
  // [1:2, 2:5, 0:5] of a [4, 6, 5] tile: one index of dimension 0, then a
  // range of dimension 1 over full rows of dimension 2.
  RunChain({"unit-dim", {4, 6, 5}, {{0, 4}, {0, 6}, {0, 5}},
            {{0, 4}, {0, 6}, {0, 5}}, {{1, 2}, {2, 5}, {0, 5}}, 3 * 4 * 6 * 5,
            3 * (4 * 6 * 5 - 3 * 5)});
}

TEST(RelayStepTest, ColumnsAreStaged) {
  RunChain({"columns", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {0, 17}},
            {{0, 40}, {3, 11}}, 3 * 40 * 17, 3 * 40 * 9});
}

TEST(RelayStepTest, StagedSenderDirectReceivers) {
  // Columns [3, 11) of the sender's full tile are not contiguous there, but
  // they are the whole of the receivers' column-shard tiles.
  RunChain({"column-shard", {40, 17}, {{0, 40}, {0, 17}}, {{0, 40}, {3, 11}},
            {{0, 40}, {3, 11}}, 3 * 40 * 8, 0});
}

// The operand form of OP_SEND_RECV: a region of a buffer on the sender to
// a region of another buffer (another tensor) on the receiver, element e
// to element e in each region's row-major order. The receiving tensor is
// defined by the copies, so every destination element is checked against
// the reference: the sending tensor's initializer at the matching element.
v1::Step OperandSendRecv(int from, const Box& from_slice, int to,
                         const Box& to_slice) {
  v1::Step step;
  step.set_op(v1::Step::OP_SEND_RECV);
  *step.add_inputs() = TestJob::Operand(from, from_slice);
  *step.add_outputs() = TestJob::Operand(to, to_slice);
  return step;
}

v1::Initializer RandomInit(uint64_t seed) {
  v1::Initializer init;
  init.set_kind(v1::Initializer::KIND_RANDOM);
  init.set_seed(seed);
  return init;
}

// Z [24, 18] on `receiver` is filled by two copies from X [30, 20] on
// `sender`: Z's columns [0, 8) from X[2:26, 3:11] and its columns [8, 18)
// from X[0:12, 0:20] (contiguous there). Z's column blocks are never
// contiguous in Z's tile, X's first block is not in X's: both paths of
// relay_step.cc (staged and direct) on each side.
void RunOperandCopies(int workers, int devices_per_worker, int sender,
                      int receiver, DType dtype, const char* name) {
  SCOPED_TRACE(name);
  TestJob job(workers, devices_per_worker, name);
  const int x = job.AddTensor({{30, 20}, dtype});
  job.SetInitializer(x, RandomInit(7));
  const int z = job.AddTensor({{24, 18}, dtype});
  const int from =
      job.AddBuffer(sender, x, job.FullBox(x), BufferRole::kSource);
  const int to =
      job.AddBuffer(receiver, z, job.FullBox(z), BufferRole::kDestination);
  job.AddStep(OperandSendRecv(from, {{2, 26}, {3, 11}}, to, {{0, 24}, {0, 8}}),
              {sender, receiver});
  job.AddStep(OperandSendRecv(from, {{0, 12}, {0, 20}}, to, {{0, 24}, {8, 18}}),
              {sender, receiver});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  for (size_t w = 0; w < outcome.results.size(); ++w) {
    ASSERT_TRUE(outcome.results[w].ok())
        << "worker " << w << ": " << outcome.results[w].status();
  }
  EXPECT_EQ(outcome.elements_verified, 24 * 18);
  EXPECT_EQ(outcome.mismatches, 0);
  EXPECT_EQ(outcome.max_abs_error, 0);  // a copy is exact
}

TEST(RelayStepTest, OperandFormAcrossWorkers) {
  RunOperandCopies(2, 1, 0, 1, DType::kFloat32, "operands-float32");
  RunOperandCopies(2, 1, 1, 0, DType::kBFloat16, "operands-reverse-bf16");
}

TEST(RelayStepTest, OperandFormBetweenDevicesOfOneWorker) {
  RunOperandCopies(1, 2, 0, 1, DType::kFloat64, "operands-local");
}

TEST(RelayStepTest, OperandFormWholeBuffersAcrossWorkersGoDirect) {
  // Two contiguous regions (whole buffers, no slices) of different shapes:
  // zero-copy on both sides, many chunks in flight.
  TestJob job(2, 1, "operands-whole");
  const int x = job.AddTensor({{1000}, DType::kInt32});
  const int z = job.AddTensor({{40, 25}, DType::kInt32});
  const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
  const int to = job.AddBuffer(1, z, job.FullBox(z), BufferRole::kDestination);
  job.AddStep(OperandSendRecv(from, {}, to, {}), {0, 1});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok)
      << outcome.results[0].status() << " / " << outcome.results[1].status();
  EXPECT_EQ(outcome.elements_verified, 1000);
  EXPECT_EQ(outcome.mismatches, 0);
}

TEST(RelayStepTest, OperandFormIntoScratchIsNotVerifiedButFeedsACopy) {
  // X -> scratch S on device 1 (worker 1) -> Z on device 0 (worker 0): the
  // reference follows both copies.
  TestJob job(2, 1, "operands-scratch");
  const int x = job.AddTensor({{9, 7}, DType::kFloat32});
  job.SetInitializer(x, RandomInit(3));
  const int s = job.AddTensor({{7, 9}, DType::kFloat32});
  const int z = job.AddTensor({{63}, DType::kFloat32});
  const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
  const int scratch = job.AddBuffer(1, s, job.FullBox(s), BufferRole::kScratch);
  const int to = job.AddBuffer(0, z, job.FullBox(z), BufferRole::kDestination);
  const int first = job.AddStep(OperandSendRecv(from, {}, scratch, {}), {0, 1});
  v1::Step back = OperandSendRecv(scratch, {}, to, {});
  back.add_deps(first);
  job.AddStep(back, {1, 0});
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  ASSERT_TRUE(outcome.all_ok)
      << outcome.results[0].status() << " / " << outcome.results[1].status();
  EXPECT_EQ(outcome.elements_verified, 63);
  EXPECT_EQ(outcome.mismatches, 0);
}

// Runs one program per worker, each on its own thread with a Gloo
// communicator (as RunTestJob, but the programs may come from different
// plans); returns the destination mismatches over all workers.
int64_t RunPrograms(const std::vector<v1::WorkerProgram>& protos) {
  const int n = static_cast<int>(protos.size());
  InMemoryKvStore kv;
  std::vector<absl::StatusOr<v1::JobResult>> results(
      n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      absl::StatusOr<ParsedProgram> program = ParseProgram(protos[w]);
      if (!program.ok()) {
        results[w] = program.status();
        return;
      }
      GlooOptions gloo;
      gloo.rendezvous_timeout = absl::Seconds(20);
      gloo.op_timeout = absl::Seconds(20);
      auto comm = GlooCommunicator::Create(
          kv, absl::StrCat("job/", protos[w].job_id(), "/gloo/"), w, n, gloo);
      if (!comm.ok()) {
        results[w] = comm.status();
        return;
      }
      results[w] = Executor(SmallChunks()).Run(*program, comm->get());
    });
  }
  for (std::thread& thread : threads) thread.join();
  int64_t mismatches = 0;
  for (int w = 0; w < n; ++w) {
    EXPECT_TRUE(results[w].ok())
        << "worker " << w << ": " << results[w].status();
    if (results[w].ok()) mismatches += results[w]->mismatches();
  }
  return mismatches;
}

TEST(RelayStepTest, OperandFormAWrongRegionIsCaughtByTheReference) {
  // The receiver's plan says Z = X[:, 5:10], the sender sends X[:, 0:5]:
  // the reference does not trust the kernel, so all 50 random elements of
  // Z are mismatches; with the sender's plan on both sides, none.
  const auto plan = [](const Box& sent) {
    TestJob job(2, 1, "operands-region");
    const int x = job.AddTensor({{10, 10}, DType::kFloat32});
    job.SetInitializer(x, RandomInit(11));
    const int z = job.AddTensor({{10, 5}, DType::kFloat32});
    const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
    const int to =
        job.AddBuffer(1, z, job.FullBox(z), BufferRole::kDestination);
    job.AddStep(OperandSendRecv(from, sent, to, {}), {0, 1});
    return job;
  };
  const TestJob right = plan({{0, 10}, {0, 5}});
  const TestJob wrong = plan({{0, 10}, {5, 10}});
  EXPECT_EQ(RunPrograms({right.ProgramFor(0), right.ProgramFor(1)}), 0);
  EXPECT_EQ(RunPrograms({right.ProgramFor(0), wrong.ProgramFor(1)}), 50);
}

TEST(RelayStepTest, OperandFormRefusesMismatchedCountsAndDTypes) {
  for (const bool dtype_differs : {false, true}) {
    TestJob job(2, 1, dtype_differs ? "operands-dtype" : "operands-count");
    const int x = job.AddTensor({{8, 8}, DType::kFloat32});
    const int z = job.AddTensor(
        {{8, 8}, dtype_differs ? DType::kFloat16 : DType::kFloat32});
    const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
    const int to = job.AddBuffer(1, z, job.FullBox(z), BufferRole::kScratch);
    job.AddStep(OperandSendRecv(
                    from, {{0, 8}, {0, 8}}, to,
                    dtype_differs ? Box{{0, 8}, {0, 8}} : Box{{0, 8}, {0, 7}}),
                {0, 1});
    for (int w = 0; w < 2; ++w) {
      const absl::StatusOr<ParsedProgram> program =
          ParseProgram(job.ProgramFor(w));
      ASSERT_FALSE(program.ok()) << "worker " << w;
      EXPECT_EQ(program.status().code(), absl::StatusCode::kFailedPrecondition)
          << program.status();
      const std::string message(program.status().message());
      EXPECT_NE(message.find("plan.steps id 0"), std::string::npos) << message;
      EXPECT_NE(message.find("input buffer 0"), std::string::npos) << message;
      EXPECT_NE(message.find("output buffer 1"), std::string::npos) << message;
    }
  }
}

TEST(RelayStepTest, OperandFormParsesWithoutATensorAndCountsItsBytes) {
  TestJob job(2, 1, "operands-parse");
  const int x = job.AddTensor({{6, 4}, DType::kFloat16});
  const int z = job.AddTensor({{12}, DType::kFloat16});
  const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
  const int to = job.AddBuffer(1, z, job.FullBox(z), BufferRole::kScratch);
  job.AddStep(OperandSendRecv(from, {{0, 6}, {1, 3}}, to, {}), {0, 1});
  RelayOptions options;
  options.chunk_bytes = 8;
  options.pipeline_depth = 2;
  for (int w = 0; w < 2; ++w) {
    const absl::StatusOr<ParsedProgram> program =
        ParseProgram(job.ProgramFor(w));
    ASSERT_TRUE(program.ok()) << program.status();
    ASSERT_EQ(program->steps.size(), 1u);
    const StepDesc& step = program->steps[0];
    EXPECT_TRUE(step.operand_form);
    EXPECT_EQ(step.tensor, -1);
    EXPECT_EQ(step.bytes, 12 * 2);
    EXPECT_EQ(RelayElements(step), 12);
    EXPECT_EQ(RelayElementSize(step, *program), 2);
    EXPECT_EQ(LocalDeliveredBytes(*program, step), w == 1 ? 24 : 0);
    // The copy defines tensor z; x stays initialized.
    EXPECT_TRUE(program->IsComputed(z));
    EXPECT_FALSE(program->IsComputed(x));
    // The sender's region is staged (columns), the receiver's is direct,
    // but both count depth slots of one chunk for the memory check.
    EXPECT_EQ(RelayStagingBytes(step, *program, options), 2 * 8);
  }
}

// The fused mode's chain in miniature: a GEMM on device 0 (worker 0), its
// product sent to a scratch buffer on device 1 (worker 1, or the same
// worker), added there to device 1's own product; the sum is verified
// against the float64 reference, which follows the copy.
void GemmSendAdd(int workers, int devices_per_worker, const char* name) {
  SCOPED_TRACE(name);
  const int64_t m = 9, k = 11, n = 6;
  TestJob job(workers, devices_per_worker, name);
  const int a = job.AddTensor({{2, m, k}, DType::kFloat32});
  const int b = job.AddTensor({{2, k, n}, DType::kFloat32});
  const int p = job.AddTensor({{2, m, n}, DType::kFloat32});
  const int received = job.AddTensor({{m, n}, DType::kFloat32});
  const int y = job.AddTensor({{m, n}, DType::kFloat32});
  job.SetInitializer(a, RandomInit(1));
  job.SetInitializer(b, RandomInit(2));
  std::vector<int> products, gemms;
  for (int r = 0; r < 2; ++r) {
    v1::Step gemm;
    gemm.set_op(v1::Step::OP_COMPUTE);
    gemm.set_device(r);
    v1::GemmAttrs* attrs = gemm.mutable_compute()->mutable_gemm();
    attrs->set_m(m);
    attrs->set_n(n);
    attrs->set_k(k);
    *gemm.add_inputs() = TestJob::Operand(
        job.AddBuffer(r, a, {{r, r + 1}, {0, m}, {0, k}}, BufferRole::kSource));
    *gemm.add_inputs() = TestJob::Operand(
        job.AddBuffer(r, b, {{r, r + 1}, {0, k}, {0, n}}, BufferRole::kSource));
    products.push_back(job.AddBuffer(r, p, {{r, r + 1}, {0, m}, {0, n}},
                                     BufferRole::kScratch));
    *gemm.add_outputs() = TestJob::Operand(products.back());
    gemms.push_back(job.AddStep(gemm));
  }
  const int inbox =
      job.AddBuffer(1, received, job.FullBox(received), BufferRole::kScratch);
  v1::Step send = OperandSendRecv(products[0], {}, inbox, {});
  send.add_deps(gemms[0]);
  const int sent = job.AddStep(send, {0, 1});
  v1::Step add;
  add.set_op(v1::Step::OP_COMPUTE);
  add.set_device(1);
  add.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_ADD);
  *add.add_inputs() = TestJob::Operand(inbox);
  *add.add_inputs() = TestJob::Operand(products[1]);
  *add.add_outputs() = TestJob::Operand(
      job.AddBuffer(1, y, job.FullBox(y), BufferRole::kDestination));
  add.add_deps(sent);
  add.add_deps(gemms[1]);
  job.AddStep(add);
  TestJobOutcome outcome = RunTestJob(job, SmallChunks());
  for (size_t w = 0; w < outcome.results.size(); ++w) {
    ASSERT_TRUE(outcome.results[w].ok())
        << "worker " << w << ": " << outcome.results[w].status();
  }
  EXPECT_EQ(outcome.elements_verified, m * n);
  EXPECT_EQ(outcome.mismatches, 0);
  EXPECT_LT(outcome.max_abs_error, 1e-5);
}

TEST(RelayStepTest, GemmThenOperandSendThenAddIsVerifiedAcrossWorkers) {
  GemmSendAdd(2, 1, "gemm-send-add-2x1");
}

TEST(RelayStepTest, GemmThenOperandSendThenAddIsVerifiedOnOneWorker) {
  GemmSendAdd(1, 2, "gemm-send-add-1x2");
}

// Relay trees ------------------------------------------------------------

// Tile layouts for the tree tests, each through every path of
// relay_step.cc, of a [40, 17] int32 tensor whose sender holds all of it.
// SmallChunks cuts the slices into 29, 15, 14, 14 and 1 chunks: more than
// the direct window (16) or the staging depth (2), and a single one.
struct TreeLayout {
  const char* name;
  Box destination_box;  // every receiver's tile
  Box slice;
};

std::vector<TreeLayout> TreeLayouts() {
  const Box all = {{0, 40}, {0, 17}};
  const Box columns = {{0, 40}, {3, 11}};
  return {
      {"direct", all, all},
      {"direct-offset", {{5, 35}, {0, 17}}, {{10, 30}, {0, 17}}},
      {"staged", all, columns},
      {"staged-sender", columns, columns},
      {"one-chunk", all, {{6, 8}, {2, 7}}},
  };
}

// Runs the relay tree (devices in rank order, parents) on `workers` x
// `devices_per_worker` devices for every layout. Every destination element
// is verified: those of the slice against the pattern; the others keep
// their poison, so they count as mismatches (a receiver the tree missed
// would add its whole slice).
void RunTree(int workers, int devices_per_worker,
             const std::vector<int>& devices, const std::vector<int>& parents) {
  for (const TreeLayout& layout : TreeLayouts()) {
    SCOPED_TRACE(layout.name);
    TestJob job(workers, devices_per_worker,
                absl::StrCat("tree-", layout.name));
    const int t = job.AddTensor({{40, 17}, DType::kInt32});
    job.AddBuffer(devices[0], t, job.FullBox(t), BufferRole::kSource);
    for (size_t p = 1; p < devices.size(); ++p) {
      job.AddBuffer(devices[p], t, layout.destination_box,
                    BufferRole::kDestination);
    }
    job.AddRelayTree(t, layout.slice, devices, parents);
    TestJobOutcome outcome = RunTestJob(job, SmallChunks());
    for (size_t w = 0; w < outcome.results.size(); ++w) {
      ASSERT_TRUE(outcome.results[w].ok())
          << "worker " << w << ": " << outcome.results[w].status();
    }
    const int64_t receivers = static_cast<int64_t>(devices.size()) - 1;
    const int64_t tile = NumElements(layout.destination_box);
    const int64_t landed =
        NumElements(Intersect(layout.slice, layout.destination_box));
    EXPECT_EQ(outcome.elements_verified, receivers * tile);
    EXPECT_EQ(outcome.mismatches, receivers * (tile - landed));
  }
}

TEST(RelayTreeTest, SenderFansOutToThreeWorkers) {
  RunTree(4, 1, {0, 1, 2, 3}, {-1, 0, 0, 0});
}

TEST(RelayTreeTest, FansOutAndRelaysOverThreeWorkers) {
  // Position 1 (worker 1) feeds position 3 on worker 0 and position 4 on
  // its own worker; position 2 (worker 2) feeds position 5 beside it.
  RunTree(3, 2, {0, 2, 4, 1, 3, 5}, {-1, 0, 0, 1, 1, 2});
}

TEST(RelayTreeTest, PositionsOfAWorkerNeedNotBeConsecutive) {
  // Worker 0 holds positions 0 and 2, worker 1 positions 1 and 3: one
  // segment each, a single message stream from worker 0 to worker 1.
  RunTree(2, 2, {0, 2, 1, 3}, {-1, 0, 0, 1});
}

TEST(RelayTreeTest, SenderWithTwoChildrenOnOneWorker) {
  // Positions 1 and 2 (both on worker 1) receive from the sender, each in
  // its own segment; position 2 forwards back to worker 0, which then has
  // two segments.
  RunTree(2, 2, {0, 2, 3, 1}, {-1, 0, 0, 2});
}

TEST(RelayTreeTest, RelayWithTwoChildrenOnAnotherWorker) {
  // Position 1 (worker 1) forwards to positions 2 and 3 (both on worker
  // 2); the sender also feeds position 4, worker 1's second segment.
  RunTree(3, 2, {0, 2, 4, 5, 3}, {-1, 0, 1, 1, 0});
}

TEST(RelayTreeTest, ChainWrittenAsParents) {
  RunTree(2, 2, {0, 2, 3, 1}, {-1, 0, 1, 2});
}

TEST(RelayTreeTest, AllOnOneWorkerCopiesFromTheParents) {
  RunTree(1, 4, {0, 1, 2, 3}, {-1, 0, 0, 2});
  RunTree(1, 4, {2, 0, 3, 1}, {-1, 0, 1, 0});
}

using Messages = std::map<std::pair<int, int>, int>;  // (peer, hop) -> count

// Records the messages a relay starts.
class RecordingCommunicator : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator* inner) : inner_(inner) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::StatusOr<std::unique_ptr<CommRequest>> StartSend(
      absl::Span<const uint8_t> data, int peer, uint64_t tag) override {
    ++sends[{peer, HopOf(tag)}];
    return inner_->StartSend(data, peer, tag);
  }
  absl::StatusOr<std::unique_ptr<CommRequest>> StartRecv(
      absl::Span<uint8_t> data, int peer, uint64_t tag) override {
    ++receives[{peer, HopOf(tag)}];
    return inner_->StartRecv(data, peer, tag);
  }
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }

  Messages sends;
  Messages receives;

 private:
  static int HopOf(uint64_t tag) { return static_cast<int>(tag >> 28) & 0xfff; }

  Communicator* const inner_;
};

// One worker's run of ExecuteRelayStep outside the executor.
struct RecordedRelay {
  absl::Status status = absl::UnknownError("not run");
  Messages sends;
  Messages receives;
  std::vector<int> hops_done;  // positions, in the order reported
  VerificationSummary verification;
};

// Runs the one relay step of `job` with ExecuteRelayStep on one thread per
// worker (Gloo over 127.0.0.1), recording its messages and hops, then
// verifies every destination.
std::vector<RecordedRelay> RunRecorded(const TestJob& job) {
  const int n = job.workers();
  InMemoryKvStore kv;
  std::vector<RecordedRelay> runs(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      RecordedRelay& run = runs[w];
      absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(w));
      if (!program.ok()) {
        run.status = program.status();
        return;
      }
      Cancellation cancellation;
      absl::StatusOr<BufferSet> buffers =
          BufferSet::Create(*program, cancellation);
      if (!buffers.ok()) {
        run.status = buffers.status();
        return;
      }
      GlooOptions gloo;
      gloo.rendezvous_timeout = absl::Seconds(20);
      gloo.op_timeout = absl::Seconds(20);
      auto comm =
          GlooCommunicator::Create(kv, "job/recorded/gloo/", w, n, gloo);
      if (!comm.ok()) {
        run.status = comm.status();
        return;
      }
      RecordingCommunicator recording(comm->get());
      RelayEnvironment env;
      env.program = &*program;
      env.buffers = &*buffers;
      env.comm = &recording;
      env.cancellation = &cancellation;
      env.options = SmallChunks().relay;
      env.on_hop_done = [&run](const StepDesc&, int position, double) {
        run.hops_done.push_back(position);
      };
      if (program->steps.size() != 1) {
        run.status = absl::InternalError("expected one step");
        return;
      }
      run.status = ExecuteRelayStep(program->steps[0], env);
      run.sends = recording.sends;
      run.receives = recording.receives;
      if (!run.status.ok()) return;
      absl::StatusOr<VerificationSummary> verification =
          buffers->VerifyDestinations();
      if (!verification.ok()) {
        run.status = verification.status();
        return;
      }
      run.verification = *verification;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return runs;
}

// Whole [40, 17] int32 tiles: 29 chunks of 96 bytes, sent straight from
// the sender's tile and received straight into the roots'.
TestJob WholeTileRelay(int workers, int devices_per_worker,
                       const std::vector<int>& devices,
                       const std::vector<int>& parents) {
  TestJob job(workers, devices_per_worker, "recorded");
  const int t = job.AddTensor({{40, 17}, DType::kInt32});
  job.AddBuffer(devices[0], t, job.FullBox(t), BufferRole::kSource);
  for (size_t p = 1; p < devices.size(); ++p) {
    job.AddBuffer(devices[p], t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddRelayTree(t, job.FullBox(t), devices, parents);
  return job;
}

constexpr int kWholeTileChunks = 29;

void ExpectVerified(const std::vector<RecordedRelay>& runs,
                    const std::vector<int64_t>& receivers_by_worker) {
  for (size_t w = 0; w < runs.size(); ++w) {
    SCOPED_TRACE(absl::StrCat("worker ", w));
    ASSERT_TRUE(runs[w].status.ok()) << runs[w].status;
    EXPECT_EQ(runs[w].verification.elements, receivers_by_worker[w] * 40 * 17);
    EXPECT_EQ(runs[w].verification.mismatches, 0)
        << runs[w].verification.first_mismatch;
  }
}

TEST(RelayTreeTest, SendsEachChunkOncePerRemoteChild) {
  // Worker 0 holds positions 0 and 2, worker 1 positions 1 and 3: the only
  // link between the workers is hop 1; positions 2 and 3 are local copies.
  const std::vector<RecordedRelay> runs =
      RunRecorded(WholeTileRelay(2, 2, {0, 2, 1, 3}, {-1, 0, 0, 1}));
  ExpectVerified(runs, {1, 2});
  EXPECT_EQ(runs[0].sends, (Messages{{{1, 1}, kWholeTileChunks}}));
  EXPECT_TRUE(runs[0].receives.empty());
  EXPECT_TRUE(runs[1].sends.empty());
  EXPECT_EQ(runs[1].receives, (Messages{{{0, 1}, kWholeTileChunks}}));
  EXPECT_EQ(runs[0].hops_done, (std::vector<int>{2}));
  EXPECT_EQ(runs[1].hops_done, (std::vector<int>{1, 3}));
}

TEST(RelayTreeTest, TheSameDevicesAsAChainCrossWorkersAtEveryHop) {
  // The chain over the same devices: hops 1 and 3 leave worker 0, hop 2
  // worker 1, as before trees.
  const std::vector<RecordedRelay> runs =
      RunRecorded(WholeTileRelay(2, 2, {0, 2, 1, 3}, {-1, 0, 1, 2}));
  ExpectVerified(runs, {1, 2});
  EXPECT_EQ(runs[0].sends,
            (Messages{{{1, 1}, kWholeTileChunks}, {{1, 3}, kWholeTileChunks}}));
  EXPECT_EQ(runs[0].receives, (Messages{{{1, 2}, kWholeTileChunks}}));
  EXPECT_EQ(runs[1].sends, (Messages{{{0, 2}, kWholeTileChunks}}));
  EXPECT_EQ(runs[1].receives,
            (Messages{{{0, 1}, kWholeTileChunks}, {{0, 3}, kWholeTileChunks}}));
  EXPECT_EQ(runs[0].hops_done, (std::vector<int>{2}));
  EXPECT_EQ(runs[1].hops_done, (std::vector<int>{1, 3}));
}

TEST(RelayTreeTest, FanOutSendsToEveryChildAndTwoChildrenShareAWorker) {
  // The sender (worker 0) feeds positions 1 (worker 1), 2 and 3 (both on
  // worker 2, a segment each); position 2 feeds position 4 on worker 1.
  const std::vector<RecordedRelay> runs =
      RunRecorded(WholeTileRelay(3, 2, {0, 2, 4, 5, 3}, {-1, 0, 0, 0, 2}));
  ExpectVerified(runs, {0, 2, 2});
  EXPECT_EQ(runs[0].sends, (Messages{{{1, 1}, kWholeTileChunks},
                                     {{2, 2}, kWholeTileChunks},
                                     {{2, 3}, kWholeTileChunks}}));
  EXPECT_TRUE(runs[0].receives.empty());
  EXPECT_TRUE(runs[1].sends.empty());
  EXPECT_EQ(runs[1].receives,
            (Messages{{{0, 1}, kWholeTileChunks}, {{2, 4}, kWholeTileChunks}}));
  EXPECT_EQ(runs[2].sends, (Messages{{{1, 4}, kWholeTileChunks}}));
  EXPECT_EQ(runs[2].receives,
            (Messages{{{0, 2}, kWholeTileChunks}, {{0, 3}, kWholeTileChunks}}));
  EXPECT_TRUE(runs[0].hops_done.empty());
  EXPECT_EQ(runs[1].hops_done, (std::vector<int>{1, 4}));
  EXPECT_EQ(runs[2].hops_done, (std::vector<int>{2, 3}));
}

TEST(RelayTreeTest, AStepsOwnChunkSizeOverridesTheWorkers) {
  // 2720 bytes in chunks of 340 (the step's) instead of 96 (the worker's).
  TestJob job = WholeTileRelay(2, 2, {0, 2, 1, 3}, {-1, 0, 0, 1});
  job.plan().mutable_steps(0)->set_chunk_bytes(340);
  const std::vector<RecordedRelay> runs = RunRecorded(job);
  ExpectVerified(runs, {1, 2});
  EXPECT_EQ(runs[0].sends, (Messages{{{1, 1}, 8}}));
  EXPECT_EQ(runs[1].receives, (Messages{{{0, 1}, 8}}));
}

TEST(RelayTreeTest, StagingCountsTreeSegments) {
  RelayOptions options;
  options.chunk_bytes = 96;  // 24 int32: 29 chunks of the [40, 17] slice
  options.pipeline_depth = 2;
  const int64_t segment = 2 * 96;  // depth slots of one chunk
  const auto staging = [&](int workers, int devices_per_worker,
                           const std::vector<int>& devices,
                           const std::vector<int>& parents) {
    const TestJob job =
        WholeTileRelay(workers, devices_per_worker, devices, parents);
    std::vector<int64_t> bytes;
    for (int w = 0; w < workers; ++w) {
      const absl::StatusOr<ParsedProgram> program =
          ParseProgram(job.ProgramFor(w));
      EXPECT_TRUE(program.ok()) << program.status();
      if (!program.ok() || program->steps.size() != 1) return bytes;
      bytes.push_back(RelayStagingBytes(program->steps[0], *program, options));
    }
    return bytes;
  };
  // The tree: one segment per worker; the chain over the same devices: two.
  EXPECT_EQ(staging(2, 2, {0, 2, 1, 3}, {-1, 0, 0, 1}),
            (std::vector<int64_t>{segment, segment}));
  EXPECT_EQ(staging(2, 2, {0, 2, 1, 3}, {-1, 0, 1, 2}),
            (std::vector<int64_t>{2 * segment, 2 * segment}));
  // Position 2 on worker 0 hangs off position 1 (worker 1): its own
  // segment beside the sender's.
  EXPECT_EQ(staging(2, 2, {0, 2, 1}, {-1, 0, 1}),
            (std::vector<int64_t>{2 * segment, segment}));
  // Two children of the sender on worker 1: a segment each.
  EXPECT_EQ(staging(2, 2, {0, 2, 3}, {-1, 0, 0}),
            (std::vector<int64_t>{segment, 2 * segment}));
  // All on one worker: plain copies, no staging.
  EXPECT_EQ(staging(1, 4, {0, 1, 2, 3}, {-1, 0, 0, 2}),
            (std::vector<int64_t>{0}));
}

TEST(RelayTreeTest, ErrorsDescribeTheTree) {
  const TestJob job = WholeTileRelay(2, 2, {0, 2, 1, 3}, {-1, 0, 0, 1});
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  Cancellation cancellation;
  absl::StatusOr<BufferSet> buffers = BufferSet::Create(*program, cancellation);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  RelayEnvironment env;
  env.program = &*program;
  env.buffers = &*buffers;
  env.cancellation = &cancellation;  // and no communicator
  const absl::Status status = ExecuteRelayStep(program->steps[0], env);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "step 0 (tensor 0 slice [0:40,0:17] tree 0->2,0->1,2->3): the "
            "chain crosses workers but this job has no communicator");
}

}  // namespace
}  // namespace meshcast::worker
