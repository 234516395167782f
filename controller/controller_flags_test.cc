#include "controller/controller_flags.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <string>

#include "controller/fake_worker_client.h"
#include "util/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// The defaults, with the explicit --insecure the daemon needs without TLS.
ControllerFlags InsecureFlags() {
  ControllerFlags flags;
  flags.insecure = true;
  return flags;
}

TEST(ControllerFlagsTest, RefusesToStartWithoutTlsOrInsecure) {
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(ControllerFlags());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* flag : {"--tls_cert", "--tls_key", "--tls_ca", "--insecure"}) {
    EXPECT_THAT(config.status().message(), HasSubstr(flag));
  }
}

TEST(ControllerFlagsTest, TakesTlsFilesAndTokens) {
  ControllerFlags flags;
  flags.tls_cert = "c.crt";
  flags.tls_key = "c.key";
  flags.tls_ca = "ca.crt";
  flags.tokens_file = "tokens";
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls.cert, "c.crt");
  EXPECT_EQ(config->tls.key, "c.key");
  EXPECT_EQ(config->tls.ca, "ca.crt");
  EXPECT_EQ(config->tokens_file, "tokens");
}

TEST(ControllerFlagsTest, RefusesTokensOrTlsFilesWithInsecure) {
  ControllerFlags tokens = InsecureFlags();
  tokens.tokens_file = "tokens";
  EXPECT_THAT(ConfigFromFlags(tokens).status().message(),
              HasSubstr("--tokens_file needs TLS"));
  ControllerFlags half = InsecureFlags();
  half.tls_ca = "ca.crt";
  EXPECT_FALSE(ConfigFromFlags(half).ok());
}

TEST(ControllerFlagsTest, DefaultsGiveTheUsualTopologyWithoutCpuCosts) {
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(InsecureFlags());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->registry.inter_host_bandwidth, 10e9 / 8);
  EXPECT_DOUBLE_EQ(config->registry.intra_host_bandwidth, 100e9 / 8);
  EXPECT_DOUBLE_EQ(config->registry.inter_host_latency, 10e-6);
  EXPECT_DOUBLE_EQ(config->registry.intra_host_latency, 2e-6);
  EXPECT_EQ(config->registry.host_copy_bandwidth, 0);
  EXPECT_EQ(config->registry.transfer_setup_seconds, 0);
  EXPECT_EQ(config->registry.lease, absl::Seconds(5));
  EXPECT_EQ(config->registry.heartbeat, absl::Seconds(1));
  EXPECT_EQ(config->jobs.task_timeout, absl::Seconds(600));
  EXPECT_EQ(config->jobs.reserve_after, absl::Seconds(10));
  EXPECT_TRUE(config->metrics_listen.empty());
}

TEST(ControllerFlagsTest, DeviceRatesArePresetsOrAuto) {
  ControllerFlags flags = InsecureFlags();
  EXPECT_EQ(ConfigFromFlags(flags)->registry.device_rates, "auto");
  flags.device_rates = "h200";
  EXPECT_EQ(ConfigFromFlags(flags)->registry.device_rates, "h200");
  flags.device_rates = "a100";
  const absl::Status refused = ConfigFromFlags(flags).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_THAT(std::string(refused.message()),
              ::testing::AllOf(::testing::HasSubstr("--device-rates"),
                               ::testing::HasSubstr("h100"),
                               ::testing::HasSubstr("auto")));
}

