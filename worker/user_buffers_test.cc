#include "worker/user_buffers.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/executor.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;
using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/user_buffers_test_", getpid(),
                      "_", name);
}

// A file holding `values` as int32, as a user process would write it.
std::string WriteInts(const std::string& name,
                      const std::vector<int32_t>& values) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(int32_t)));
  return path;
}

std::vector<int32_t> ReadInts(const std::string& path, size_t count) {
  std::vector<int32_t> values(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(count * sizeof(int32_t)));
  return values;
}

TEST(UserBuffersTest, RegisterAcquireListUnregister) {
  UserBuffers buffers;
  const std::string path = WriteInts("a", {1, 2, 3, 4});
  ASSERT_TRUE(buffers.Register({"w", 1, path, 16}).ok());
  absl::StatusOr<std::shared_ptr<UserBuffers::Mapping>> mapping =
      buffers.Acquire("w", 1, 16);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  int32_t third = 0;
  std::memcpy(&third, (*mapping)->data() + 8, 4);
  EXPECT_EQ(third, 3);
  // The mapping is the file: a write through it is what the user reads.
  const int32_t forty_two = 42;
  std::memcpy((*mapping)->data() + 4, &forty_two, 4);
  EXPECT_EQ(ReadInts(path, 4), (std::vector<int32_t>{1, 42, 3, 4}));

  std::vector<UserBuffers::Info> listed = buffers.List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "w");
  EXPECT_EQ(listed[0].device, 1);
  EXPECT_EQ(listed[0].size_bytes, 16);
  EXPECT_EQ(listed[0].jobs_using, 1);  // the mapping held above

  ASSERT_TRUE(buffers.Unregister("w", 1).ok());
  EXPECT_TRUE(buffers.List().empty());
  // A job that holds the mapping keeps it after Unregister.
  std::memcpy(&third, (*mapping)->data() + 8, 4);
  EXPECT_EQ(third, 3);
  EXPECT_EQ(buffers.Unregister("w", 1).code(), absl::StatusCode::kNotFound);
}

TEST(UserBuffersTest, BadRegistrationsNameTheProblem) {
  UserBuffers buffers;
  const std::string path = WriteInts("short", {1, 2});
  struct Case {
    UserBuffers::Info info;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"", 0, path, 8}, "buffer.name"},
           {{"x", -1, path, 8}, "must be >= 0"},
           {{"x", 0, "relative/file", 8}, "absolute path"},
           {{"x", 0, TempPath("missing"), 8}, "No such file"},
           {{"x", 0, path, 9}, "less than size_bytes 9"},
           {{"x", 0, ::testing::TempDir(), 8}, "path"}}) {
    const absl::Status status = buffers.Register(c.info);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.info.path;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.info.path;
  }
  EXPECT_TRUE(buffers.List().empty());
}

TEST(UserBuffersTest, AcquireChecksNameDeviceAndSize) {
  UserBuffers buffers;
  ASSERT_TRUE(buffers.Register({"w", 0, WriteInts("b", {1, 2, 3, 4}), 16}).ok());
  absl::StatusOr<std::shared_ptr<UserBuffers::Mapping>> missing =
      buffers.Acquire("w", 1, 16);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("registered: w@0"));
  EXPECT_EQ(buffers.Acquire("w", 0, 12).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A user's tensor moves between two workers over Gloo: worker 0's device 0
// lends the whole 8x6 int32 tensor; worker 1's devices 2 and 3 lend the two
// row halves. The data (not meshcast's pattern) lands in the users' files.
TEST(UserBuffersTest, AJobMovesUserDataIntoUserMemory) {
  constexpr int kRows = 8, kCols = 6;
  std::vector<int32_t> values(kRows * kCols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1000 + 7 * int(i);
  const std::string source = WriteInts("src", values);
  const std::string top =
      WriteInts("dst0", std::vector<int32_t>(kRows / 2 * kCols, -1));
  const std::string bottom =
      WriteInts("dst1", std::vector<int32_t>(kRows / 2 * kCols, -1));

  TestJob job(2, 2, "job-user-buffers");
  const int t = job.AddTensor({{kRows, kCols}, DType::kInt32});
  const int src = job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  const int dst0 = job.AddBuffer(2, t, {{0, kRows / 2}, {0, kCols}},
                                 BufferRole::kDestination);
  const int dst1 = job.AddBuffer(3, t, {{kRows / 2, kRows}, {0, kCols}},
                                 BufferRole::kDestination);
  job.plan().mutable_buffers(src)->set_user_buffer("train/t");
  job.plan().mutable_buffers(dst0)->set_user_buffer("infer/t");
  job.plan().mutable_buffers(dst1)->set_user_buffer("infer/t");
  job.AddSendRecvTransfers(t);

  // One registry for both in-process workers: names and local devices keep
  // them apart (global device 2 is worker 1's local device 0).
  auto buffers = std::make_shared<UserBuffers>();
  const int64_t half = kRows / 2 * kCols * 4;
  ASSERT_TRUE(buffers->Register({"train/t", 0, source, kRows * kCols * 4}).ok());
  ASSERT_TRUE(buffers->Register({"infer/t", 0, top, half}).ok());
  ASSERT_TRUE(buffers->Register({"infer/t", 1, bottom, half}).ok());
  ExecutorOptions options;
  options.user_buffers = buffers;
  options.devices_per_worker = 2;
  const TestJobOutcome outcome = RunTestJob(job, options);
  ASSERT_TRUE(outcome.all_ok) << outcome.results[0].status() << " "
                              << outcome.results[1].status();
  // Nothing meshcast knows to check: the user buffers are not verified.
  EXPECT_EQ(outcome.elements_verified, 0);
  EXPECT_EQ(ReadInts(top, kRows / 2 * kCols),
            std::vector<int32_t>(values.begin(),
                                 values.begin() + kRows / 2 * kCols));
  EXPECT_EQ(ReadInts(bottom, kRows / 2 * kCols),
            std::vector<int32_t>(values.begin() + kRows / 2 * kCols,
                                 values.end()));
  // The source was read, not overwritten with a pattern.
  EXPECT_EQ(ReadInts(source, values.size()), values);

  // With verify checksum, the workers report every tile's checksum: the
  // two destination halves add up to the source (the controller's check).
  job.set_verify(v1::VERIFY_MODE_CHECKSUM);
  const TestJobOutcome summed = RunTestJob(job, options);
  ASSERT_TRUE(summed.all_ok);
  uint64_t sent = 0, received = 0;
  int tiles = 0;
  for (const auto& result : summed.results) {
    for (const v1::TileChecksum& tile : result->tile_checksums()) {
      ++tiles;
      (tile.buffer() == src ? sent : received) += tile.checksum();
    }
  }
  EXPECT_EQ(tiles, 3);
  EXPECT_NE(sent, 0u);
  EXPECT_EQ(sent, received);

  // Without a registry, or with a buffer missing, the job fails by name.
  ExecutorOptions without;
  TestJobOutcome refused = RunTestJob(job, without);
  EXPECT_FALSE(refused.all_ok);
  EXPECT_THAT(std::string(refused.results[0].status().message()),
              HasSubstr("takes no user buffers"));
  ASSERT_TRUE(buffers->Unregister("infer/t", 1).ok());
  refused = RunTestJob(job, options);
  EXPECT_FALSE(refused.all_ok);
  EXPECT_THAT(std::string(refused.results[1].status().message()),
              HasSubstr("user buffer 'infer/t' of device 1 is not registered"));
}

}  // namespace
}  // namespace meshcast::worker
