#include "controller/worker_registry.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/synchronization/notification.h"
#include "util/log.h"
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

// The topology's compute rates follow the workers: CPU workers get the
// cpu preset, a CUDA worker the h100 one (WorkerInfo names no GPU model);
// an explicit preset wins.
TEST_F(WorkerRegistryTest, DeviceRatesFollowTheWorkersKind) {
  ASSERT_TRUE(registry_.Register(Worker("a")).ok());
  const DeviceRates cpu = *DeviceRatesFor("cpu");
  const DeviceRates h100 = *DeviceRatesFor("h100");
  EXPECT_DOUBLE_EQ(registry_.topology().device_flops, cpu.flops);
  WorkerRecord gpu = Worker("b");
  gpu.device_kind = "cuda";
  ASSERT_TRUE(registry_.Register(gpu).ok());
  EXPECT_DOUBLE_EQ(registry_.topology().device_flops, h100.flops);
  EXPECT_DOUBLE_EQ(registry_.topology().device_memory_bandwidth,
                   h100.memory_bandwidth);

  WorkerRegistry::Options options = Options();
  options.device_rates = "h200";
  WorkerRegistry fixed(options, &clock_);
  ASSERT_TRUE(fixed.Register(Worker("a")).ok());
  EXPECT_DOUBLE_EQ(fixed.topology().device_memory_bandwidth,
                   DeviceRatesFor("h200")->memory_bandwidth);
}

// What the workers measured at start: the slowest live host's copy
// capacity where the options leave it 0, and its GEMM rate where the
// device rates are auto and no CUDA worker is live; the options' figures
// where set, where use_probed_rates is off, or where nothing was probed.
TEST_F(WorkerRegistryTest, ProbedRatesReplaceTheFiguresLeftOpen) {
  WorkerRegistry::Options options = Options();
  options.host_copy_bandwidth = 0;
  WorkerRegistry registry(options, &clock_);
  ASSERT_TRUE(registry.Register(Worker("unprobed")).ok());
  EXPECT_EQ(registry.topology().host_copy_bandwidth, 0);
  EXPECT_DOUBLE_EQ(registry.topology().device_flops,
                   DeviceRatesFor("cpu")->flops);
  WorkerRecord fast = Worker("fast"), slow = Worker("slow");
  fast.probed_host_copy_bytes_per_second = 8e9;
  fast.probed_device_flops = 30e9;
  slow.probed_host_copy_bytes_per_second = 5e9;
  slow.probed_device_flops = 20e9;
  ASSERT_TRUE(registry.Register(fast).ok());
  ASSERT_TRUE(registry.Register(slow).ok());
  EXPECT_DOUBLE_EQ(registry.topology().host_copy_bandwidth, 5e9);
  EXPECT_DOUBLE_EQ(registry.topology().device_flops, 20e9);
  // The slow host lost: the live ones' figures.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(registry.Heartbeat("fast"));
  ASSERT_TRUE(registry.Heartbeat("unprobed"));
  registry.Sweep();
  EXPECT_DOUBLE_EQ(registry.topology().host_copy_bandwidth, 8e9);
  EXPECT_DOUBLE_EQ(registry.topology().device_flops, 30e9);
  // A CUDA worker: its preset, not a CPU's GEMM rate.
  WorkerRecord gpu = Worker("gpu");
  gpu.device_kind = "cuda";
  ASSERT_TRUE(registry.Register(gpu).ok());
  EXPECT_DOUBLE_EQ(registry.topology().device_flops,
                   DeviceRatesFor("h100")->flops);

  // Figures set in the options win; so does use_probed_rates = false.
  WorkerRegistry configured(Options(), &clock_);  // host copy 3e9
  ASSERT_TRUE(configured.Register(fast).ok());
  EXPECT_DOUBLE_EQ(configured.topology().host_copy_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(configured.topology().device_flops, 30e9);
  options.use_probed_rates = false;
  WorkerRegistry off(options, &clock_);
  ASSERT_TRUE(off.Register(fast).ok());
  EXPECT_EQ(off.topology().host_copy_bandwidth, 0);
  EXPECT_DOUBLE_EQ(off.topology().device_flops, DeviceRatesFor("cpu")->flops);

  WorkerRecord bad = Worker("bad");
  bad.probed_device_flops = -1;
  EXPECT_THAT(registry.Register(bad).status().message(),
              HasSubstr("worker.probed_device_flops of worker bad is -1"));
}

// Workers that report one machine share its cores: the topology has the
// cores per device of the most crowded machine, 0 while no CPU worker says.
TEST_F(WorkerRegistryTest, WorkersOfOneMachineShareItsCores) {
  WorkerRegistry registry(Options(), &clock_);
  ASSERT_TRUE(registry.Register(Worker("unknown")).ok());
  EXPECT_EQ(registry.topology().cpu_cores_per_device, 0);
  const auto on = [](const std::string& name, const std::string& machine,
                     int cores) {
    WorkerRecord w = Worker(name);
    w.machine_id = machine;
    w.cpu_cores = cores;
    return w;
  };
  // A machine of its own: 16 cores for 4 devices.
  ASSERT_TRUE(registry.Register(on("big", "m-big", 16)).ok());
  EXPECT_DOUBLE_EQ(registry.topology().cpu_cores_per_device, 4.0);
  // Two emulated hosts on one 2-core machine (one reports 3 cores of
  // affinity: the machine has the most either may use): 3 for 8 devices.
  ASSERT_TRUE(registry.Register(on("ns1", "m-small", 2)).ok());
  ASSERT_TRUE(registry.Register(on("ns2", "m-small", 3)).ok());
  EXPECT_DOUBLE_EQ(registry.topology().cpu_cores_per_device, 3.0 / 8);
  // GPU workers do not count.
  WorkerRecord gpu = on("gpu", "m-gpu", 1);
  gpu.device_kind = "cuda";
  ASSERT_TRUE(registry.Register(gpu).ok());
  EXPECT_DOUBLE_EQ(registry.topology().cpu_cores_per_device, 3.0 / 8);
  // ns2 lost: ns1 alone on its machine, 2 cores for 4 devices.
  clock_.Advance(absl::Seconds(6));
  for (const char* live : {"unknown", "big", "ns1", "gpu"}) {
    ASSERT_TRUE(registry.Heartbeat(live));
  }
  registry.Sweep();
  EXPECT_DOUBLE_EQ(registry.topology().cpu_cores_per_device, 0.5);

  EXPECT_THAT(registry.Register(on("bad", "m", -2)).status().message(),
              HasSubstr("worker.cpu_cores of worker bad is -2"));
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

void RemoveDatabase(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path + suffix).c_str());
  }
}

