#include "controller/kv_store.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

TEST(KvStoreTest, SetThenGet) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("job/a/x", "1").ok());
  absl::StatusOr<std::string> v = kv.Get("job/a/x", absl::ZeroDuration());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "1");
  ASSERT_TRUE(kv.Set("job/a/x", std::string("\0bin", 4)).ok());
  EXPECT_EQ(*kv.Get("job/a/x", absl::ZeroDuration()), std::string("\0bin", 4));
}

TEST(KvStoreTest, GetWaitsForALaterSet) {
  KvStore kv;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv.Set("rank0", "addr").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = kv.Get("rank0", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "addr");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(KvStoreTest, GetTimesOut) {
  KvStore kv;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = kv.Get("missing", absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("missing"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
}

TEST(KvStoreTest, DeletePrefixRemovesOneJobOnly) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("job/job-000001/gloo/0", "a").ok());
  ASSERT_TRUE(kv.Set("job/job-000001/gloo/1", "b").ok());
  ASSERT_TRUE(kv.Set("job/job-0000010/gloo/0", "c").ok());
  ASSERT_TRUE(kv.Set("job/job-000002/gloo/0", "d").ok());
  EXPECT_EQ(kv.DeletePrefix("job/job-000001/"), 2);
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_TRUE(kv.Get("job/job-0000010/gloo/0", absl::ZeroDuration()).ok());
  EXPECT_FALSE(kv.Get("job/job-000001/gloo/0", absl::ZeroDuration()).ok());
}

TEST(KvStoreTest, ShutdownWakesWaiters) {
  KvStore kv;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    kv.Shutdown();
  });
  absl::StatusOr<std::string> v = kv.Get("never", absl::Seconds(30));
  closer.join();
  EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
}

TEST(KvStoreTest, RejectsBadKeysAndValues) {
  KvStore kv;
  EXPECT_TRUE(absl::IsInvalidArgument(kv.Set("", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      kv.Set(std::string(KvStore::kMaxKeyBytes + 1, 'k'), "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      kv.Set("k", std::string(KvStore::kMaxValueBytes + 1, 'v'))));
  EXPECT_TRUE(
      absl::IsInvalidArgument(kv.Get("", absl::ZeroDuration()).status()));
  EXPECT_EQ(kv.size(), 0u);
}

}  // namespace
}  // namespace meshcast
