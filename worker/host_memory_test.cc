#include "worker/host_memory.h"

#include <map>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;
using testing::TestJob;

TEST(ParseMemAvailableTest, ReadsTheKilobyteLine) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   22333444 kB\n"
      "Buffers:           12345 kB\n";
  absl::StatusOr<int64_t> bytes = ParseMemAvailable(meminfo);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, int64_t{22333444} * 1024);
}

TEST(ParseMemAvailableTest, MissingOrGarbledLineIsAnError) {
  EXPECT_EQ(ParseMemAvailable("MemTotal: 10 kB\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: lots kB\n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReadMemAvailableTest, ThisHostHasSome) {
  absl::StatusOr<int64_t> bytes = ReadMemAvailable();
  if (!bytes.ok()) GTEST_SKIP() << "no /proc/meminfo: " << bytes.status();
  EXPECT_GT(*bytes, 0);
}

TEST(CgroupMemoryTest, ParsesTheV2PathAndMemoryFiles) {
  EXPECT_EQ(*ParseCgroupV2Path("0::/kubepods/pod7/c1\n"), "/kubepods/pod7/c1");
  // A hybrid host lists v1 controllers too.
  EXPECT_EQ(*ParseCgroupV2Path("12:memory:/x\n1:name=systemd:/y\n0::/z\n"),
            "/z");
  EXPECT_TRUE(absl::IsNotFound(
      ParseCgroupV2Path("4:memory:/docker/abc\n").status()));
  EXPECT_EQ(*ParseCgroupMemoryMax("max\n"), std::nullopt);
  EXPECT_EQ(*ParseCgroupMemoryMax("536870912\n"), int64_t{536870912});
  EXPECT_TRUE(absl::IsInvalidArgument(ParseCgroupMemoryMax("lots").status()));
  EXPECT_EQ(*ParseCgroupBytes("1234\n"), 1234);
  EXPECT_FALSE(ParseCgroupBytes("-1").ok());
}

// Files of a fake cgroup tree: path -> text; others are unreadable.
ReadFileFn FakeFiles(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> absl::StatusOr<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError(path);
    return it->second;
  };
}

TEST(CgroupMemoryTest, TakesTheTightestLimitedLevel) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // The container's own cgroup is unlimited; its pod has 4 GiB, 1 GiB used.
  const ReadFileFn files = FakeFiles({
      {"/cg/pod/c1/memory.max", "max\n"},
      {"/cg/pod/c1/memory.current", "100\n"},
      {"/cg/pod/memory.max", std::to_string(4 * kGiB) + "\n"},
      {"/cg/pod/memory.current", std::to_string(kGiB) + "\n"},
  });
  std::optional<CgroupMemory> memory =
      CgroupMemoryOf("0::/pod/c1\n", "/cg", files);
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->limit, 4 * kGiB);
  EXPECT_EQ(memory->available(), 3 * kGiB);
  // min of both: the cgroup's when it is tighter than the host's...
  EXPECT_EQ(CombineAvailable(64 * kGiB, memory), 3 * kGiB);
  EXPECT_EQ(CombineTotal(128 * kGiB, memory), 4 * kGiB);
  // ...the host's when that is.
  EXPECT_EQ(CombineAvailable(2 * kGiB, memory), 2 * kGiB);
  // A tighter own limit wins over the parent's.
  const ReadFileFn tighter = FakeFiles({
      {"/cg/pod/c1/memory.max", std::to_string(2 * kGiB)},
      {"/cg/pod/c1/memory.current", std::to_string(kGiB + kGiB / 2)},
      {"/cg/pod/memory.max", std::to_string(4 * kGiB)},
      {"/cg/pod/memory.current", std::to_string(kGiB)},
  });
  memory = CgroupMemoryOf("0::/pod/c1\n", "/cg", tighter);
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->available(), kGiB / 2);
  // Over its limit (reclaim pending): nothing available, not negative.
  EXPECT_EQ((CgroupMemory{kGiB, 2 * kGiB}).available(), 0);
  // The namespaced root ("0::/"): the files at the mount point.
  memory = CgroupMemoryOf("0::/\n", "/cg",
                          FakeFiles({{"/cg/memory.max", "1000"},
                                     {"/cg/memory.current", "400"}}));
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->available(), 600);
}