// A database file in the test's temp directory, removed first.
std::string FreshDatabase(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + "_" +
                           std::to_string(getpid()) + ".db";
  RemoveDatabase(path);
  return path;
}

// Host indices survive a controller restart: a new registry on the same
// database gives every name its old index, whatever the order they come
// back in, and knows the hosts (LOST) before they do.
TEST(WorkerRegistryStoreTest, HostIndicesSurviveAControllerRestart) {
  SetLogQuiet(true);
  const std::string path = FreshDatabase("registry_restart");
  FakeClock clock;
  {
    std::unique_ptr<JobStore> store = *JobStore::Open(path);
    WorkerRegistry registry(WorkerRegistry::Options(), &clock);
    ASSERT_TRUE(registry.AttachStore(store.get()).ok());
    for (const char* name : {"a", "b", "c"}) {
      ASSERT_TRUE(registry.Register(Worker(name, 2)).ok());
    }
  }
  std::unique_ptr<JobStore> store = *JobStore::Open(path);
  WorkerRegistry registry(WorkerRegistry::Options(), &clock);
  ASSERT_TRUE(registry.AttachStore(store.get()).ok());
  // Known before anyone registers: 3 hosts of 2 devices, all unavailable.
  EXPECT_EQ(registry.topology().num_hosts, 3);
  EXPECT_EQ(registry.topology().devices_per_host, 2);
  EXPECT_THAT(registry.UnavailableHosts(), UnorderedElementsAre(0, 1, 2));
  // Back in reverse order, and a newcomer: old names keep their index.
  EXPECT_EQ(registry.Register(Worker("c", 2))->host_index, 2);
  EXPECT_EQ(registry.Register(Worker("new", 2))->host_index, 3);
  EXPECT_EQ(registry.Register(Worker("a", 2))->host_index, 0);
  EXPECT_THAT(registry.UnavailableHosts(), UnorderedElementsAre(1));
  // What the store holds, independently.
  std::vector<StoredHost> hosts = *store->LoadHosts();
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[1].name, "b");
  EXPECT_EQ(hosts[3].name, "new");
  store.reset();
  RemoveDatabase(path);
}

