// Tests of the commands that talk to the controller, through the real gRPC
// client against an in-process fake controller.
#include "cli/job_commands.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/cluster_commands.h"
#include "absl/strings/str_cat.h"
#include "cli/fake_controller.h"
#include "cli/plan_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// A port on 127.0.0.1 that nothing listens on.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

class JobCommandsTest : public ::testing::Test {
 protected:
  JobCommandsTest() {
    // Nothing from the real environment may leak into the tests.
    context_.getenv = [](const std::string&) { return std::nullopt; };
    context_.stream_out = [this](absl::string_view text) {
      streamed_.append(text.data(), text.size());
    };
    v1::GetClusterResponse cluster;
    cluster.mutable_topology()->set_num_hosts(5);
    cluster.mutable_topology()->set_devices_per_host(4);
    fake_.SetCluster(cluster);
  }

  // `args` plus --controller pointing at the fake.
  std::vector<std::string> WithController(std::vector<std::string> args) {
    args.push_back("--controller");
    args.push_back(fake_.address());
    return args;
  }

  static std::vector<std::string> Case1() {
    return {"reshard",    "--shape",    "64x64x256",  "--dtype", "int32",
            "--src-mesh", "2x4",        "--src-spec", "S0RR",    "--dst-mesh",
            "2x4",        "--dst-spec", "RS0R"};
  }

  static v1::JobEvent Event(v1::JobState state, double progress,
                            const std::string& message) {
    v1::JobEvent event;
    event.set_job_id("job-1");
    event.set_state(state);
    event.set_progress(progress);
    event.set_message(message);
    event.set_time_unix(1.7e9);
    return event;
  }

  static void ExpectOneLine(const CommandResult& result,
                            const std::string& prefix) {
    EXPECT_THAT(result.err, StartsWith(prefix));
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << result.err;
  }

  FakeController fake_;
  CommandContext context_;
  std::string streamed_;
};

TEST_F(JobCommandsTest, SubmitPlacedMeshes) {
  std::vector<std::string> args = Case1();
  args.insert(args.end(), {"--name", "case1", "--strategy", "meshcast"});
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("job job-1 submitted (QUEUED)"));
  ASSERT_EQ(fake_.submitted().size(), 1u);
  const v1::JobSpec spec = fake_.submitted()[0];
  EXPECT_EQ(spec.name(), "case1");
  EXPECT_THAT(spec.reshard().tensor().shape(), ElementsAre(64, 64, 256));
  EXPECT_TRUE(spec.reshard().src_mesh().devices().empty());
  EXPECT_EQ(spec.reshard().src_mesh().first_host(), -1);
  EXPECT_EQ(spec.reshard().dst_spec().text(), "RS0R");
  EXPECT_EQ(spec.reshard().strategy(), "meshcast");
}

