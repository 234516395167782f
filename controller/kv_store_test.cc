#include "controller/kv_store.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
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
    ASSERT_TRUE(kv.Set("job/j/rank0", "addr").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = kv.Get("job/j/rank0", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "addr");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, GetTimesOut) {
  KvStore kv;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v =
      kv.Get("job/j/missing", absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("job/j/missing"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, KeysMustBeInAJobNamespace) {
  KvStore kv;
  for (const char* key : {"rank0", "job/", "job//x", "job/j1", "job/j1/",
                          "jobs/j1/x", "/job/j1/x"}) {
    absl::Status status = kv.Set(key, "v");
    EXPECT_TRUE(absl::IsPermissionDenied(status)) << key << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("job/<job_id>/"));
  }
  EXPECT_EQ(*KvJobOf("job/job-000007/gloo/0"), "job-000007");
  EXPECT_EQ(KvPrefixOf("job-000007"), "job/job-000007/");
  EXPECT_TRUE(
      absl::IsPermissionDenied(kv.Get("rank0", absl::ZeroDuration()).status()));
  EXPECT_EQ(kv.size(), 0u);
}

TEST(KvStoreTest, DeletePrefixRemovesOneJobOnly) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("job/job-000001/gloo/0", "a").ok());
  ASSERT_TRUE(kv.Set("job/job-000001/gloo/1", "b").ok());
  ASSERT_TRUE(kv.Set("job/job-0000010/gloo/0", "c").ok());
  ASSERT_TRUE(kv.Set("job/job-000002/gloo/0", "d").ok());
  EXPECT_EQ(kv.DeletePrefix("job/job-000001/"), 2);
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv.usage("job-000001").keys, 0u);
  EXPECT_EQ(kv.usage("job-000001").bytes, 0u);
  EXPECT_EQ(kv.usage("job-0000010").keys, 1u);
  EXPECT_TRUE(kv.Get("job/job-0000010/gloo/0", absl::ZeroDuration()).ok());
  EXPECT_FALSE(kv.Get("job/job-000001/gloo/0", absl::ZeroDuration()).ok());
}

TEST(KvStoreTest, DeletePrefixEndsTheJobsWaiters) {
  KvStore kv;
  absl::Notification done;
  absl::Status result;
  kv.GetAsync("job/j1/never", absl::Seconds(30),
              [&](absl::StatusOr<std::string> v) {
                result = v.status();
                done.Notify();
              });
  absl::Notification other_done;
  kv.GetAsync("job/j2/x", absl::Seconds(30),
              [&](absl::StatusOr<std::string>) { other_done.Notify(); });
  EXPECT_EQ(kv.waiters(), 2u);
  kv.DeletePrefix("job/j1/");
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsAborted(result)) << result;
  EXPECT_THAT(result.message(), HasSubstr("job ended"));
  EXPECT_FALSE(other_done.HasBeenNotified());
  EXPECT_EQ(kv.waiters(), 1u);
  ASSERT_TRUE(kv.Set("job/j2/x", "v").ok());
  EXPECT_TRUE(other_done.HasBeenNotified());
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, CancelWaitCompletesOnceWithCancelled) {
  KvStore kv;
  std::atomic<int> calls{0};
  absl::Status result;
  const KvStore::WaiterId id = kv.GetAsync("job/j/k", absl::Seconds(30),
                                           [&](absl::StatusOr<std::string> v) {
                                             result = v.status();
                                             ++calls;
                                           });
  ASSERT_NE(id, 0u);
  EXPECT_EQ(kv.waiters(), 1u);
  EXPECT_TRUE(kv.CancelWait(id));
  EXPECT_FALSE(kv.CancelWait(id));
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
  EXPECT_EQ(kv.waiters(), 0u);
  // A later Set of the key does not call it again.
  ASSERT_TRUE(kv.Set("job/j/k", "v").ok());
  EXPECT_EQ(calls.load(), 1);
  // A key already there completes at once, with no waiter.
  EXPECT_EQ(kv.GetAsync("job/j/k", absl::Seconds(1),
                        [&](absl::StatusOr<std::string> v) {
                          EXPECT_EQ(*v, "v");
                          ++calls;
                        }),
            0u);
  EXPECT_EQ(calls.load(), 2);
}

