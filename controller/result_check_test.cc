#include "controller/result_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

void AddBuffer(v1::WorkerProgram& program, int id, int device,
               v1::Buffer::Role role, int64_t rows, int64_t cols) {
  v1::Buffer* b = program.mutable_plan()->add_buffers();
  b->set_id(id);
  b->set_device(device);
  b->set_role(role);
  v1::Interval* r = b->add_box();
  r->set_begin(0);
  r->set_end(rows);
  v1::Interval* c = b->add_box();
  c->set_begin(0);
  c->set_end(cols);
}

void AddStep(v1::WorkerProgram& program, int id, v1::Step::Op op,
             int64_t bytes) {
  v1::Step* s = program.mutable_plan()->add_steps();
  s->set_id(id);
  s->set_op(op);
  s->set_bytes(bytes);
}

// Worker w1 drives devices 2 and 3. Its destination tiles: 4x4 on 2 and
// 2x8 on 3 = 32 elements; the program also holds a destination buffer of
// device 0 (the reference closure), which w1 does not verify.
v1::WorkerProgram Program() {
  v1::WorkerProgram program;
  program.set_worker("w1");
  program.add_local_devices(2);
  program.add_local_devices(3);
  AddBuffer(program, 0, 2, v1::Buffer::ROLE_SOURCE, 4, 4);
  AddBuffer(program, 1, 2, v1::Buffer::ROLE_DESTINATION, 4, 4);
  AddBuffer(program, 2, 3, v1::Buffer::ROLE_DESTINATION, 2, 8);
  AddBuffer(program, 3, 0, v1::Buffer::ROLE_DESTINATION, 100, 100);
  AddStep(program, 7, v1::Step::OP_SEND_RECV, 64);
  AddStep(program, 9, v1::Step::OP_ALL_REDUCE, 4 * kMiB);
  AddStep(program, 11, v1::Step::OP_COMPUTE, 64 * kMiB);
  return program;
}

// What an honest worker reports: every step at 1 GB/s.
v1::JobResult Honest(const v1::WorkerProgram& program) {
  v1::JobResult result;
  result.set_seconds(0.5);
  result.set_elements_verified(32);
  for (const v1::Step& step : program.plan().steps()) {
    v1::StepResult* s = result.add_steps();
    s->set_step(step.id());
    s->set_bytes(step.bytes());
    s->set_seconds(std::max(1e-6, step.bytes() / 1e9));
  }
  return result;
}

// 10x of a 10 GB/s link.
const ResultCheckOptions kOptions{.max_bytes_per_second = 100e9};

TEST(ResultCheckTest, AcceptsAnHonestReport) {
  const v1::WorkerProgram program = Program();
  EXPECT_TRUE(CheckWorkerResult(program, Honest(program), kOptions).ok());
  // A worker may leave out steps (a subset is no contradiction).
  v1::JobResult fewer = Honest(program);
  fewer.mutable_steps()->RemoveLast();
  EXPECT_TRUE(CheckWorkerResult(program, fewer, kOptions).ok());
}

TEST(ResultCheckTest, RefusesAStepTheWorkerDoesNotOwn) {
  const v1::WorkerProgram program = Program();
  v1::JobResult result = Honest(program);
  result.mutable_steps(0)->set_step(8);
  absl::Status status = CheckWorkerResult(program, result, kOptions);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("worker w1: result contradicts the plan: step 8 is "
                        "not a step of its program"));
  result = Honest(program);
  *result.add_steps() = result.steps(1);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("step 9 is reported twice"));
}

TEST(ResultCheckTest, RefusesBytesUnlikeThePlans) {
  const v1::WorkerProgram program = Program();
  v1::JobResult result = Honest(program);
  result.mutable_steps(0)->set_bytes(65);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("step 7 reports 65 bytes; the plan has 64"));
}