TEST(CgroupMemoryTest, FallsBackToMeminfoWhenNotLimited) {
  // Unlimited everywhere, no files (v1 host or no /sys), no v2 line.
  EXPECT_EQ(CgroupMemoryOf("0::/a\n", "/cg",
                           FakeFiles({{"/cg/a/memory.max", "max"},
                                      {"/cg/a/memory.current", "5"}})),
            std::nullopt);
  EXPECT_EQ(CgroupMemoryOf("0::/a\n", "/cg", FakeFiles({})), std::nullopt);
  EXPECT_EQ(CgroupMemoryOf("3:memory:/a\n", "/cg", FakeFiles({})),
            std::nullopt);
  EXPECT_EQ(CombineAvailable(12345, std::nullopt), 12345);
  EXPECT_EQ(CombineTotal(99999, std::nullopt), 99999);
}

TEST(HostMemoryTest, ReadsMemTotalToo) {
  EXPECT_EQ(*ParseMeminfoField("MemTotal:       24000 kB\nMemFree: 1 kB\n",
                               "MemTotal"),
            24000 * 1024);
  EXPECT_TRUE(absl::IsNotFound(
      ParseMeminfoField("MemFree: 1 kB\n", "MemTotal").status()));
  const absl::StatusOr<int64_t> total = ReadMemTotal();
  ASSERT_TRUE(total.ok()) << total.status();
  const absl::StatusOr<int64_t> available = ReadMemAvailable();
  ASSERT_TRUE(available.ok()) << available.status();
  EXPECT_GE(*total, *available);
}

// Worker 0 holds a 64x1000 int32 source and relays a slice of it to
// worker 1 (one segment) and back to its own device 1 (a second segment).
TestJob TwoSegmentJob() {
  TestJob job(2, 2, "job-mem");
  const int t = job.AddTensor({{64, 1000}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 2, 1});
  return job;
}