TEST(KvStoreTest, ManyWaitersNeedNoThreadsAndTimeOutInOrder) {
  KvStore kv;
  constexpr int kWaiters = 1000;
  std::atomic<int> expired{0};
  for (int i = 0; i < kWaiters; ++i) {
    kv.GetAsync(absl::StrCat("job/j/", i), absl::Milliseconds(20 + i % 50),
                [&](absl::StatusOr<std::string> v) {
                  if (absl::IsDeadlineExceeded(v.status())) ++expired;
                });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (kv.waiters() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(kv.waiters(), 0u);
  EXPECT_EQ(expired.load(), kWaiters);
}

TEST(KvStoreTest, PerJobQuotaOfKeys) {
  KvStore::Options options;
  options.max_keys_per_job = 3;
  KvStore kv(options);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(kv.Set(absl::StrCat("job/job-1/k", i), "v").ok());
  }
  absl::Status status = kv.Set("job/job-1/k3", "v");
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("job \"job-1\""));
  EXPECT_THAT(status.message(), HasSubstr("3 keys per job"));
  // Replacing a key is not a new key; another job has its own quota.
  EXPECT_TRUE(kv.Set("job/job-1/k0", "w").ok());
  EXPECT_TRUE(kv.Set("job/job-2/k0", "v").ok());
  EXPECT_EQ(kv.usage("job-1").keys, 3u);
  // Once the job's keys are gone its quota is free again.
  kv.DeletePrefix(KvPrefixOf("job-1"));
  EXPECT_TRUE(kv.Set("job/job-1/k3", "v").ok());
}

TEST(KvStoreTest, PerJobQuotaOfBytes) {
  KvStore::Options options;
  options.max_bytes_per_job = 1000;
  KvStore kv(options);
  const std::string key = "job/job-9/a";  // 11 bytes
  ASSERT_TRUE(kv.Set(key, std::string(989, 'x')).ok());
  EXPECT_EQ(kv.usage("job-9").bytes, 1000u);
  absl::Status status = kv.Set("job/job-9/b", "y");
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("job \"job-9\""));
  EXPECT_THAT(status.message(), HasSubstr("1000 bytes per job"));
  // A smaller replacement fits; the count follows.
  ASSERT_TRUE(kv.Set(key, "small").ok());
  EXPECT_EQ(kv.usage("job-9").bytes, key.size() + 5);
  EXPECT_TRUE(kv.Set("job/job-9/b", "y").ok());
}

TEST(KvStoreTest, GlobalLimitsStillHold) {
  KvStore::Options options;
  options.max_keys = 2;
  options.max_waiters = 1;
  KvStore kv(options);
  ASSERT_TRUE(kv.Set("job/a/k", "v").ok());
  ASSERT_TRUE(kv.Set("job/b/k", "v").ok());
  EXPECT_TRUE(absl::IsResourceExhausted(kv.Set("job/c/k", "v")));
  EXPECT_EQ(kv.usage("c").keys, 0u);
  absl::Status second;
  EXPECT_NE(kv.GetAsync("job/a/w1", absl::Seconds(30),
                        [](absl::StatusOr<std::string>) {}),
            0u);
  kv.GetAsync("job/a/w2", absl::Seconds(30),
              [&](absl::StatusOr<std::string> v) { second = v.status(); });
  EXPECT_TRUE(absl::IsResourceExhausted(second)) << second;
  EXPECT_EQ(kv.waiters(), 1u);
}

TEST(KvStoreTest, ShutdownWakesWaiters) {
  KvStore kv;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    kv.Shutdown();
  });
  absl::StatusOr<std::string> v = kv.Get("job/j/never", absl::Seconds(30));
  closer.join();
  EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
  EXPECT_TRUE(absl::IsUnavailable(kv.Set("job/j/x", "v")));
  kv.Shutdown();  // idempotent
}

TEST(KvStoreTest, RejectsBadKeysAndValues) {
  KvStore kv;
  EXPECT_TRUE(absl::IsInvalidArgument(kv.Set("", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      kv.Set("job/j/" + std::string(KvStore::kMaxKeyBytes, 'k'), "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      kv.Set("job/j/k", std::string(KvStore::kMaxValueBytes + 1, 'v'))));
  EXPECT_TRUE(
      absl::IsInvalidArgument(kv.Get("", absl::ZeroDuration()).status()));
  EXPECT_EQ(kv.size(), 0u);
}

}  // namespace
}  // namespace meshcast