TEST(ControllerFlagsTest, ConvertsHumanUnitsToBaseUnits) {
  ControllerFlags flags = InsecureFlags();
  flags.listen = "127.0.0.1:0";
  flags.db = ":memory:";
  flags.inter_gbps = 0.9564;
  flags.intra_gbps = 40;
  flags.inter_latency_us = 50;
  flags.intra_latency_us = 0;
  flags.host_copy_gbps = 24;
  flags.transfer_setup_us = 300;
  flags.lease_seconds = 3;
  flags.lost_worker_ttl = absl::Minutes(3);
  flags.heartbeat_seconds = 0.5;
  flags.task_timeout_seconds = 60;
  flags.reserve_after_seconds = 2.5;
  flags.metrics_port = 0;
  flags.metrics_address = "127.0.0.1";
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "127.0.0.1:0");
  EXPECT_EQ(config->db_path, ":memory:");
  EXPECT_EQ(config->registry.lost_worker_ttl, absl::Minutes(3));
  EXPECT_EQ(ConfigFromFlags(InsecureFlags())->registry.lost_worker_ttl,
            absl::Minutes(10));  // the default
  EXPECT_DOUBLE_EQ(config->registry.inter_host_bandwidth, 0.9564e9 / 8);
  EXPECT_DOUBLE_EQ(config->registry.intra_host_bandwidth, 5e9);
  EXPECT_DOUBLE_EQ(config->registry.inter_host_latency, 50e-6);
  EXPECT_EQ(config->registry.intra_host_latency, 0);
  EXPECT_DOUBLE_EQ(config->registry.host_copy_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(config->registry.transfer_setup_seconds, 300e-6);
  EXPECT_EQ(config->registry.lease, absl::Seconds(3));
  EXPECT_EQ(config->registry.heartbeat, absl::Milliseconds(500));
  EXPECT_EQ(config->jobs.task_timeout, absl::Seconds(60));
  EXPECT_EQ(config->jobs.reserve_after, absl::Milliseconds(2500));
  EXPECT_EQ(config->metrics_listen, "127.0.0.1:0");
}

// Without --metrics-address, /metrics binds the gRPC interface, never every
// interface by surprise.
TEST(ControllerFlagsTest, MetricsBindTheGrpcInterfaceByDefault) {
  ControllerFlags flags = InsecureFlags();
  flags.listen = "10.1.2.3:50051";
  flags.metrics_port = 9401;
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics_listen, "10.1.2.3:9401");
  flags.listen = "[::1]:50051";
  config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics_listen, "[::1]:9401");
  flags.metrics_address = "0.0.0.0";
  config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics_listen, "0.0.0.0:9401");
}

// One bad value per case: the error must be INVALID_ARGUMENT and name the
// flag the user has to fix.
struct BadFlag {
  std::string name;  // test name suffix
  std::function<void(ControllerFlags&)> set;
  std::string flag;  // expected in the message
};

// Keeps test listings short (gtest would dump the struct's bytes).
void PrintTo(const BadFlag& bad, std::ostream* os) { *os << bad.name; }

class BadFlagTest : public ::testing::TestWithParam<BadFlag> {};

TEST_P(BadFlagTest, IsRejectedNamingTheFlag) {
  ControllerFlags flags = InsecureFlags();
  GetParam().set(flags);
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(GetParam().flag));
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

