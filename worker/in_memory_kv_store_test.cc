#include "worker/in_memory_kv_store.h"

#include <thread>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

TEST(InMemoryKvStoreTest, GetReturnsWhatSetStored) {
  InMemoryKvStore kv;
  ASSERT_TRUE(kv.Set("a", std::string("x\0y", 3)).ok());
  auto value = kv.Get("a", absl::ZeroDuration());
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, std::string("x\0y", 3));
  ASSERT_TRUE(kv.Set("a", "z").ok());
  EXPECT_EQ(*kv.Get("a", absl::ZeroDuration()), "z");
}

TEST(InMemoryKvStoreTest, GetWaitsForALaterSet) {
  InMemoryKvStore kv;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv.Set("late", "v").ok());
  });
  auto value = kv.Get("late", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "v");
}

TEST(InMemoryKvStoreTest, GetTimesOut) {
  InMemoryKvStore kv;
  const absl::Time start = absl::Now();
  auto value = kv.Get("never", absl::Milliseconds(50));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  EXPECT_NE(value.status().message().find("never"), std::string::npos);
}

}  // namespace
}  // namespace meshcast::worker
