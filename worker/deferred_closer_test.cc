#include "worker/deferred_closer.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

// Counts its destructions, optionally blocking in the destructor until
// released, and records the thread it was destroyed on.
class Tracked {
 public:
  Tracked(std::atomic<int>* destroyed, absl::Notification* release = nullptr,
          std::thread::id* destroyed_on = nullptr)
      : destroyed_(destroyed), release_(release), destroyed_on_(destroyed_on) {}
  ~Tracked() {
    if (release_ != nullptr) release_->WaitForNotification();
    if (destroyed_on_ != nullptr) *destroyed_on_ = std::this_thread::get_id();
    destroyed_->fetch_add(1);
  }

 private:
  std::atomic<int>* const destroyed_;
  absl::Notification* const release_;
  std::thread::id* const destroyed_on_;
};

TEST(DeferredCloserTest, DestroysOnItsOwnThreadAndDrainWaits) {
  std::atomic<int> destroyed{0};
  std::thread::id destroyed_on;
  DeferredCloser closer;
  closer.Close(std::make_unique<Tracked>(&destroyed, nullptr, &destroyed_on));
  closer.Drain();
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_NE(destroyed_on, std::this_thread::get_id());
  EXPECT_EQ(closer.pending(), 0);
}

TEST(DeferredCloserTest, CloseReturnsWhileASlowDestructorRuns) {
  std::atomic<int> destroyed{0};
  absl::Notification release;
  DeferredCloser closer(/*threads=*/1);
  closer.Close(std::make_unique<Tracked>(&destroyed, &release));
  closer.Close(std::make_unique<Tracked>(&destroyed));
  // Both calls returned although the first destructor is still blocked.
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_EQ(closer.pending(), 2);
  release.Notify();
  closer.Drain();
  EXPECT_EQ(destroyed.load(), 2);
}

TEST(DeferredCloserTest, BeyondMaxPendingTheCallerDestroys) {
  std::atomic<int> destroyed{0};
  absl::Notification release;
  std::thread::id destroyed_on;
  DeferredCloser closer(/*threads=*/1, /*max_pending=*/1);
  closer.Close(std::make_unique<Tracked>(&destroyed, &release));
  // One is waiting (blocked in its destructor): the next is destroyed here.
  closer.Close(std::make_unique<Tracked>(&destroyed, nullptr, &destroyed_on));
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(destroyed_on, std::this_thread::get_id());
  EXPECT_EQ(closer.closed_inline(), 1);
  EXPECT_EQ(closer.pending(), 1);
  release.Notify();
  closer.Drain();
  EXPECT_EQ(destroyed.load(), 2);
}

TEST(DeferredCloserTest, SlowObjectsCloseInParallel) {
  std::atomic<int> destroyed{0};
  absl::Notification release;
  DeferredCloser closer(/*threads=*/2, /*max_pending=*/8);
  closer.Close(std::make_unique<Tracked>(&destroyed, &release));
  closer.Close(std::make_unique<Tracked>(&destroyed));
  // The second thread destroys the quick one while the first is blocked.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (destroyed.load() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(destroyed.load(), 1);
  release.Notify();
  closer.Drain();
  EXPECT_EQ(destroyed.load(), 2);
}

TEST(DeferredCloserTest, DestructorDestroysEverythingPending) {
  std::atomic<int> destroyed{0};
  {
    DeferredCloser closer(/*threads=*/4, /*max_pending=*/1000);
    for (int i = 0; i < 100; ++i) {
      closer.Close(std::make_unique<Tracked>(&destroyed));
    }
  }
  EXPECT_EQ(destroyed.load(), 100);
}

TEST(DeferredCloserTest, ManyThreadsHandOverConcurrently) {
  std::atomic<int> destroyed{0};
  DeferredCloser closer(/*threads=*/3, /*max_pending=*/16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        closer.Close(std::make_unique<Tracked>(&destroyed));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  closer.Close(std::unique_ptr<Tracked>());  // null: ignored
  closer.Drain();
  EXPECT_EQ(destroyed.load(), 400);
  EXPECT_EQ(closer.pending(), 0);
}

}  // namespace
}  // namespace meshcast::worker