INSTANTIATE_TEST_SUITE_P(
    Flags, BadFlagTest,
    ::testing::Values(
        BadFlag{"ZeroLostWorkerTtl",
                [](ControllerFlags& f) {
                  f.lost_worker_ttl = absl::ZeroDuration();
                },
                "--lost_worker_ttl must be a positive duration"},
        BadFlag{"NegativeHostCopy",
                [](ControllerFlags& f) { f.host_copy_gbps = -1; },
                "--host-copy-gbps must be a finite number of Gbit/s >= 0 (0 = "
                "unlimited), got -1"},
        BadFlag{"NaNHostCopy",
                [](ControllerFlags& f) { f.host_copy_gbps = kNaN; },
                "--host-copy-gbps"},
        BadFlag{"InfiniteHostCopy",
                [](ControllerFlags& f) { f.host_copy_gbps = kInf; },
                "--host-copy-gbps"},
        BadFlag{"HostCopyOverflowsBytes",
                [](ControllerFlags& f) { f.host_copy_gbps = 1e308; },
                "--host-copy-gbps"},
        BadFlag{"NegativeSetup",
                [](ControllerFlags& f) { f.transfer_setup_us = -300; },
                "--transfer-setup-us must be a finite number of microseconds "
                ">= 0"},
        BadFlag{"NaNSetup",
                [](ControllerFlags& f) { f.transfer_setup_us = kNaN; },
                "--transfer-setup-us"},
        BadFlag{"NegativeInterLatency",
                [](ControllerFlags& f) { f.inter_latency_us = -1; },
                "--inter-latency-us"},
        BadFlag{"InfiniteInterLatency",
                [](ControllerFlags& f) { f.inter_latency_us = kInf; },
                "--inter-latency-us"},
        BadFlag{"NegativeIntraLatency",
                [](ControllerFlags& f) { f.intra_latency_us = -0.5; },
                "--intra-latency-us"},
        BadFlag{"ZeroInterGbps", [](ControllerFlags& f) { f.inter_gbps = 0; },
                "--inter-gbps must be a positive finite number of Gbit/s"},
        BadFlag{"NaNIntraGbps", [](ControllerFlags& f) { f.intra_gbps = kNaN; },
                "--intra-gbps"},
        BadFlag{"LeaseNotAboveHeartbeat",
                [](ControllerFlags& f) {
                  f.lease_seconds = 1;
                  f.heartbeat_seconds = 1;
                },
                "--lease-seconds"},
        BadFlag{"ZeroHeartbeat",
                [](ControllerFlags& f) { f.heartbeat_seconds = 0; },
                "--heartbeat-seconds"},
        BadFlag{"ZeroTaskTimeout",
                [](ControllerFlags& f) { f.task_timeout_seconds = 0; },
                "--task-timeout-seconds"},
        BadFlag{"NegativeReserveAfter",
                [](ControllerFlags& f) { f.reserve_after_seconds = -2; },
                "--reserve-after-seconds"},
        BadFlag{"InfiniteReserveAfter",
                [](ControllerFlags& f) {
                  f.reserve_after_seconds =
                      std::numeric_limits<double>::infinity();
                },
                "--reserve-after-seconds"},
        BadFlag{"MetricsPortTooLarge",
                [](ControllerFlags& f) { f.metrics_port = 70000; },
                "--metrics-port"},
        BadFlag{"MissingMetricsWebConfig",
                [](ControllerFlags& f) {
                  f.metrics_port = 0;
                  f.metrics_web_config = "/nonexistent/web.yml";
                },
                "--metrics-web-config"},
        BadFlag{"EmptyListen", [](ControllerFlags& f) { f.listen.clear(); },
                "--listen"},
        BadFlag{"EmptyDb", [](ControllerFlags& f) { f.db.clear(); }, "--db"}),
    [](const ::testing::TestParamInfo<BadFlag>& info) {
      return info.param.name;
    });

TEST(ControllerFlagsTest, ReserveAfterZeroIsStrictOrderAndMinusOneNever) {
  ControllerFlags flags = InsecureFlags();
  flags.reserve_after_seconds = 0;
  absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jobs.reserve_after, absl::ZeroDuration());
  flags.reserve_after_seconds = -1;
  config = ConfigFromFlags(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jobs.reserve_after, absl::InfiniteDuration());
}

TEST(ControllerFlagsTest, ZeroMeansUnlimitedCopyAndNoSetup) {
  ControllerFlags flags = InsecureFlags();
  flags.host_copy_gbps = 0;
  flags.transfer_setup_us = 0;
  flags.inter_latency_us = 0;
  ASSERT_TRUE(ConfigFromFlags(flags).ok());
}