// The links' calibration is part of the topology and of the store: a
// restarted controller plans with the last one it learned.
TEST(WorkerRegistryStoreTest, TheCalibrationSurvivesAControllerRestart) {
  SetLogQuiet(true);
  const std::string path = FreshDatabase("registry_calibration");
  FakeClock clock;
  CollectiveCalibration fit;
  fit.op = "all_to_all";
  fit.link_class = kInterHost;
  fit.ranks = 4;
  fit.alpha_seconds = 3e-5;
  fit.beta_seconds_per_byte = 2e-9;
  fit.model_alpha_seconds = 1e-5;
  fit.model_beta_seconds_per_byte = 8e-10;
  fit.job_id = "job-000007";
  {
    std::unique_ptr<JobStore> store = *JobStore::Open(path);
    WorkerRegistry registry(WorkerRegistry::Options(), &clock);
    ASSERT_TRUE(registry.AttachStore(store.get()).ok());
    EXPECT_TRUE(registry.topology().calibration.empty());
    ASSERT_TRUE(registry.SetCalibration({fit}).ok());
    ASSERT_EQ(registry.topology().calibration.size(), 1u);
  }
  std::unique_ptr<JobStore> store = *JobStore::Open(path);
  WorkerRegistry registry(WorkerRegistry::Options(), &clock);
  ASSERT_TRUE(registry.AttachStore(store.get()).ok());
  const std::vector<CollectiveCalibration> back =
      registry.topology().calibration;
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].op, "all_to_all");
  EXPECT_EQ(back[0].link_class, kInterHost);
  EXPECT_EQ(back[0].ranks, 4);
  EXPECT_EQ(back[0].alpha_seconds, 3e-5);
  EXPECT_EQ(back[0].beta_seconds_per_byte, 2e-9);
  EXPECT_EQ(back[0].model_alpha_seconds, 1e-5);
  EXPECT_EQ(back[0].model_beta_seconds_per_byte, 8e-10);
  EXPECT_EQ(back[0].job_id, "job-000007");
  // A new fit replaces the old one, in the store too.
  ASSERT_TRUE(registry.SetCalibration({}).ok());
  EXPECT_EQ(store->LoadCalibration()->calibration_size(), 0);
  store.reset();
  RemoveDatabase(path);
}

// A worker LOST for lost_worker_ttl is removed: forgotten (in the store
// too), its index free for the next new name; until then a name that comes
// back keeps its index. The topology stays bounded under a flood of names.
TEST(WorkerRegistryStoreTest, LostWorkersAreRemovedAfterTheirTtl) {
  SetLogQuiet(true);
  std::unique_ptr<JobStore> store = *JobStore::Open(":memory:");
  FakeClock clock;
  WorkerRegistry::Options options;
  options.lease = absl::Seconds(5);
  options.lost_worker_ttl = absl::Minutes(10);
  WorkerRegistry registry(options, &clock);
  ASSERT_TRUE(registry.AttachStore(store.get()).ok());
  std::vector<WorkerEvent> events;
  registry.AddListener([&](const WorkerEvent& e) { events.push_back(e); });
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(registry.Register(Worker(name)).ok());
  }
  clock.Advance(absl::Seconds(6));
  ASSERT_TRUE(registry.Heartbeat("a"));
  ASSERT_TRUE(registry.Heartbeat("c"));
  registry.Sweep();  // b LOST
  // b comes back within the TTL: same index.
  clock.Advance(absl::Minutes(5));
  registry.Sweep();  // a and c are LOST now too
  EXPECT_EQ(registry.Register(Worker("b"))->host_index, 1);
  ASSERT_TRUE(registry.Heartbeat("b"));
  // a and c stay away for the TTL: removed.
  clock.Advance(absl::Minutes(4));
  ASSERT_TRUE(registry.Heartbeat("b"));
  registry.Sweep();
  EXPECT_EQ(registry.Workers().size(), 3u);
  clock.Advance(absl::Minutes(6) + absl::Seconds(1));  // LOST for 10m1s
  ASSERT_TRUE(registry.Heartbeat("b"));
  std::vector<WorkerEvent> removed = registry.Sweep();
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0].kind, WorkerEvent::Kind::kRemoved);
  EXPECT_THAT(removed[0].reason, HasSubstr("worker a removed"));
  ASSERT_EQ(registry.Workers().size(), 1u);
  EXPECT_EQ(registry.Workers()[0].name, "b");
  EXPECT_FALSE(registry.WorkerOnHost(0).ok());
  // The topology shrinks to the highest index in use.
  EXPECT_EQ(registry.topology().num_hosts, 2);
  EXPECT_THAT(registry.UnavailableHosts(), UnorderedElementsAre(0));
  std::vector<StoredHost> hosts = *store->LoadHosts();
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].name, "b");
  // A flood of new names takes the free indices first; the topology grows
  // only by what is live.
  EXPECT_EQ(registry.Register(Worker("x"))->host_index, 0);
  EXPECT_EQ(registry.Register(Worker("y"))->host_index, 2);
  EXPECT_EQ(registry.Register(Worker("z"))->host_index, 3);
  EXPECT_EQ(registry.topology().num_hosts, 4);
  // A removed name that comes back is new: the lowest free index.
  clock.Advance(absl::Seconds(6));
  for (const char* name : {"b", "x", "y"}) {
    ASSERT_TRUE(registry.Heartbeat(name));
  }
  registry.Sweep();  // z LOST
  clock.Advance(absl::Minutes(11));
  for (const char* name : {"b", "x", "y"}) {
    ASSERT_TRUE(registry.Heartbeat(name));
  }
  registry.Sweep();  // z removed
  EXPECT_EQ(registry.topology().num_hosts, 3);
  EXPECT_EQ(registry.Register(Worker("a"))->host_index, 3);
}

}  // namespace
}  // namespace meshcast