TEST_F(JobCommandsTest, SubmitUserBuffersByFlagOrFile) {
  std::vector<std::string> args = Case1();
  args.insert(args.end(), {"--src-buffer", "mine/in", "--dst-buffer",
                           "mine/out", "--verify", "checksum"});
  CommandResult result = RunSubmitCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  ASSERT_EQ(fake_.submitted().size(), 1u);
  v1::JobSpec spec = fake_.submitted()[0];
  EXPECT_EQ(spec.reshard().src_buffer(), "mine/in");
  EXPECT_EQ(spec.reshard().dst_buffer(), "mine/out");
  EXPECT_EQ(spec.verify(), v1::VERIFY_MODE_CHECKSUM);
  // Without them, the worker's own tiles.
  result = RunSubmitCommand(WithController(Case1()), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(fake_.submitted().at(1).reshard().src_buffer(), "");
}

TEST_F(JobCommandsTest, SubmitPinnedMeshesUsesTheLiveTopology) {
  std::vector<std::string> args = Case1();
  args[6] = "2x4@0";   // --src-mesh
  args[10] = "2x4@3";  // --dst-mesh
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const v1::JobSpec spec = fake_.submitted().at(0);
  EXPECT_THAT(spec.reshard().src_mesh().devices(),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(spec.reshard().dst_mesh().devices(),
              ElementsAre(12, 13, 14, 15, 16, 17, 18, 19));

  args[10] = "2x4@4";  // hosts 4..5 on a 5-host cluster
  const CommandResult too_big =
      RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(too_big.exit_code, kExitUsage);
  ExpectOneLine(too_big, "meshctl submit: --dst-mesh: ");
  EXPECT_EQ(fake_.submitted().size(), 1u);
}

TEST_F(JobCommandsTest, SubmitWaitStreamsProgressAndExitsByState) {
  fake_.SetWatchEvents(
      "job-1", {Event(v1::JOB_STATE_PLANNING, 0.05, "planning"),
                Event(v1::JOB_STATE_RUNNING, 0.1, "running"),
                Event(v1::JOB_STATE_RUNNING, 0.1, "running"),  // repeated
                Event(v1::JOB_STATE_RUNNING, 0.55, "worker-1 finished"),
                Event(v1::JOB_STATE_SUCCEEDED, 1, "verified 100 elements")});
  std::vector<std::string> args = Case1();
  args.push_back("--wait");
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(streamed_, StartsWith("job job-1 submitted: 64x64x256 int32"));
  EXPECT_THAT(streamed_, HasSubstr("PLANNING"));
  EXPECT_THAT(streamed_, HasSubstr(" 55%  worker-1 finished\n"));
  EXPECT_EQ(std::count(streamed_.begin(), streamed_.end(), '\n'), 5)
      << streamed_;  // the header and four distinct events
  EXPECT_EQ(result.out, "job job-1 SUCCEEDED: verified 100 elements\n");

  fake_.SetWatchEvents("job-2",
                       {Event(v1::JOB_STATE_RUNNING, 0.1, "running"),
                        Event(v1::JOB_STATE_FAILED, 0.1, "worker w3 lost")});
  const CommandResult failed = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(failed.exit_code, kExitFailure);
  ExpectOneLine(failed, "meshctl submit: job job-2 FAILED: worker w3 lost");
}

// A controller that fails its jobs as it shuts down sends the final event
// and then cannot answer GetJob: the outcome is that event, not "unreachable".
TEST_F(JobCommandsTest, SubmitWaitReportsTheFinalEventOfAControllerThatLeft) {
  fake_.SetWatchEvents("job-1",
                       {Event(v1::JOB_STATE_RUNNING, 0.1, "running"),
                        Event(v1::JOB_STATE_FAILED, 0.1,
                              "controller shut down")});
  fake_.SetGetJobError(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller is shutting down"));
  std::vector<std::string> args = Case1();
  args.push_back("--wait");
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  ExpectOneLine(result,
                "meshctl submit: job job-1 FAILED: controller shut down");
}

TEST_F(JobCommandsTest, SubmitWaitJsonPrintsOnlyTheFinalJob) {
  fake_.SetWatchEvents("job-1", {Event(v1::JOB_STATE_SUCCEEDED, 1, "done")});
  std::vector<std::string> args = Case1();
  args.insert(args.end(), {"--wait", "--output", "json"});
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(streamed_, IsEmpty());
  const nlohmann::json job = nlohmann::json::parse(result.out);
  EXPECT_EQ(job["id"], "job-1");
  EXPECT_EQ(job["state"], "SUCCEEDED");
  EXPECT_EQ(job["spec"]["reshard"]["src_spec"], "S0RR");
}

TEST_F(JobCommandsTest, SubmitFromFileWithFlagOverride) {
  const std::string path = ::testing::TempDir() + "/job_commands_test_" +
                           std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << "name: from-file\n"
                         "reshard:\n"
                         "  shape: [64, 64, 64]\n"
                         "  dtype: int32\n"
                         "  src_mesh: 1x1\n"
                         "  src_spec: RRR\n"
                         "  dst_mesh: 4x2\n"
                         "  dst_spec: RRR\n"
                         "  strategy: broadcast\n";
  const CommandResult result = RunSubmitCommand(
      WithController({"-f", path, "--strategy", "send_recv"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const v1::JobSpec spec = fake_.submitted().at(0);
  EXPECT_EQ(spec.name(), "from-file");
  EXPECT_EQ(spec.reshard().strategy(), "send_recv");
  EXPECT_THAT(spec.reshard().dst_mesh().shape(), ElementsAre(4, 2));
}

// A flag replaces the file's mesh even when written in the other form; a
// field missing from the file is named by its file key.
TEST_F(JobCommandsTest, SubmitFileMeshFormsAndMissingKeys) {
  const std::string path = ::testing::TempDir() + "/job_commands_test_" +
                           std::to_string(getpid()) + "_forms.yaml";
  std::ofstream(path) << "reshard:\n"
                         "  shape: [64, 64, 64]\n"
                         "  src_mesh: 2x4\n"
                         "  src_spec: S0RR\n"
                         "  dst_mesh: {shape: [1, 2], devices: [16, 17]}\n"
                         "  dst_spec: RRR\n";
  CommandResult result = RunSubmitCommand(
      WithController({"-f", path, "--dst-mesh", "2x4"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(fake_.submitted().at(0).reshard().dst_mesh().shape(),
              ElementsAre(2, 4));
  EXPECT_TRUE(fake_.submitted().at(0).reshard().dst_mesh().devices().empty());
  result = RunSubmitCommand(
      WithController({"-f", path, "--src-devices", "0,1", "--src-shape",
                      "1x2", "--src-spec", "S1RR"}),
      context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(fake_.submitted().at(1).reshard().src_mesh().devices(),
              ElementsAre(0, 1));

  const std::string missing = ::testing::TempDir() + "/job_commands_test_" +
                              std::to_string(getpid()) + "_missing.yaml";
  std::ofstream(missing) << "reshard:\n"
                            "  shape: [64, 64, 64]\n"
                            "  src_mesh: 2x4\n"
                            "  src_spec: S0RR\n"
                            "  dst_spec: RRR\n";
  result = RunSubmitCommand(WithController({"-f", missing}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: " + missing +
                            ": reshard.dst_mesh: required (or --dst-mesh): ");
  EXPECT_EQ(fake_.submitted().size(), 2u);
}

TEST_F(JobCommandsTest, SubmitBadInputIsOneLineWithoutContactingTheServer) {
  const std::string unreachable = "127.0.0.1:" + std::to_string(ClosedPort());
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--controller", unreachable});
    return RunSubmitCommand(args, context_);
  };
  std::vector<std::string> args = Case1();
  args[4] = "int33";
  CommandResult result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --dtype: unknown dtype 'int33'");

  args = Case1();
  args[8] = "S0QR";
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --src-spec: unknown token 'Q'");

  args = Case1();
  args[12] = "RS0";
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --dst-spec: spec RS0 has 2");

  args = Case1();
  args.insert(args.end(), {"--strategy", "fastest"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --strategy: ");

  result = run({"allreduce", "--shape", "4"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: unknown job kind 'allreduce'");

  result = run({});
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: missing job kind");

  result = run({"reshard", "--shap", "4"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: unknown flag --shap");
}

TEST_F(JobCommandsTest, ServerRejectionNamesTheFlag) {
  fake_.SetSubmitError(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      "dst_mesh 9x4 needs 9 hosts with 4 free devices; cluster has 5 hosts x "
      "4 devices"));
  std::vector<std::string> args = Case1();
  args[10] = "9x4";
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --dst-mesh: dst_mesh 9x4 needs 9");
}

TEST_F(JobCommandsTest, UnreachableControllerExitsThree) {
  const std::string unreachable = "127.0.0.1:" + std::to_string(ClosedPort());
  for (const auto& run :
       {RunGetCommand, RunListCommand, RunWatchCommand, RunCancelCommand}) {
    const CommandResult result =
        run({"j-1", "--controller", unreachable, "--connect-timeout", "0.3"},
            context_);
    if (result.exit_code == kExitUsage) continue;  // list takes no id
    EXPECT_EQ(result.exit_code, kExitUnreachable) << result.err;
    EXPECT_THAT(result.err,
                HasSubstr("cannot reach the controller at " + unreachable));
  }
  const CommandResult list = RunListCommand(
      {"--controller", unreachable, "--connect-timeout", "0.3"}, context_);
  EXPECT_EQ(list.exit_code, kExitUnreachable);
  ExpectOneLine(list, "meshctl list: cannot reach the controller");

  const CommandResult bad =
      RunListCommand({"--controller", "nocolon"}, context_);
  EXPECT_EQ(bad.exit_code, kExitUsage);
  ExpectOneLine(bad, "meshctl list: --controller: 'nocolon' is not a");
}

// After `meshctl down --dir D`, commands given --dir D must not reach
// whatever controller listens on the default port.
TEST_F(JobCommandsTest, DirWithoutAClusterIsAnErrorForEveryClientCommand) {
  const std::string dir = ::testing::TempDir() + "/job_commands_test_nodir_" +
                          std::to_string(getpid());
  const std::string expected =
      "no local cluster recorded in " + dir +
      " (no " + dir + "/cluster.json); start one with 'meshctl up --dir " +
      dir + "'";
  std::vector<std::string> plan_args = Case1();
  plan_args[0] = "--live";
  const std::vector<std::pair<
      std::string, std::function<CommandResult(const std::vector<std::string>&,
                                               const CommandContext&)>>>
      commands = {
          {"list", RunListCommand},
          {"get", [](const std::vector<std::string>& a,
                     const CommandContext& c) {
             std::vector<std::string> args = {"j-1"};
             args.insert(args.end(), a.begin(), a.end());
             return RunGetCommand(args, c);
           }},
          {"cluster", RunClusterCommand},
          {"submit", [](const std::vector<std::string>& a,
                        const CommandContext& c) {
             std::vector<std::string> args = Case1();
             args.insert(args.end(), a.begin(), a.end());
             return RunSubmitCommand(args, c);
           }},
          {"plan", [plan_args](const std::vector<std::string>& a,
                               const CommandContext& c) {
             std::vector<std::string> args = plan_args;
             args.insert(args.end(), a.begin(), a.end());
             return RunPlanCommand(args, c);
           }},
      };
  for (const auto& [name, run] : commands) {
    SCOPED_TRACE(name);
    const CommandResult result = run({"--dir", dir}, context_);
    EXPECT_EQ(result.exit_code, kExitUsage) << result.err;
    ExpectOneLine(result, "meshctl " + name + ": " + expected);
  }
}

TEST_F(JobCommandsTest, GetListCancel) {
  ASSERT_EQ(RunSubmitCommand(WithController(Case1()), context_).exit_code,
            kExitOk);
  ASSERT_EQ(RunSubmitCommand(WithController(Case1()), context_).exit_code,
            kExitOk);

  CommandResult result = RunGetCommand(WithController({"job-1"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("id:         job-1\n"));
  EXPECT_THAT(result.out, HasSubstr("state:      QUEUED (0%)"));
  result =
      RunGetCommand(WithController({"job-2", "--output", "json"}), context_);
  EXPECT_EQ(nlohmann::json::parse(result.out)["id"], "job-2");

  result = RunGetCommand(WithController({"nope"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl get: job nope not found");
  result = RunGetCommand(WithController({}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl get: missing job ID");

  result = RunListCommand(WithController({}), context_);
  ASSERT_EQ(result.exit_code, kExitOk);
  EXPECT_LT(result.out.find("job-2"), result.out.find("job-1"));
  result = RunListCommand(WithController({"--output", "json", "--limit", "1"}),
                          context_);
  const nlohmann::json list = nlohmann::json::parse(result.out);
  ASSERT_EQ(list["jobs"].size(), 1u);
  EXPECT_EQ(list["jobs"][0]["id"], "job-2");

  result = RunCancelCommand(WithController({"job-1"}), context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "job job-1 CANCELLED: cancelled by user\n");
  result = RunCancelCommand(WithController({"job-1"}), context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  ExpectOneLine(result, "meshctl cancel: job job-1 already finished");
  result = RunCancelCommand(WithController({"nope"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
}

TEST_F(JobCommandsTest, WatchJsonLines) {
  ASSERT_EQ(RunSubmitCommand(WithController(Case1()), context_).exit_code,
            kExitOk);
  fake_.SetWatchEvents("job-1",
                       {Event(v1::JOB_STATE_RUNNING, 0.1, "running"),
                        Event(v1::JOB_STATE_CANCELLED, 0.1, "cancelled")});
  const CommandResult result =
      RunWatchCommand(WithController({"job-1", "--output", "json"}), context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  std::vector<nlohmann::json> lines;
  std::istringstream in(streamed_);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["state"], "RUNNING");
  EXPECT_EQ(lines[1]["state"], "CANCELLED");
  EXPECT_EQ(nlohmann::json::parse(result.out)["state"], "CANCELLED");
}

TEST_F(JobCommandsTest, ClusterTable) {
  v1::GetClusterResponse cluster;
  cluster.mutable_topology()->set_num_hosts(1);
  cluster.mutable_topology()->set_devices_per_host(2);
  v1::WorkerInfo* worker = cluster.add_workers();
  worker->set_name("worker-0");
  worker->set_num_devices(2);
  worker->set_host_index(0);
  worker->set_state(v1::WorkerInfo::STATE_READY);
  cluster.mutable_topology()->set_host_copy_bandwidth(5e9);
  cluster.mutable_topology()->set_transfer_setup_seconds(2e-5);
  fake_.SetCluster(cluster);
  CommandResult result = RunClusterCommand(WithController({}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("1 (1 ready, 0 busy, 0 lost)"));
  EXPECT_THAT(result.out, HasSubstr("host copy 40 Gbps"));
  EXPECT_THAT(result.out, HasSubstr("transfer setup"));
  EXPECT_THAT(result.out, HasSubstr("worker-0"));
  result = RunClusterCommand(WithController({"--output", "json"}), context_);
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["controller"], fake_.address());
  EXPECT_EQ(json["workers"][0]["devices"], nlohmann::json({0, 1}));
  EXPECT_EQ(json["topology"]["host_copy_bandwidth_bytes_per_second"], 5e9);
  EXPECT_EQ(json["topology"]["transfer_setup_seconds"], 2e-5);
}

TEST_F(JobCommandsTest, LivePlan) {
  v1::PlanResponse response;
  response.mutable_topology()->set_num_hosts(5);
  response.mutable_topology()->set_devices_per_host(4);
  response.mutable_topology()->set_transfer_setup_seconds(1e-5);
  response.mutable_placed_src_mesh()->add_shape(2);
  response.mutable_placed_src_mesh()->add_shape(4);
  for (int d = 4; d < 12; ++d) {
    response.mutable_placed_src_mesh()->add_devices(d);
  }
  v1::Plan* plan = response.mutable_plan();
  plan->set_strategy("meshcast");
  plan->set_predicted_seconds(0.002);
  plan->set_lower_bound_seconds(0.001);
  v1::Buffer* buffer = plan->add_buffers();
  buffer->set_device(4);
  buffer->set_role(v1::Buffer::ROLE_SOURCE);
  v1::CommGroup* group = plan->add_groups();
  group->add_devices(4);
  group->add_devices(8);
  v1::Step* step = plan->add_steps();
  step->set_bytes(64);
  for (const char* name : {"send_recv", "meshcast"}) {
    v1::StrategyRow* row = response.add_rows();
    row->set_strategy(name);
    row->set_predicted_seconds(0.002);
    row->set_lower_bound_seconds(0.001);
    row->set_chosen(std::string(name) == "meshcast");
  }
  fake_.SetPlanResponse(response);
  const std::vector<std::string> case1 = Case1();
  std::vector<std::string> args(case1.begin() + 1, case1.end());
  args.insert(args.end(), {"--output", "json"});
  CommandResult result = RunPlanCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  ASSERT_EQ(fake_.planned().size(), 1u);
  EXPECT_TRUE(fake_.planned()[0].src_mesh().devices().empty());
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["strategy"], "meshcast");
  EXPECT_EQ(json["controller"], fake_.address());
  // The controller's placement wins over the devices holding tiles.
  EXPECT_EQ(json["src_mesh"]["devices"],
            nlohmann::json({4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(json["topology"]["transfer_setup_seconds"], 1e-5);
  EXPECT_EQ(json["strategies"].size(), 2u);
  EXPECT_EQ(json["strategies"][1]["chosen"], true);
  EXPECT_EQ(json["transfers"][0]["src_device"], 4);
  EXPECT_EQ(json["transfers"][0]["dst_devices"], nlohmann::json({8}));

  args.resize(args.size() - 2);
  result = RunPlanCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("(live dry run)"));
  EXPECT_THAT(result.out, HasSubstr("* meshcast"));
  EXPECT_THAT(result.out,
              HasSubstr("(placed by the controller on devices 4-11)"));
  EXPECT_THAT(result.out, HasSubstr("transfer setup"));

  args.insert(args.end(), {"--cluster", "5x4"});
  result = RunPlanCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl plan: --cluster: not used with --live");
}

TEST_F(JobCommandsTest, GetShowsPlacedMeshes) {
  v1::Job job;
  job.set_id("j-7");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_placed_src_mesh()->add_shape(2);
  job.mutable_placed_src_mesh()->add_shape(4);
  for (int d = 0; d < 8; ++d) job.mutable_placed_src_mesh()->add_devices(d);
  job.mutable_placed_dst_mesh()->add_shape(8);
  for (int d = 8; d < 16; ++d) job.mutable_placed_dst_mesh()->add_devices(d);
  fake_.AddJob(job);
  CommandResult result = RunGetCommand(WithController({"j-7"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("src mesh 2x4 on devices 0-7, dst mesh 8 "
                                    "on devices 8-15"));
  result = RunGetCommand(WithController({"j-7", "--output", "json"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["placed_src_mesh"]["shape"], nlohmann::json({2, 4}));
  EXPECT_EQ(json["placed_dst_mesh"]["devices"],
            nlohmann::json({8, 9, 10, 11, 12, 13, 14, 15}));
}


// ---- collective jobs, verify, metrics, timelines (issue 10) ---------------

TEST_F(JobCommandsTest, SubmitCollectiveFillsTheSpec) {
  const CommandResult result = RunSubmitCommand(
      WithController({"collective", "--op", "all_reduce", "--mesh", "2x4",
                      "--bytes", "256MiB", "--dtype", "float32",
                      "--reduction", "max", "--iterations", "3", "--name",
                      "fabric", "--verify", "sample"}),
      context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  ASSERT_EQ(fake_.submitted().size(), 1u);
  const v1::JobSpec spec = fake_.submitted()[0];
  ASSERT_TRUE(spec.has_collective());
  EXPECT_EQ(spec.name(), "fabric");
  EXPECT_EQ(spec.verify(), v1::VERIFY_MODE_SAMPLE);
  const v1::CollectiveSpec& c = spec.collective();
  EXPECT_EQ(c.op(), "all_reduce");
  EXPECT_THAT(c.mesh().shape(), ElementsAre(2, 4));
  EXPECT_FALSE(c.mesh().has_first_host());  // the controller places it
  EXPECT_EQ(c.size(), "256MiB");  // as given: the controller parses it
  EXPECT_EQ(c.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(c.reduction(), "max");
  EXPECT_EQ(c.iterations(), 3);

  // Pinned meshes go as first_host; dtype defaults to float32.
  const CommandResult pinned = RunSubmitCommand(
      WithController({"collective", "--op", "broadcast", "--mesh", "2x4@1",
                      "--bytes", "1MiB"}),
      context_);
  ASSERT_EQ(pinned.exit_code, kExitOk) << pinned.err;
  const v1::CollectiveSpec c2 = fake_.submitted().at(1).collective();
  EXPECT_EQ(c2.mesh().first_host(), 1);
  EXPECT_EQ(c2.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(fake_.submitted().at(1).verify(), v1::VERIFY_MODE_FULL);
}

TEST_F(JobCommandsTest, SubmitVerifyOnReshard) {
  std::vector<std::string> args = Case1();
  args.insert(args.end(), {"--verify", "off"});
  const CommandResult result = RunSubmitCommand(WithController(args), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(fake_.submitted().at(0).verify(), v1::VERIFY_MODE_OFF);
}

TEST_F(JobCommandsTest, SubmitCollectiveBadValuesNameTheFlag) {
  const auto run = [&](std::vector<std::string> args) {
    return RunSubmitCommand(WithController(std::move(args)), context_);
  };
  const std::vector<std::string> base = {"collective", "--op", "all_reduce",
                                         "--mesh", "2x4", "--bytes", "1MiB"};
  std::vector<std::string> args = base;
  args[2] = "allreduce";
  CommandResult result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --op: ");
  EXPECT_THAT(result.err, HasSubstr("all_reduce"));
  EXPECT_THAT(result.err, HasSubstr("reduce_scatter"));

  args = base;
  args[6] = "lots";
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --bytes: ");

  args = base;
  args.insert(args.end(), {"--reduction", "min"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --reduction: ");
  EXPECT_THAT(result.err, HasSubstr("sum, max"));

  args = base;
  args[4] = "2x";
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --mesh: cannot parse mesh '2x'");

  args = base;
  args.insert(args.end(), {"--verify", "some"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --verify: ");
  EXPECT_THAT(result.err, HasSubstr("full"));
  EXPECT_THAT(result.err, HasSubstr("sample"));

  args = base;
  args.insert(args.end(), {"--iterations", "many"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --iterations: 'many' is not an");

  result = run({"collective", "--mesh", "2x4", "--bytes", "1MiB"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --op: ");

  args = base;
  args.insert(args.end(), {"--src-spec", "S0RR"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result,
                "meshctl submit: --src-spec: not a flag of collective jobs");

  args = Case1();
  args.insert(args.end(), {"--op", "all_reduce"});
  result = run(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --op: not a flag of reshard jobs");
  EXPECT_TRUE(fake_.submitted().empty());
}

TEST_F(JobCommandsTest, SubmitCollectiveServerErrorNamesTheFlag) {
  fake_.SetSubmitError(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      "collective.mesh 4x4 needs 4 hosts with 4 free devices; cluster has 2 "
      "hosts x 4 devices"));
  const CommandResult result = RunSubmitCommand(
      WithController({"collective", "--op", "all_gather", "--mesh", "4x4",
                      "--bytes", "1MiB"}),
      context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --mesh: 4x4 needs 4 hosts");
}

TEST_F(JobCommandsTest, SubmitJobSpecFileWithFlagOverride) {
  const std::string path = ::testing::TempDir() + "/job_commands_test_" +
                           std::to_string(getpid()) + "_collective.json";
  std::ofstream(path) << R"({"name": "x", "verify": "sample",
      "collective": {"op": "all_reduce", "mesh": {"shape": [2, 4]},
                     "size": "256MiB", "dtype": "DTYPE_BFLOAT16"}})";
  CommandResult result = RunSubmitCommand(
      WithController({"-f", path, "--bytes", "1GiB"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  v1::JobSpec spec = fake_.submitted().at(0);
  EXPECT_EQ(spec.name(), "x");
  EXPECT_EQ(spec.verify(), v1::VERIFY_MODE_SAMPLE);
  EXPECT_EQ(spec.collective().size(), "1GiB");
  EXPECT_EQ(spec.collective().dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_THAT(spec.collective().mesh().shape(), ElementsAre(2, 4));

  // The kind named on the command line must match the file's.
  result = RunSubmitCommand(WithController({"reshard", "-f", path}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: -f: " + path +
                            " describes a collective job, not reshard");

  // A bad value in the file is named by its key.
  const std::string bad = ::testing::TempDir() + "/job_commands_test_" +
                          std::to_string(getpid()) + "_bad.yaml";
  std::ofstream(bad) << "collective: {op: gather, mesh: 2x4, size: 1MiB}\n";
  result = RunSubmitCommand(WithController({"-f", bad}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: " + bad + ": collective.op: ");

  // A reshard in the JobSpec form: flags still override field by field.
  const std::string reshard = ::testing::TempDir() + "/job_commands_test_" +
                              std::to_string(getpid()) + "_reshard.yaml";
  std::ofstream(reshard) << "reshard:\n"
                            "  tensor: {shape: [64, 64, 256], dtype: int32}\n"
                            "  src_mesh: {shape: [2, 4]}\n"
                            "  src_spec: {text: S0RR}\n"
                            "  dst_mesh: {shape: [2, 4]}\n"
                            "  dst_spec: {text: RS0R}\n";
  result = RunSubmitCommand(
      WithController({"-f", reshard, "--strategy", "meshcast"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  spec = fake_.submitted().back();
  EXPECT_THAT(spec.reshard().tensor().shape(), ElementsAre(64, 64, 256));
  EXPECT_EQ(spec.reshard().tensor().dtype(), v1::DTYPE_INT32);
  EXPECT_EQ(spec.reshard().dst_spec().text(), "RS0R");
  EXPECT_EQ(spec.reshard().strategy(), "meshcast");
}

// A finished collective job with an owner and timings, for -o yaml/wide.
v1::Job CollectiveJobForOutput() {
  v1::Job job;
  job.set_id("job-9");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_created_unix(1.7e9);
  job.set_owner("alice");
  v1::CollectiveSpec* c = job.mutable_spec()->mutable_collective();
  c->set_op("all_reduce");
  c->mutable_mesh()->add_shape(1);
  c->mutable_mesh()->add_shape(2);
  c->set_size("1MiB");
  v1::DeviceMesh* placed = job.add_placed_meshes();
  placed->add_shape(1);
  placed->add_shape(2);
  placed->add_devices(0);
  placed->add_devices(1);
  job.mutable_result()->set_seconds(0.25);
  job.mutable_result()->set_predicted_seconds(0.2);
  (*job.mutable_result()->mutable_metrics())["busbw_bytes_per_second"] = 5e9;
  return job;
}

// A finished collective job as the controller reports it.
v1::Job CollectiveJob() {
  v1::Job job;
  job.set_id("job-9");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_created_unix(1.7e9);
  v1::CollectiveSpec* c = job.mutable_spec()->mutable_collective();
  c->set_op("all_reduce");
  c->mutable_mesh()->add_shape(1);
  c->mutable_mesh()->add_shape(2);
  c->set_size("1MiB");
  c->set_dtype(v1::DTYPE_FLOAT32);
  v1::DeviceMesh* placed = job.add_placed_meshes();
  placed->add_shape(1);
  placed->add_shape(2);
  placed->add_devices(0);
  placed->add_devices(1);
  v1::Plan* plan = job.mutable_plan();
  plan->set_kind("collective");
  plan->set_strategy("ring");
  v1::CommGroup* group = plan->add_groups();
  group->add_devices(0);
  group->add_devices(1);
  v1::Step* step = plan->add_steps();
  step->set_op(v1::Step::OP_ALL_REDUCE);
  step->set_bytes(1 << 20);
  plan->add_predicted_step_start(0);
  plan->add_predicted_step_finish(0.0008);
  v1::JobResult* result = job.mutable_result();
  result->set_seconds(0.001);
  result->set_bytes_moved(1 << 20);
  result->set_elements_verified(262144);
  (*result->mutable_metrics())["algbw_bytes_per_second"] = 1.048576e9;
  (*result->mutable_metrics())["busbw_bytes_per_second"] = 1.048576e9;
  (*result->mutable_metrics())["busbw_bound_bytes_per_second"] = 1.25e9;
  (*result->mutable_metrics())["time_per_iteration_seconds"] = 0.001;
  for (int rank : {0, 1}) {
    v1::StepResult* s = result->add_steps();
    s->set_step(0);
    s->set_worker(absl::StrCat("worker-", rank));
    s->set_device(rank);
    s->set_bytes(1 << 20);
    s->set_start_seconds(0.0001 * rank);
    s->set_end_seconds(0.001);
    s->set_seconds(0.001 - 0.0001 * rank);
  }
  return job;
}

TEST_F(JobCommandsTest, GetPrintsMetricsForAnyKind) {
  fake_.AddJob(CollectiveJob());
  CommandResult result =
      RunGetCommand(WithController({"job-9"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("collective: all_reduce of 1MiB float32 "
                                    "on 1x2, sum, 1 iteration"));
  EXPECT_THAT(result.out, HasSubstr("meshes:     mesh 1x2 on devices 0-1"));
  // busbw in GB/s (10^9 B/s, as nccl-tests) beside its bound, which is not
  // listed on its own.
  EXPECT_THAT(result.out,
              HasSubstr("busbw               1.05 GB/s  (bound 1.25 GB/s: "
                        "84%)\n"));
  EXPECT_THAT(result.out, HasSubstr("metrics:    algbw               1.05 "
                                    "GB/s\n"));
  EXPECT_THAT(result.out,
              HasSubstr("time_per_iteration  1.000 ms\n"));
  EXPECT_THAT(result.out, Not(HasSubstr("busbw_bound")));
  EXPECT_THAT(result.out, Not(HasSubstr("max error")));

  result = RunGetCommand(WithController({"job-9", "--output", "json"}),
                         context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json job = nlohmann::json::parse(result.out);
  EXPECT_EQ(job["result"]["metrics"]["busbw_bytes_per_second"], 1.048576e9);
  EXPECT_EQ(job["result"]["metrics"]["busbw_bound_bytes_per_second"], 1.25e9);
  EXPECT_EQ(job["result"]["metrics"].size(), 4u);
  EXPECT_EQ(job["result"]["max_abs_error"], 0.0);
  EXPECT_EQ(job["spec"]["collective"]["op"], "all_reduce");
  EXPECT_EQ(job["spec"]["collective"]["mesh"]["shape"],
            nlohmann::json({1, 2}));
  EXPECT_EQ(job["spec"]["verify"], "full");
  EXPECT_EQ(job["plan"]["kind"], "collective");
  EXPECT_EQ(job["placed_meshes"][0]["devices"], nlohmann::json({0, 1}));
  EXPECT_EQ(job["result"]["steps"][1]["start_seconds"], 0.0001);
  EXPECT_EQ(job["result"]["steps"][1]["device"], 1);

  // A computed result's largest error shows when nonzero.
  v1::Job computed = CollectiveJob();
  computed.set_id("job-10");
  computed.mutable_result()->set_max_abs_error(2.5e-7);
  fake_.AddJob(computed);
  result = RunGetCommand(WithController({"job-10"}), context_);
  EXPECT_THAT(result.out, HasSubstr("max error:  2.5e-07"));
}

TEST_F(JobCommandsTest, GetTimeline) {
  fake_.AddJob(CollectiveJob());
  CommandResult result =
      RunGetCommand(WithController({"job-9", "--timeline"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("timeline of job-9: 2 steps on 2 rows"));
  EXPECT_THAT(result.out, HasSubstr("worker-0 dev 0 |AAAA"));
  EXPECT_THAT(result.out, HasSubstr("worker-1 dev 1 | "));
  result = RunGetCommand(
      WithController({"job-9", "--timeline", "--output", "json"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl get: --timeline: ");
}

TEST_F(JobCommandsTest, TraceWritesTraceEventJson) {
  fake_.AddJob(CollectiveJob());
  const std::string path = ::testing::TempDir() + "/job_commands_test_" +
                           std::to_string(getpid()) + "_trace.json";
  CommandResult result =
      RunTraceCommand(WithController({"job-9", "-o", path}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("wrote " + path + ": job job-9, 2 "
                                     "measured and 2 predicted step events"));
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_TRUE(trace["traceEvents"].is_array());
  int complete = 0;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event["ph"] == "X") ++complete;
  }
  EXPECT_EQ(complete, 4);

  // Without -o: stdout.
  result = RunTraceCommand(WithController({"job-9"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(nlohmann::json::parse(result.out), trace);

  v1::Job queued;
  queued.set_id("job-11");
  queued.set_state(v1::JOB_STATE_QUEUED);
  fake_.AddJob(queued);
  result = RunTraceCommand(WithController({"job-11"}), context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  ExpectOneLine(result, "meshctl trace: job job-11 (QUEUED) has no step");
  result = RunTraceCommand(WithController({"job-404"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
}


TEST_F(JobCommandsTest, LivePlanOfAnyKindSendsTheSpec) {
  v1::PlanResponse response;
  response.mutable_topology()->set_num_hosts(2);
  response.mutable_topology()->set_devices_per_host(4);
  v1::DeviceMesh* placed = response.add_placed_meshes();
  placed->add_shape(2);
  placed->add_shape(4);
  for (int d = 0; d < 8; ++d) placed->add_devices(d);
  v1::Plan* plan = response.mutable_plan();
  plan->set_kind("collective");
  plan->set_strategy("ring");
  plan->set_predicted_seconds(0.004);
  plan->set_lower_bound_seconds(0.002);
  v1::CommGroup* group = plan->add_groups();
  for (int d = 0; d < 8; ++d) group->add_devices(d);
  v1::Step* step = plan->add_steps();
  step->set_op(v1::Step::OP_ALL_REDUCE);
  step->set_bytes(1 << 20);
  v1::StrategyRow* row = response.add_rows();
  row->set_strategy("ring");
  row->set_predicted_seconds(0.004);
  row->set_lower_bound_seconds(0.002);
  row->set_transfers(1);
  row->set_bytes(1 << 20);
  row->set_chosen(true);
  fake_.SetPlanResponse(response);
  CommandResult result = RunPlanCommand(
      WithController({"collective", "--op", "all_reduce", "--mesh", "2x4",
                      "--bytes", "1MiB"}),
      context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  ASSERT_EQ(fake_.plan_requests().size(), 1u);
  const v1::PlanRequest request = fake_.plan_requests()[0];
  EXPECT_FALSE(request.has_reshard());
  EXPECT_EQ(request.spec().collective().op(), "all_reduce");
  EXPECT_EQ(request.spec().collective().size(), "1MiB");
  EXPECT_THAT(result.out, HasSubstr("(live dry run)"));
  EXPECT_THAT(result.out, HasSubstr("placed:      mesh 2x4 on devices 0-7\n"));
  EXPECT_THAT(result.out, HasSubstr("* ring"));
  // 1 MiB in 4 ms: algbw 0.26 GB/s; busbw x 2*7/8; bound from 2 ms.
  EXPECT_THAT(result.out, HasSubstr("algbw               0.26 GB/s\n"));
  EXPECT_THAT(result.out,
              HasSubstr("busbw               0.46 GB/s  (bound 0.92 GB/s: "
                        "50%)\n"));

  // A reshard live plan sends the spec too, and the older reshard field.
  const std::vector<std::string> case1 = Case1();
  result = RunPlanCommand(
      WithController(std::vector<std::string>(case1.begin() + 1, case1.end())),
      context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const v1::PlanRequest reshard = fake_.plan_requests().at(1);
  EXPECT_EQ(reshard.reshard().src_spec().text(), "S0RR");
  EXPECT_EQ(reshard.spec().reshard().src_spec().text(), "S0RR");
}

// -o is --output; yaml carries the JSON's data; wide adds columns.
TEST_F(JobCommandsTest, OutputShortFormYamlAndWide) {
  ASSERT_EQ(RunSubmitCommand(WithController(Case1()), context_).exit_code,
            kExitOk);
  v1::Job done = CollectiveJobForOutput();
  fake_.AddJob(done);
  const CommandResult long_form =
      RunGetCommand(WithController({"job-9", "--output", "json"}), context_);
  const CommandResult short_form =
      RunGetCommand(WithController({"job-9", "-o", "json"}), context_);
  ASSERT_EQ(short_form.exit_code, kExitOk) << short_form.err;
  EXPECT_EQ(short_form.out, long_form.out);

  const CommandResult yaml =
      RunGetCommand(WithController({"job-9", "-o", "yaml"}), context_);
  ASSERT_EQ(yaml.exit_code, kExitOk) << yaml.err;
  EXPECT_THAT(yaml.out, StartsWith("id: job-9\n"));
  EXPECT_THAT(yaml.out, HasSubstr("\nstate: SUCCEEDED\n"));
  EXPECT_THAT(yaml.out, HasSubstr("  seconds: 0.25\n"));
  EXPECT_THAT(yaml.out, HasSubstr("    busbw_bytes_per_second: 5000000000"));
  // --timeline draws text: refused with yaml as with json.
  const CommandResult timeline = RunGetCommand(
      WithController({"job-9", "-o", "yaml", "--timeline"}), context_);
  EXPECT_EQ(timeline.exit_code, kExitUsage);
  ExpectOneLine(timeline, "meshctl get: --timeline: draws text; with "
                          "--output yaml");

  const CommandResult list_yaml =
      RunListCommand(WithController({"-o", "yaml"}), context_);
  ASSERT_EQ(list_yaml.exit_code, kExitOk) << list_yaml.err;
  EXPECT_THAT(list_yaml.out, StartsWith("jobs:\n  - id: job-9\n"));
  EXPECT_THAT(list_yaml.out, HasSubstr("  - id: job-1\n"));

  const CommandResult table = RunListCommand(WithController({}), context_);
  const CommandResult wide =
      RunListCommand(WithController({"-o", "wide"}), context_);
  ASSERT_EQ(wide.exit_code, kExitOk) << wide.err;
  EXPECT_THAT(table.out, Not(HasSubstr("KIND")));
  for (const char* column :
       {"ID", "KIND", "MESHES", "DEVICES", "OWNER", "PREDICTED", "MEASURED"}) {
    EXPECT_THAT(wide.out, HasSubstr(column)) << column;
  }
  EXPECT_THAT(wide.out, HasSubstr("collective"));
  EXPECT_THAT(wide.out, HasSubstr("1x2"));
  EXPECT_THAT(wide.out, HasSubstr("alice"));
  EXPECT_THAT(wide.out, HasSubstr("250.000 ms"));  // measured
  EXPECT_THAT(wide.out, HasSubstr("200.000 ms"));  // predicted
  EXPECT_THAT(wide.out, HasSubstr("reshard"));

  // Other commands take -o too.
  const CommandResult cancel =
      RunCancelCommand(WithController({"job-1", "-o", "yaml"}), context_);
  ASSERT_EQ(cancel.exit_code, kExitOk) << cancel.err;
  EXPECT_THAT(cancel.out, StartsWith("id: job-1\n"));
  const CommandResult cluster =
      RunClusterCommand(WithController({"-o", "yaml"}), context_);
  ASSERT_EQ(cluster.exit_code, kExitOk) << cluster.err;
  EXPECT_THAT(cluster.out, HasSubstr("topology:\n  num_hosts: 5\n"));
}

TEST_F(JobCommandsTest, WatchYamlDocuments) {
  ASSERT_EQ(RunSubmitCommand(WithController(Case1()), context_).exit_code,
            kExitOk);
  fake_.SetWatchEvents("job-1",
                       {Event(v1::JOB_STATE_RUNNING, 0.1, "running"),
                        Event(v1::JOB_STATE_SUCCEEDED, 1, "done")});
  const CommandResult result =
      RunWatchCommand(WithController({"1", "-o", "yaml"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(streamed_, StartsWith("---\njob_id: job-1\nstate: RUNNING\n"));
  EXPECT_THAT(streamed_, HasSubstr("---\njob_id: job-1\nstate: SUCCEEDED\n"));
  EXPECT_THAT(result.out, StartsWith("---\nid: job-1\n"));
}

// A mistyped value gets the closest allowed one, whichever layer checks it.
TEST_F(JobCommandsTest, BadValuesSuggestTheClosest) {
  std::vector<std::string> args = Case1();
  args.insert(args.end(), {"--strategy", "meshcats"});
  CommandResult result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: ");
  EXPECT_THAT(result.err, HasSubstr("'meshcats'"));
  EXPECT_THAT(result.err, HasSubstr("; did you mean meshcast?\n"));

  args = Case1();
  args[4] = "flaot32";  // --dtype
  result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("did you mean float32?"));

  args = Case1();
  args.insert(args.end(), {"--verify", "sampel"});
  result = RunSubmitCommand(WithController(args), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  ExpectOneLine(result, "meshctl submit: --verify: unknown value 'sampel'; "
                        "allowed: full, sample, off, checksum; did you mean sample?");

  result = RunListCommand(WithController({"-o", "jsno"}), context_);
  ExpectOneLine(result, "meshctl list: --output: unknown value 'jsno'; "
                        "allowed: table, wide, json, yaml; did you mean json?");
  result = RunListCommand(WithController({"--limt", "2"}), context_);
  ExpectOneLine(result, "meshctl list: unknown flag --limt; did you mean "
                        "--limit?");
  EXPECT_TRUE(fake_.submitted().empty());
}

}  // namespace
}  // namespace meshcast::cli
