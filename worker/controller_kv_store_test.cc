#include "worker/controller_kv_store.h"

#include <string>
#include <thread>
#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "worker/testing/fake_controller.h"

namespace meshcast::worker {
namespace {

TEST(ControllerKvStoreTest, SetThenGetThroughTheController) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ControllerKvStore kv(grpc::CreateChannel(controller.address(),
                                           grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(kv.Set("job/1/gloo/0", std::string("\x01\x00\x02", 3)).ok());
  auto value = kv.Get("job/1/gloo/0", absl::Seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("\x01\x00\x02", 3));
}

TEST(ControllerKvStoreTest, GetWaitsThenTimesOut) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ControllerKvStore kv(grpc::CreateChannel(controller.address(),
                                           grpc::InsecureChannelCredentials()));
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv.Set("late", "v").ok());
  });
  auto late = kv.Get("late", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, "v");
  EXPECT_EQ(kv.Get("never", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(ControllerKvStoreTest, EveryCallNamesTheWorker) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ControllerKvStore kv(grpc::CreateChannel(controller.address(),
                                           grpc::InsecureChannelCredentials()),
                       "worker-7");
  ASSERT_TRUE(kv.Set("job/1/gloo/0", "v").ok());
  ASSERT_TRUE(kv.Get("job/1/gloo/0", absl::Seconds(1)).ok());
  EXPECT_EQ(controller.kv_callers(),
            (std::vector<std::string>{"worker-7", "worker-7"}));
}

TEST(ControllerKvStoreTest, UnreachableControllerIsUnavailableNotAHang) {
  // Nothing listens on port 1 of 127.0.0.1.
  ControllerKvStore kv(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      /*rpc_slack=*/absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  absl::Status status = kv.Set("k", "v");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded)
      << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace meshcast::worker
