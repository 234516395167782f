#include "controller/event_hub.h"

#include <thread>

#include "gtest/gtest.h"

namespace meshcast {
namespace {

v1::JobEvent Event(const std::string& job, v1::JobState state) {
  v1::JobEvent e;
  e.set_job_id(job);
  e.set_state(state);
  return e;
}

TEST(EventHubTest, DeliversEventsOfTheWatchedJobInOrder) {
  EventHub hub;
  auto sub = hub.Subscribe("a");
  hub.Publish(Event("a", v1::JOB_STATE_PLANNING));
  hub.Publish(Event("b", v1::JOB_STATE_RUNNING));
  hub.Publish(Event("a", v1::JOB_STATE_RUNNING));
  auto first = sub->Next(absl::Seconds(1));
  auto second = sub->Next(absl::Seconds(1));
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->state(), v1::JOB_STATE_PLANNING);
  EXPECT_EQ(second->state(), v1::JOB_STATE_RUNNING);
  EXPECT_FALSE(sub->Next(absl::Milliseconds(10)).has_value());
}

TEST(EventHubTest, NextWakesOnPublishFromAnotherThread) {
  EventHub hub;
  auto sub = hub.Subscribe("a");
  std::thread publisher([&] {
    absl::SleepFor(absl::Milliseconds(30));
    hub.Publish(Event("a", v1::JOB_STATE_SUCCEEDED));
  });
  auto e = sub->Next(absl::Seconds(10));
  publisher.join();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST(EventHubTest, ShutdownClosesSubscriptions) {
  EventHub hub;
  auto sub = hub.Subscribe("a");
  EXPECT_FALSE(sub->closed());
  hub.Shutdown();
  EXPECT_TRUE(sub->closed());
  const absl::Time start = absl::Now();
  EXPECT_FALSE(sub->Next(absl::Seconds(10)).has_value());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(EventHubTest, QueueIsBounded) {
  EventHub hub;
  auto sub = hub.Subscribe("a");
  for (size_t i = 0; i < EventHub::kMaxQueued + 10; ++i) {
    v1::JobEvent e = Event("a", v1::JOB_STATE_RUNNING);
    e.set_progress(static_cast<double>(i));
    hub.Publish(e);
  }
  auto first = sub->Next(absl::ZeroDuration());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->progress(), 10.0);  // the oldest ten were dropped
}

}  // namespace
}  // namespace meshcast