// The configured topology reaches the service: GetCluster and the Plan dry
// run report it, and the planner's prediction pays the set-up time.
class ConfiguredControllerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Starts a controller from `flags` with two 2-device fake workers.
  void Start(ControllerFlags flags) {
    SetLogQuiet(true);
    flags.listen = "127.0.0.1:0";
    flags.db = ":memory:";
    absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<std::unique_ptr<ControllerServer>> server =
        ControllerServer::Start(*config, std::make_unique<FakeWorkerClient>());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Controller::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                            grpc::InsecureChannelCredentials()));
    for (const char* name : {"alpha", "beta"}) {
      v1::RegisterWorkerRequest request;
      request.mutable_worker()->set_name(name);
      request.mutable_worker()->set_address("127.0.0.1:1");
      request.mutable_worker()->set_num_devices(2);
      v1::RegisterWorkerResponse response;
      ASSERT_TRUE(
          stub_->RegisterWorker(Context().get(), request, &response).ok());
    }
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    return context;
  }

  // The Plan dry run of a 1x2 -> 1x2 all-gather across the two hosts.
  v1::PlanResponse PlanAcrossHosts() {
    v1::PlanRequest request;
    v1::ReshardSpec* r = request.mutable_reshard();
    r->mutable_tensor()->add_shape(1024);
    r->mutable_tensor()->add_shape(256);
    r->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
    r->mutable_src_mesh()->add_shape(1);
    r->mutable_src_mesh()->add_shape(2);
    r->mutable_src_spec()->set_text("RS1");
    r->mutable_dst_mesh()->add_shape(1);
    r->mutable_dst_mesh()->add_shape(2);
    r->mutable_dst_spec()->set_text("RR");
    r->set_strategy("broadcast");
    v1::PlanResponse response;
    grpc::Status status = stub_->Plan(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  std::unique_ptr<ControllerServer> server_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

TEST_F(ConfiguredControllerTest, GetClusterAndPlanReportTheFlags) {
  ControllerFlags flags = InsecureFlags();
  flags.inter_gbps = 8;
  flags.intra_gbps = 80;
  flags.inter_latency_us = 40;
  flags.intra_latency_us = 3;
  flags.host_copy_gbps = 16;
  flags.transfer_setup_us = 250;
  ASSERT_NO_FATAL_FAILURE(Start(flags));

  v1::GetClusterResponse cluster;
  ASSERT_TRUE(
      stub_->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
          .ok());
  const v1::Topology& t = cluster.topology();
  EXPECT_EQ(t.num_hosts(), 2);
  EXPECT_EQ(t.devices_per_host(), 2);
  EXPECT_DOUBLE_EQ(t.inter_host_bandwidth(), 1e9);
  EXPECT_DOUBLE_EQ(t.intra_host_bandwidth(), 10e9);
  EXPECT_DOUBLE_EQ(t.inter_host_latency(), 40e-6);
  EXPECT_DOUBLE_EQ(t.intra_host_latency(), 3e-6);
  EXPECT_DOUBLE_EQ(t.host_copy_bandwidth(), 2e9);
  EXPECT_DOUBLE_EQ(t.transfer_setup_seconds(), 250e-6);
  EXPECT_DOUBLE_EQ(t.pipeline_chunk_bytes(), Topology().pipeline_chunk_bytes);

  const v1::PlanResponse plan = PlanAcrossHosts();
  EXPECT_DOUBLE_EQ(plan.topology().host_copy_bandwidth(), 2e9);
  EXPECT_DOUBLE_EQ(plan.topology().transfer_setup_seconds(), 250e-6);
}

TEST_F(ConfiguredControllerTest, SetupTimeAndHostCopyChangeThePrediction) {
  ASSERT_NO_FATAL_FAILURE(Start(InsecureFlags()));
  const double plain = PlanAcrossHosts().plan().predicted_seconds();
  server_->Shutdown();

  ControllerFlags flags = InsecureFlags();
  flags.transfer_setup_us = 5000;  // far above the plain prediction
  ASSERT_NO_FATAL_FAILURE(Start(flags));
  const double with_setup = PlanAcrossHosts().plan().predicted_seconds();
  // Every chain of dependent transfers pays the set-up at least once.
  EXPECT_GE(with_setup, plain + 5000e-6 * 0.999);
  server_->Shutdown();

  flags = InsecureFlags();
  // Slower than the 10 Gbit/s NIC: packing at the sender now limits the
  // cross-host transfers.
  flags.host_copy_gbps = 1;
  ASSERT_NO_FATAL_FAILURE(Start(flags));
  const v1::PlanResponse copy_bound = PlanAcrossHosts();
  EXPECT_GT(copy_bound.plan().predicted_seconds(), 5 * plain);
  EXPECT_GT(copy_bound.plan().lower_bound_seconds(),
            copy_bound.plan().predicted_seconds() / 4);
}

}  // namespace
}  // namespace meshcast