TEST(ResultCheckTest, RefusesImpossibleRates) {
  const v1::WorkerProgram program = Program();
  v1::JobResult result = Honest(program);
  // 4 MiB in 10 us = 419 GB/s, above the 100 GB/s bound.
  result.mutable_steps(1)->set_seconds(10e-6);
  absl::Status status = CheckWorkerResult(program, result, kOptions);
  EXPECT_THAT(status.message(), HasSubstr("worker w1"));
  EXPECT_THAT(status.message(), HasSubstr("step 9 moved 4194304 bytes"));
  // Just under the bound passes: 4 MiB / 100e9 B/s = 41.9 us.
  result.mutable_steps(1)->set_seconds(4 * kMiB / 100e9 * 1.01);
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());
  // Zero seconds for a large step is impossible too.
  result.mutable_steps(1)->set_seconds(0);
  EXPECT_FALSE(CheckWorkerResult(program, result, kOptions).ok());
  // Without a bound, only the sign is checked.
  EXPECT_TRUE(CheckWorkerResult(program, result, {}).ok());
  result.mutable_steps(1)->set_seconds(-1);
  EXPECT_THAT(CheckWorkerResult(program, result, {}).message(),
              HasSubstr("step 9 reports negative seconds"));
  // Small steps and compute steps are not rate-checked.
  result = Honest(program);
  result.mutable_steps(0)->set_seconds(0);
  result.mutable_steps(2)->set_seconds(1e-9);
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());
}

TEST(ResultCheckTest, CollectivesOverOneDeviceTakeNoTime) {
  v1::WorkerProgram program = Program();
  // Step 9's group: device 2 alone (a one-rank all-gather in place).
  v1::CommGroup* alone = program.mutable_plan()->add_groups();
  alone->set_id(5);
  alone->add_devices(2);
  program.mutable_plan()->mutable_steps(1)->set_group(5);
  v1::JobResult result = Honest(program);
  result.mutable_steps(1)->set_seconds(7e-6);
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());
  // Over two devices the same report is impossible.
  alone->add_devices(3);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("step 9 moved 4194304 bytes"));
}

TEST(ResultCheckTest, RefusesVerificationCountsUnlikeItsTiles) {
  v1::WorkerProgram program = Program();
  v1::JobResult result = Honest(program);
  // Full: exactly its own destination elements (not device 0's 10000).
  result.set_elements_verified(32 + 10000);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("worker w1: result contradicts the plan: verified "
                        "10032 elements; its destination buffers hold 32"));
  result.set_elements_verified(31);
  EXPECT_FALSE(CheckWorkerResult(program, result, kOptions).ok());
  // Sample: at most its elements.
  program.set_verify(v1::VERIFY_MODE_SAMPLE);
  result.set_elements_verified(20);
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());
  result.set_elements_verified(33);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("sampled 33 elements"));
  // Off: none.
  program.set_verify(v1::VERIFY_MODE_OFF);
  result.set_elements_verified(0);
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());
  result.set_elements_verified(1);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("with verification off"));
  // Mismatches cannot exceed what was verified.
  program.set_verify(v1::VERIFY_MODE_FULL);
  result.set_elements_verified(32);
  result.set_mismatches(33);
  EXPECT_THAT(CheckWorkerResult(program, result, kOptions).message(),
              HasSubstr("33 mismatches of only 32 elements verified"));
}

TEST(ResultCheckTest, BoundIsAMultipleOfTheFastestLinkOrMemoryCopy) {
  Topology topology;
  topology.inter_host_bandwidth = 1e9;
  topology.intra_host_bandwidth = 500e9;  // NVLink-class
  topology.host_copy_bandwidth = 2e9;
  EXPECT_DOUBLE_EQ(MaxPlausibleBytesPerSecond(topology, 10), 5000e9);
  topology.host_copy_bandwidth = 700e9;
  EXPECT_DOUBLE_EQ(MaxPlausibleBytesPerSecond(topology, 10), 7000e9);
  // Slow modelled links: a memory copy inside a worker is still plausible.
  topology.intra_host_bandwidth = 1e9;
  topology.host_copy_bandwidth = 0;
  EXPECT_DOUBLE_EQ(MaxPlausibleBytesPerSecond(topology, 10),
                   10 * kMemoryCopyBytesPerSecond);
  EXPECT_DOUBLE_EQ(MaxPlausibleBytesPerSecond(topology, 0), 0);
  // GPU devices: a copy between virtual devices of one GPU runs at its
  // memory bandwidth (525 GB/s of payload was seen on an H200).
  topology.SetDeviceRates(*DeviceRatesFor("h200"));
  EXPECT_DOUBLE_EQ(MaxPlausibleBytesPerSecond(topology, 10), 10 * 4.8e12);
}

