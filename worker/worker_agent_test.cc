#include "worker/worker_agent.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "worker/testing/fake_controller.h"

namespace meshcast::worker {
namespace {

WorkerAgentOptions Options() {
  WorkerAgentOptions options;
  options.name = "node-a";
  options.address = "127.0.0.1:5555";
  options.data_address = "127.0.0.1";
  options.num_devices = 3;
  options.memory_bytes = int64_t{24} << 30;
  options.rpc_timeout = absl::Milliseconds(500);
  return options;
}

// Polls `condition` for up to 10 s.
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

TEST(WorkerAgentTest, RegistersWithItsInfoAndHeartbeats) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  WorkerAgent agent(grpc::CreateChannel(controller.address(),
                                        grpc::InsecureChannelCredentials()),
                    Options());
  agent.Start();
  ASSERT_TRUE(agent.WaitUntilRegistered(absl::Seconds(10)));
  const v1::WorkerInfo info = controller.worker("node-a");
  EXPECT_EQ(info.address(), "127.0.0.1:5555");
  EXPECT_EQ(info.data_address(), "127.0.0.1");
  EXPECT_EQ(info.num_devices(), 3);
  EXPECT_EQ(info.device_kind(), "cpu");
  EXPECT_EQ(info.memory_bytes(), int64_t{24} << 30);
  // The controller asks for a heartbeat every 50 ms.
  EXPECT_TRUE(Eventually([&] { return controller.heartbeats() >= 3; }));
  EXPECT_EQ(controller.registrations(), 1);
  agent.Stop();
  const int heartbeats = controller.heartbeats();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(controller.heartbeats(), heartbeats);
}

TEST(WorkerAgentTest, RegistersAgainWhenTheControllerForgetsIt) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  WorkerAgent agent(grpc::CreateChannel(controller.address(),
                                        grpc::InsecureChannelCredentials()),
                    Options());
  agent.Start();
  ASSERT_TRUE(agent.WaitUntilRegistered(absl::Seconds(10)));
  const std::string incarnation = controller.worker("node-a").incarnation();
  EXPECT_EQ(incarnation.size(), 16u);
  controller.Forget();
  EXPECT_TRUE(Eventually([&] { return controller.registrations() == 2; }));
  EXPECT_EQ(controller.worker("node-a").name(), "node-a");
  EXPECT_TRUE(Eventually([&] { return agent.registrations() == 2; }));
  // The same process registers with the same incarnation (the controller
  // tells a lost answer from a restart by it); another agent gets its own.
  EXPECT_EQ(controller.worker("node-a").incarnation(), incarnation);
  WorkerAgent other(grpc::CreateChannel(controller.address(),
                                        grpc::InsecureChannelCredentials()),
                    Options());
  other.Start();
  EXPECT_TRUE(Eventually([&] {
    return controller.worker("node-a").incarnation() != incarnation;
  }));
}

TEST(WorkerAgentTest, WaitsForAControllerThatStartsLateAndComesBack) {
  // Reserve a port, then free it: the controller is "down" at first.
  int port = 0;
  {
    testing::FakeController probe;
    ASSERT_TRUE(probe.Start().ok());
    port = probe.port();
  }
  WorkerAgentOptions options = Options();
  options.heartbeat_interval = absl::Milliseconds(50);
  WorkerAgent agent(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                        grpc::InsecureChannelCredentials()),
                    options);
  agent.Start();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(agent.registered());

  auto controller = std::make_unique<testing::FakeController>();
  ASSERT_TRUE(controller->Start(port).ok());
  ASSERT_TRUE(agent.WaitUntilRegistered(absl::Seconds(10)));

  // The controller restarts with an empty registry on the same port.
  controller.reset();
  controller = std::make_unique<testing::FakeController>();
  ASSERT_TRUE(controller->Start(port).ok());
  EXPECT_TRUE(Eventually([&] { return controller->registrations() >= 1; }));
  // The agent counts a registration once the RPC has returned, which can be
  // a moment after the controller recorded it.
  EXPECT_TRUE(Eventually([&] { return agent.registrations() >= 2; }));
}

}  // namespace
}  // namespace meshcast::worker
