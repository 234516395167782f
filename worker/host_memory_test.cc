#include "worker/host_memory.h"

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