// Verify CHECKSUM: one checksum per source and destination tile of the
// worker's own devices (buffers 0, 1 and 2), nothing verified.
TEST(ResultCheckTest, ChecksumModeWantsOneChecksumPerOwnTile) {
  v1::WorkerProgram program = Program();
  program.set_verify(v1::VERIFY_MODE_CHECKSUM);
  v1::JobResult result = Honest(program);
  result.set_elements_verified(0);
  for (int buffer : {0, 1, 2}) {
    v1::TileChecksum* tile = result.add_tile_checksums();
    tile->set_buffer(buffer);
    tile->set_checksum(1000 + buffer);
  }
  EXPECT_TRUE(CheckWorkerResult(program, result, kOptions).ok());

  v1::JobResult verified = result;
  verified.set_elements_verified(32);
  EXPECT_THAT(std::string(CheckWorkerResult(program, verified, kOptions).message()),
              HasSubstr("verified 32 elements with verify checksum"));
  v1::JobResult missing = result;
  missing.mutable_tile_checksums()->RemoveLast();
  EXPECT_THAT(std::string(CheckWorkerResult(program, missing, kOptions).message()),
              HasSubstr("checksums of 2 of its 3 tiles"));
  v1::JobResult foreign = result;
  foreign.mutable_tile_checksums(0)->set_buffer(3);  // device 0's
  EXPECT_THAT(std::string(CheckWorkerResult(program, foreign, kOptions).message()),
              HasSubstr("buffer 3"));
  v1::JobResult twice = result;
  twice.mutable_tile_checksums(1)->set_buffer(0);
  EXPECT_FALSE(CheckWorkerResult(program, twice, kOptions).ok());
}

// A 1-D tensor 0 of 8 elements: sources on devices 0 and 1 (halves),
// destinations replicated on devices 2 and 3 (whole); tensor 1 is computed
// (a destination only). Checksums are arbitrary numbers that add up.
struct ChecksumCase {
  v1::Plan plan;
  v1::JobResult w0, w1;
};

ChecksumCase Checksums() {
  ChecksumCase c;
  auto add = [&](int id, int tensor, int device, v1::Buffer::Role role,
                 int64_t begin, int64_t end) {
    v1::Buffer* b = c.plan.add_buffers();
    b->set_id(id);
    b->set_tensor(tensor);
    b->set_device(device);
    b->set_role(role);
    v1::Interval* i = b->add_box();
    i->set_begin(begin);
    i->set_end(end);
  };
  add(0, 0, 0, v1::Buffer::ROLE_SOURCE, 0, 4);
  add(1, 0, 1, v1::Buffer::ROLE_SOURCE, 4, 8);
  add(2, 0, 2, v1::Buffer::ROLE_DESTINATION, 0, 8);
  add(3, 0, 3, v1::Buffer::ROLE_DESTINATION, 0, 8);
  add(4, 1, 2, v1::Buffer::ROLE_DESTINATION, 0, 8);
  add(5, 0, 0, v1::Buffer::ROLE_SCRATCH, 0, 4);
  auto put = [](v1::JobResult& r, int buffer, uint64_t sum) {
    v1::TileChecksum* t = r.add_tile_checksums();
    t->set_buffer(buffer);
    t->set_checksum(sum);
  };
  put(c.w0, 0, 0xFFFFFFFFFFFFFFF0ULL);  // sums wrap mod 2^64
  put(c.w0, 1, 0x25);
  put(c.w1, 2, 0x15);
  put(c.w1, 3, 0x15);
  put(c.w1, 4, 0x999);
  return c;
}

TEST(ResultCheckTest, TensorChecksumsAddUpAcrossWorkers) {
  ChecksumCase c = Checksums();
  EXPECT_TRUE(CheckTensorChecksums(c.plan, {&c.w0, &c.w1}).ok());

  ChecksumCase corrupt = Checksums();
  corrupt.w1.mutable_tile_checksums(0)->set_checksum(0x16);
  corrupt.w1.mutable_tile_checksums(1)->set_checksum(0x16);
  const absl::Status lost = CheckTensorChecksums(corrupt.plan,
                                                 {&corrupt.w0, &corrupt.w1});
  EXPECT_EQ(lost.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(lost.message()),
              HasSubstr("tensor 0: its destinations hold other data"));

  ChecksumCase replica = Checksums();
  replica.w1.mutable_tile_checksums(1)->set_checksum(0x14);
  EXPECT_THAT(std::string(CheckTensorChecksums(replica.plan,
                                               {&replica.w0, &replica.w1})
                              .message()),
              HasSubstr("destination tiles of box [0,8) differ"));

  ChecksumCase silent = Checksums();
  silent.w0.mutable_tile_checksums()->RemoveLast();
  EXPECT_THAT(std::string(CheckTensorChecksums(silent.plan,
                                               {&silent.w0, &silent.w1})
                              .message()),
              HasSubstr("no worker reported buffer 1"));
}

}  // namespace
}  // namespace meshcast