TEST(HostMemoryNeedTest, CountsTilesAndStagingOfEverySegment) {
  absl::StatusOr<ParsedProgram> program =
      ParseProgram(TwoSegmentJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  RelayOptions relay;
  relay.chunk_bytes = 10000;
  relay.pipeline_depth = 3;
  const HostMemoryNeed need = HostMemoryNeedOf(*program, relay, 16);
  EXPECT_EQ(need.tiles, 2);
  EXPECT_EQ(need.tile_bytes, 2 * 64 * 1000 * 4);
  // Two segments (positions 0 and 2) of 3 slots of 10000 bytes.
  EXPECT_EQ(need.staging_bytes, 2 * 3 * 10000);
  EXPECT_EQ(need.total(), need.tile_bytes + need.staging_bytes);
}

// Five relays from worker 0 to worker 1 of one slice each: as a chain of
// deps (iterations of one move) they never run at once and need one step's
// staging; independent, all five may run together.
TEST(HostMemoryNeedTest, StepsOnOneDependencyPathShareTheirStaging) {
  for (const bool chained : {true, false}) {
    TestJob job(2, 2, "job-path");
    const int t = job.AddTensor({{64, 1000}, DType::kInt32});
    job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
    job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
    int previous = -1;
    for (int k = 0; k < 5; ++k) {
      std::vector<int> deps;
      if (chained && previous >= 0) deps.push_back(previous);
      previous = job.AddTransfer(t, job.FullBox(t), {0, 2}, deps);
    }
    absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
    ASSERT_TRUE(program.ok()) << program.status();
    RelayOptions relay;
    relay.chunk_bytes = 10000;
    relay.pipeline_depth = 3;
    const HostMemoryNeed need = HostMemoryNeedOf(*program, relay, 16);
    EXPECT_EQ(need.staging_bytes, (chained ? 1 : 5) * 3 * 10000)
        << (chained ? "chained" : "independent");
    // At most max_concurrent_steps of the independent ones at once.
    EXPECT_EQ(HostMemoryNeedOf(*program, relay, 2).staging_bytes,
              (chained ? 1 : 2) * 3 * 10000);
  }
}

TEST(HostMemoryNeedTest, LocalChainsNeedNoStaging) {
  TestJob job(1, 2, "job-local");
  const int t = job.AddTensor({{16}, DType::kInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  absl::StatusOr<ParsedProgram> program = ParseProgram(job.ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  const HostMemoryNeed need = HostMemoryNeedOf(*program, RelayOptions(), 16);
  EXPECT_EQ(need.tile_bytes, 32);
  EXPECT_EQ(need.staging_bytes, 0);
}

// OP_SEND_RECV between two operands (no tensor, no slice): its staging is
// that of its operands' region, on the worker that sends and on the one
// that receives; between devices of one worker it is a copy, no staging.
TEST(HostMemoryNeedTest, OperandSendRecvCountsItsRegion) {
  TestJob job(2, 2, "job-operands");
  const int x = job.AddTensor({{64, 1000}, DType::kFloat32});
  const int z = job.AddTensor({{32000}, DType::kFloat32});
  const int from = job.AddBuffer(0, x, job.FullBox(x), BufferRole::kSource);
  const int to = job.AddBuffer(2, z, job.FullBox(z), BufferRole::kScratch);
  const int local = job.AddBuffer(1, z, job.FullBox(z), BufferRole::kScratch);
  for (const auto& [buffer, device] : {std::pair{to, 2}, {local, 1}}) {
    v1::Step step;
    step.set_op(v1::Step::OP_SEND_RECV);
    *step.add_inputs() = TestJob::Operand(from, {{0, 32}, {0, 1000}});
    *step.add_outputs() = TestJob::Operand(buffer);
    job.AddStep(step, {0, device});
  }
  RelayOptions relay;
  relay.chunk_bytes = 10000;
  relay.pipeline_depth = 3;
  for (int worker = 0; worker < 2; ++worker) {
    absl::StatusOr<ParsedProgram> program =
        ParseProgram(job.ProgramFor(worker));
    ASSERT_TRUE(program.ok()) << program.status();
    const HostMemoryNeed need = HostMemoryNeedOf(*program, relay, 16);
    EXPECT_EQ(need.staging_bytes, 3 * 10000) << "worker " << worker;
    // Worker 0: X and the local copy's Z; worker 1: its Z.
    EXPECT_EQ(need.tile_bytes,
              worker == 0 ? (64 * 1000 + 32000) * 4 : 32000 * 4);
  }
}

TEST(CheckHostMemoryTest, RefusesWhatDoesNotFitNamingWorkerAndSizes) {
  absl::StatusOr<ParsedProgram> program =
      ParseProgram(TwoSegmentJob().ProgramFor(0));
  ASSERT_TRUE(program.ok()) << program.status();
  HostMemoryNeed need;
  need.tiles = 2;
  need.tile_bytes = int64_t{128} << 30;
  need.staging_bytes = 0;
  const absl::Status status =
      CheckHostMemory(*program, need, [] { return int64_t{21} << 30; });
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("worker worker0"));
  EXPECT_THAT(status.message(), HasSubstr("job job-mem"));
  EXPECT_THAT(status.message(),
              HasSubstr("needs 128.0 GiB for its tiles, 21.0 GiB available"));

  // Enough, exactly enough, or no figure at all: accepted.
  EXPECT_TRUE(
      CheckHostMemory(*program, need, [] { return int64_t{1} << 40; }).ok());
  EXPECT_TRUE(
      CheckHostMemory(*program, need, [&] { return need.total(); }).ok());
  EXPECT_TRUE(CheckHostMemory(*program, need, [] {
                return absl::StatusOr<int64_t>(absl::UnavailableError("no"));
              }).ok());
  EXPECT_TRUE(CheckHostMemory(*program, need, nullptr).ok());
}

TEST(OutOfHostMemoryErrorTest, IsResourceExhaustedWithTheSizes) {
  absl::StatusOr<ParsedProgram> program =
      ParseProgram(TwoSegmentJob().ProgramFor(1));
  ASSERT_TRUE(program.ok()) << program.status();
  HostMemoryNeed need;
  need.tiles = 1;
  need.tile_bytes = int64_t{3} << 20;
  const absl::Status status = OutOfHostMemoryError(
      *program, need, [] { return int64_t{1} << 20; }, "std::bad_alloc");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("worker worker1"));
  EXPECT_THAT(status.message(), HasSubstr("std::bad_alloc"));
  EXPECT_THAT(status.message(),
              HasSubstr("needs 3.0 MiB for its tiles, 1.0 MiB available"));
}

}  // namespace
}  // namespace meshcast::worker
