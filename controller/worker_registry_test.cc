#include "controller/worker_registry.h"

#include <vector>

#include "absl/synchronization/notification.h"
#include "controller/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

WorkerRecord Worker(const std::string& name, int devices = 4) {
  WorkerRecord w;
  w.name = name;
  w.address = "127.0.0.1:" + std::to_string(7000 + name.size());
  w.data_address = "127.0.0.1";
  w.device_kind = "cpu";
  w.num_devices = devices;
  return w;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  WorkerRegistryTest() : registry_(Options(), &clock_) {
    SetLogQuiet(true);
    registry_.AddListener([this](const WorkerEvent& e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(e);
    });
  }
  static WorkerRegistry::Options Options() {
    WorkerRegistry::Options o;
    o.lease = absl::Seconds(5);
    o.inter_host_bandwidth = 1e9;
    o.intra_host_bandwidth = 1e10;
    o.host_copy_bandwidth = 3e9;
    o.transfer_setup_seconds = 250e-6;
    return o;
  }
  std::vector<WorkerEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  FakeClock clock_;
  WorkerRegistry registry_;
  absl::Mutex mu_;
  std::vector<WorkerEvent> events_ ABSL_GUARDED_BY(mu_);
};

TEST_F(WorkerRegistryTest, HostIndicesAreAssignedInOrderAndStable) {
  EXPECT_EQ(registry_.topology().num_hosts, 0);
  EXPECT_EQ(registry_.Register(Worker("a"))->host_index, 0);
  EXPECT_EQ(registry_.Register(Worker("b"))->host_index, 1);
  EXPECT_EQ(registry_.Register(Worker("c"))->host_index, 2);
  // Re-registration keeps the index.
  EXPECT_EQ(registry_.Register(Worker("b"))->host_index, 1);
  const Topology t = registry_.topology();
  EXPECT_EQ(t.num_hosts, 3);
  EXPECT_EQ(t.devices_per_host, 4);
  EXPECT_DOUBLE_EQ(t.inter_host_bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(t.intra_host_bandwidth, 1e10);
  EXPECT_DOUBLE_EQ(t.host_copy_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(t.transfer_setup_seconds, 250e-6);
  EXPECT_EQ(registry_.WorkerOnHost(1)->name, "b");
  EXPECT_TRUE(absl::IsNotFound(registry_.WorkerOnHost(3).status()));
  // b registering while live means it restarted.
  std::vector<WorkerEvent> e = events();
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[3].kind, WorkerEvent::Kind::kRestarted);
  EXPECT_EQ(e[3].name, "b");
  EXPECT_EQ(e[4].kind, WorkerEvent::Kind::kRegistered);
}

// A registration whose answer was lost (a slow link) is retried by the same
// process: with the same incarnation it is not a restart, so its jobs live
// on; a new incarnation is a restart.
TEST_F(WorkerRegistryTest, SameIncarnationRegisteringAgainIsNotARestart) {
  WorkerRecord a = Worker("a");
  a.incarnation = "run-1";
  ASSERT_TRUE(registry_.Register(a).ok());
  ASSERT_TRUE(registry_.Register(a).ok());
  std::vector<WorkerEvent> e = events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, WorkerEvent::Kind::kRegistered);
  EXPECT_EQ(e[1].kind, WorkerEvent::Kind::kRegistered);
  a.incarnation = "run-2";
  ASSERT_TRUE(registry_.Register(a).ok());
  e = events();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[2].kind, WorkerEvent::Kind::kRestarted);
  EXPECT_EQ(e[3].kind, WorkerEvent::Kind::kRegistered);
}

TEST_F(WorkerRegistryTest, RejectsMismatchedDeviceCountAndBadInfo) {
  ASSERT_TRUE(registry_.Register(Worker("a", 4)).ok());
  absl::StatusOr<WorkerRecord> r = registry_.Register(Worker("b", 2));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_THAT(r.status().message(),
              HasSubstr("worker b has 2 devices but the cluster's workers "
                        "have 4 each"));
  EXPECT_EQ(registry_.topology().num_hosts, 1);
  WorkerRecord nameless = Worker("");
  EXPECT_TRUE(absl::IsInvalidArgument(registry_.Register(nameless).status()));
  WorkerRecord no_address = Worker("c");
  no_address.address.clear();
  EXPECT_THAT(registry_.Register(no_address).status().message(),
              HasSubstr("worker.address"));
  EXPECT_TRUE(
      absl::IsInvalidArgument(registry_.Register(Worker("d", 0)).status()));
  // The only worker may change its own device count when it comes back.
  EXPECT_TRUE(registry_.Register(Worker("a", 2)).ok());
  EXPECT_EQ(registry_.topology().devices_per_host, 2);
}

TEST_F(WorkerRegistryTest, MissedLeaseMarksLostAndNotifies) {
  ASSERT_TRUE(registry_.Register(Worker("a")).ok());
  ASSERT_TRUE(registry_.Register(Worker("b")).ok());
  clock_.Advance(absl::Seconds(3));
  EXPECT_TRUE(registry_.Heartbeat("a"));
  EXPECT_FALSE(registry_.Heartbeat("nobody"));
  EXPECT_TRUE(registry_.Sweep().empty());
  clock_.Advance(absl::Seconds(3));  // b: 6 s without heartbeat, a: 3 s
  std::vector<WorkerEvent> lost = registry_.Sweep();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].kind, WorkerEvent::Kind::kLost);
  EXPECT_EQ(lost[0].name, "b");
  EXPECT_EQ(lost[0].host_index, 1);
  EXPECT_THAT(lost[0].reason, HasSubstr("worker b lost"));
  EXPECT_EQ(events().back().kind, WorkerEvent::Kind::kLost);
  EXPECT_THAT(registry_.UnavailableHosts(), UnorderedElementsAre(1));
  EXPECT_TRUE(registry_.WorkerOnHost(1)->lost);
  // A lost worker's heartbeat is refused: it must register again.
  EXPECT_FALSE(registry_.Heartbeat("b"));
  EXPECT_TRUE(registry_.Sweep().empty());  // reported once
  absl::StatusOr<WorkerRecord> back = registry_.Register(Worker("b"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host_index, 1);
  EXPECT_FALSE(back->lost);
  EXPECT_EQ(events().back().kind, WorkerEvent::Kind::kRegistered);
  EXPECT_TRUE(registry_.UnavailableHosts().empty());
  EXPECT_TRUE(registry_.Heartbeat("b"));
}

TEST_F(WorkerRegistryTest, BackgroundSweeperFindsLostWorkers) {
  absl::Notification lost;
  registry_.AddListener([&](const WorkerEvent& e) {
    if (e.kind == WorkerEvent::Kind::kLost && !lost.HasBeenNotified()) {
      lost.Notify();
    }
  });
  ASSERT_TRUE(registry_.Register(Worker("a")).ok());
  registry_.StartSweeper(absl::Milliseconds(5));
  clock_.Advance(absl::Seconds(6));
  EXPECT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(10)));
  registry_.StopSweeper();
  EXPECT_TRUE(registry_.Workers()[0].lost);
}

}  // namespace
}  // namespace meshcast
