#include "cli/plan_command.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/workloads/public_suite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The example of the issue: case 1 of the public suite
// (bench/workloads/public_suite.txt) on the paper's testbed.
std::vector<std::string> Case1Args() {
  static const auto* suite = new absl::StatusOr<std::vector<PublicSuiteCase>>(
      LoadPublicSuite());
  EXPECT_TRUE(suite->ok()) << suite->status();
  PublicSuiteCase c;
  if (suite->ok()) {
    for (const PublicSuiteCase& each : **suite) {
      if (each.name == "case1") c = each;
    }
  }
  EXPECT_EQ(c.name, "case1") << "no case1 in the public suite";
  return {"--cluster",    "5x4",
          "--inter-gbps", "10",
          "--intra-gbps", "1200",
          "--shape",      ShapeText(c.shape),
          "--dtype",      "int32",
          "--src-mesh",   c.src_mesh.At(0),
          "--src-spec",   c.src_spec,
          "--dst-mesh",   c.dst_mesh.At(c.dst_first_host()),
          "--dst-spec",   c.dst_spec};
}

// Replaces (or appends) a flag's value in an argument list.
std::vector<std::string> With(std::vector<std::string> args,
                              const std::string& flag,
                              const std::string& value) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end()) {
    *(it + 1) = value;
  } else {
    args.push_back(flag);
    args.push_back(value);
  }
  return args;
}

std::vector<std::string> Without(std::vector<std::string> args,
                                 const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end()) args.erase(it, it + 2);
  return args;
}

// Runs a command expected to fail on input and returns its one error line.
std::string UsageError(const std::vector<std::string>& args) {
  const CommandResult result = RunPlanCommand(args);
  EXPECT_EQ(result.exit_code, kExitUsage) << result.out << result.err;
  EXPECT_TRUE(result.out.empty());
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
      << result.err;
  EXPECT_THAT(result.err, StartsWith("meshctl plan: "));
  return result.err;
}

TEST(PlanCommandTest, HelpExplainsEveryFlag) {
  const CommandResult result = RunPlanCommand({"--help"});
  EXPECT_EQ(result.exit_code, kExitOk);
  for (const char* flag : {"--cluster",
                           "--inter-gbps",
                           "--intra-gbps",
                           "--inter-latency-us",
                           "--intra-latency-us",
                           "--shape",
                           "--dtype",
                           "--src-mesh",
                           "--src-devices",
                           "--src-shape",
                           "--src-spec",
                           "--dst-mesh",
                           "--dst-devices",
                           "--dst-shape",
                           "--dst-spec",
                           "--strategy",
                           "--output",
                           "--verify",
                           "S01",
                           "host*G + local",
                           "exit codes",
                           "send_recv",
                           "broadcast_lb",
                           "meshcast",
                           "lower bound"}) {
    EXPECT_THAT(result.out, HasSubstr(flag));
  }
}

TEST(PlanCommandTest, BadSpecNamesFlagTokenAndAllowedForms) {
  const std::string err = UsageError(With(Case1Args(), "--src-spec", "S0XR"));
  EXPECT_THAT(err, StartsWith("meshctl plan: --src-spec: unknown token 'X' "
                              "at position 3"));
  EXPECT_THAT(err, HasSubstr("allowed: R"));
  EXPECT_THAT(err, HasSubstr("S0, S1, S01"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--dst-spec", "S0S0R")),
              HasSubstr("--dst-spec: duplicate mesh axis 0"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--dst-spec", "S0R")),
              HasSubstr("--dst-spec: spec S0R has 2 dimension(s)"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--src-spec", "S2RR")),
              HasSubstr("--src-spec: spec S2RR shards tensor dimension 0 over "
                        "mesh axis 2"));
}


TEST(PlanCommandTest, MissingAndMalformedFlags) {
  EXPECT_THAT(UsageError(Without(Case1Args(), "--cluster")),
              HasSubstr("--cluster: required for an offline plan, e.g. "
                        "--cluster 5x4; or --live to plan on the running "
                        "cluster"));
  EXPECT_THAT(UsageError(Without(Case1Args(), "--shape")),
              HasSubstr("--shape: required"));
  EXPECT_THAT(UsageError(Without(Case1Args(), "--dst-spec")),
              HasSubstr("--dst-spec: required"));
  EXPECT_THAT(UsageError(Without(Case1Args(), "--src-mesh")),
              HasSubstr("--src-mesh: required"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--cluster", "5by4")),
              HasSubstr("--cluster: cannot parse cluster shape"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--shape", "1024x0")),
              HasSubstr("--shape: cannot parse shape"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--dtype", "int3")),
              HasSubstr("--dtype: unknown dtype 'int3'; allowed: int8"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--inter-gbps", "fast")),
              HasSubstr("--inter-gbps: 'fast' is not a finite number"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--intra-gbps", "0")),
              HasSubstr("--intra-gbps: must be > 0"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--inter-latency-us", "-1")),
              HasSubstr("--inter-latency-us: must be >= 0"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--output", "xml")),
              HasSubstr("--output: unknown value 'xml'; allowed: table, "
                        "wide, json, yaml"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--bogus", "1")),
              HasSubstr("unknown flag --bogus"));
  std::vector<std::string> extra = Case1Args();
  extra.push_back("stray");
  EXPECT_THAT(UsageError(extra), HasSubstr("unexpected argument 'stray'"));
}

// With a controller in the environment, a plan without --cluster most
// likely meant the running cluster: the error says how.
TEST(PlanCommandTest, MissingClusterPointsAtLiveWhenAControllerIsSet) {
  const CommandResult result =
      RunPlanCommand(Without(Case1Args(), "--cluster"),
                     ContextWithEnv({{"MESHCAST_CONTROLLER", "127.0.0.1:41234"}}));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--cluster: required for an offline plan"));
  EXPECT_THAT(result.err,
              HasSubstr("--live to plan on the running cluster "
                        "($MESHCAST_CONTROLLER is 127.0.0.1:41234)"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1);
}

TEST(PlanCommandTest, MeshErrorsNameTheFlag) {
  std::string err = UsageError(With(Case1Args(), "--dst-mesh", "2x4@4"));
  EXPECT_THAT(err, HasSubstr("--dst-mesh: mesh 2x4@4 needs hosts 4..5"));
  EXPECT_THAT(err, HasSubstr("5 hosts"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--src-mesh", "2x8")),
              HasSubstr("--src-mesh: mesh 2x8 needs 8 devices per host"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--src-devices", "0,1")),
              HasSubstr("--src-mesh: give either --src-mesh or --src-devices"));
  EXPECT_THAT(UsageError(With(Without(Case1Args(), "--dst-mesh"),
                              "--dst-devices", "8,9")),
              HasSubstr("--dst-shape: required with --dst-devices"));
  EXPECT_THAT(UsageError(With(With(Without(Case1Args(), "--dst-mesh"),
                                   "--dst-devices", "8,9,99"),
                              "--dst-shape", "3")),
              HasSubstr("--dst-devices: mesh 3[8,9,99]: device 99 is outside"));
}

// The success paths below need planner/strategy.cc and cost_model.cc.
nlohmann::json RunJson(const std::vector<std::string>& args) {
  std::vector<std::string> json_args = args;
  json_args.push_back("--output");
  json_args.push_back("json");
  const CommandResult result = RunPlanCommand(json_args);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 1);
  return nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
}

TEST(PlanCommandTest, TableComparesEveryStrategy) {
  const CommandResult result = RunPlanCommand(Case1Args());
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_TRUE(result.err.empty());
  for (const char* text :
       {"send_recv", "local_allgather", "broadcast", "broadcast_lb", "meshcast",
        "lower bound", "* chosen: ", "x lower bound", "eff. Gbps",
        "unit tasks:  2", "2x4 [devices 8-15] S0RR"}) {
    EXPECT_THAT(result.out, HasSubstr(text));
  }
  // Exactly one row is marked.
  int marked = 0;
  for (size_t pos = 0;
       (pos = result.out.find("\n* ", pos)) != std::string::npos; ++pos) {
    if (result.out.compare(pos, 9, "\n* chosen") != 0) ++marked;
  }
  EXPECT_EQ(marked, 1) << result.out;
}

TEST(PlanCommandTest, JsonHasThePlanAndItsContext) {
  std::vector<std::string> args = Case1Args();
  args.push_back("--verify=true");
  const nlohmann::json plan = RunJson(args);
  ASSERT_TRUE(plan.is_object());
  for (const char* key :
       {"strategy", "predicted_seconds", "lower_bound_seconds", "transfers",
        "topology", "tensor", "src_mesh", "dst_mesh", "src_spec", "dst_spec",
        "strategies", "unit_tasks"}) {
    EXPECT_TRUE(plan.contains(key)) << key;
  }
  EXPECT_EQ(plan["verified"], true);
  EXPECT_EQ(plan["tensor"]["bytes"], int64_t{2} << 30);
  EXPECT_EQ(plan["tensor"]["dtype"], "int32");
  EXPECT_EQ(plan["src_spec"], "S0RR");
  EXPECT_EQ(plan["unit_tasks"], 2);
  EXPECT_EQ(plan["topology"]["inter_host_bandwidth_bytes_per_second"], 1.25e9);
  EXPECT_GE(plan["predicted_seconds"].get<double>(),
            plan["lower_bound_seconds"].get<double>() * (1 - 1e-9));
  // 2 GiB leave hosts 0 and 1 over two 10 Gbps NICs in parallel: >= 0.86 s.
  EXPECT_GT(plan["lower_bound_seconds"].get<double>(), 0.85);
  ASSERT_TRUE(plan["transfers"].is_array());
  ASSERT_FALSE(plan["transfers"].empty());
  for (const auto& transfer : plan["transfers"]) {
    ASSERT_EQ(transfer["slice"].size(), 3u);
    int64_t elements = 1;
    for (const auto& range : transfer["slice"]) {
      ASSERT_EQ(range.size(), 2u);
      EXPECT_LT(range[0].get<int64_t>(), range[1].get<int64_t>());
      elements *= range[1].get<int64_t>() - range[0].get<int64_t>();
    }
    EXPECT_EQ(transfer["bytes"].get<int64_t>(), elements * 4);
    EXPECT_GE(transfer["src_device"].get<int>(), 0);
    EXPECT_LT(transfer["src_device"].get<int>(), 8);  // source mesh
    for (const auto& dst : transfer["dst_devices"]) {
      EXPECT_GE(dst.get<int>(), 8);
    }
    EXPECT_GE(transfer["stage"].get<int>(), 0);
  }
  int chosen = 0;
  for (const auto& row : plan["strategies"]) {
    if (row["chosen"].get<bool>()) {
      ++chosen;
      EXPECT_EQ(row["strategy"], plan["strategy"]);
    }
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_EQ(plan["strategies"].size(), 5u);
}

TEST(PlanCommandTest, LargeJsonPlansStreamTheSameBytes) {
  // 128x8 -> 128x8 transpose: 16384 transfers, past the streaming
  // threshold.
  const std::vector<std::string> args = {
      "--cluster",  "256x8",      "--shape",    "8192x8192",  "--dtype",
      "bfloat16",   "--src-mesh", "128x8@0",    "--src-spec", "S0,S1",
      "--dst-mesh", "128x8@128",  "--dst-spec", "S1,S0",      "--strategy",
      "meshcast",   "--output",   "json"};
  std::string streamed;
  int pieces = 0;
  CommandContext streaming = ContextWithEnv({});
  streaming.stream_out = [&](absl::string_view text) {
    streamed.append(text.data(), text.size());
    ++pieces;
  };
  const CommandResult result = RunPlanCommand(args, streaming);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(result.out.empty());
  EXPECT_GT(pieces, 2);  // head, transfers in 1 MiB pieces, tail
  // Without a stream, the same text comes back whole.
  const CommandResult whole = RunPlanCommand(args, ContextWithEnv({}));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_TRUE(streamed == whole.out);  // (not printed: megabytes)
  const nlohmann::json plan = nlohmann::json::parse(streamed, nullptr, false);
  ASSERT_FALSE(plan.is_discarded());
  EXPECT_EQ(plan["transfers"].size(), 16384u);
  EXPECT_EQ(plan["num_transfers"], 16384);
}

TEST(PlanCommandTest, ExplicitStrategyAndDeviceLists) {
  nlohmann::json plan = RunJson(With(Case1Args(), "--strategy", "send_recv"));
  EXPECT_EQ(plan["strategy"], "send_recv");
  EXPECT_EQ(plan["requested_strategy"], "send_recv");
  // send_recv: one point-to-point copy per receiving device.
  for (const auto& transfer : plan["transfers"]) {
    EXPECT_EQ(transfer["dst_devices"].size(), 1u);
  }
  EXPECT_THAT(UsageError(With(Case1Args(), "--strategy", "fastest")),
              HasSubstr("--strategy: "));

  std::vector<std::string> args = Without(Case1Args(), "--src-mesh");
  args = With(args, "--src-devices", "0,1,4,5");
  args = With(args, "--src-shape", "2x2");
  plan = RunJson(args);
  EXPECT_EQ(plan["src_mesh"]["devices"], nlohmann::json({0, 1, 4, 5}));
  EXPECT_EQ(plan["src_mesh"]["shape"], nlohmann::json({2, 2}));
}

TEST(PlanCommandTest, UnevenShapeAndOverlappingMeshesVerify) {
  std::vector<std::string> args = With(Case1Args(), "--shape", "1000x7x3");
  args = With(args, "--dst-mesh", "3x4@1");
  args = With(args, "--dst-spec", "S01RR");
  args.push_back("--verify");
  const CommandResult result = RunPlanCommand(args);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("verified: all 5 plans"));
}

TEST(PlanCommandTest, CpuCostFlagsSetTheTopology) {
  EXPECT_THAT(UsageError(With(Case1Args(), "--host-copy-gbps", "-1")),
              HasSubstr("--host-copy-gbps: must be >= 0"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--host-copy-gbps", "inf")),
              HasSubstr("--host-copy-gbps:"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--transfer-setup-us", "-2")),
              HasSubstr("--transfer-setup-us: must be >= 0"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--transfer-setup-us", "soon")),
              HasSubstr("--transfer-setup-us: 'soon' is not a finite number"));

  const nlohmann::json defaults = RunJson(Case1Args());
  EXPECT_EQ(defaults["topology"]["host_copy_bandwidth_bytes_per_second"], 0.0);
  EXPECT_EQ(defaults["topology"]["transfer_setup_seconds"], 0.0);

  std::vector<std::string> args = Case1Args();
  args.insert(args.end(),
              {"--host-copy-gbps", "80", "--transfer-setup-us", "1000"});
  const nlohmann::json costly = RunJson(args);
  EXPECT_DOUBLE_EQ(
      costly["topology"]["host_copy_bandwidth_bytes_per_second"].get<double>(),
      10e9);
  EXPECT_DOUBLE_EQ(costly["topology"]["transfer_setup_seconds"].get<double>(),
                   1e-3);
  // Every transfer now pays 1 ms before its first byte: the prediction grows.
  EXPECT_GT(costly["predicted_seconds"].get<double>(),
            defaults["predicted_seconds"].get<double>());
}

// N is a 1-D mesh, as `meshctl submit` reads it: host 0's first N devices.
TEST(PlanCommandTest, OneDimensionalMeshAsSubmitReadsIt) {
  const std::vector<std::string> args =
      With(With(With(Case1Args(), "--src-mesh", "4"), "--src-spec", "S0RR"),
           "--dst-mesh", "2x4@2");
  const CommandResult result = RunPlanCommand(args, ContextWithEnv({}));
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json json = RunJson(args);
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["src_mesh"]["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(json["src_mesh"]["devices"], nlohmann::json::array({0, 1, 2, 3}));
  // A 1-D mesh has one axis.
  EXPECT_THAT(UsageError(With(With(Case1Args(), "--src-mesh", "4"),
                              "--src-spec", "S1RR")),
              HasSubstr("--src-spec: "));
  EXPECT_THAT(UsageError(With(Case1Args(), "--src-mesh", "8")),
              HasSubstr("--src-mesh: 1-D mesh 8 is the first 8 devices of "
                        "one host but the cluster has 4 per host"));
  EXPECT_THAT(UsageError(With(Case1Args(), "--src-mesh", "0")),
              HasSubstr("--src-mesh: cannot parse mesh \"0\""));
}

// Meshes without @h land where the controller would put them for
// `submit`: on disjoint hosts, beside a pinned mesh, or shared with
// --allow-overlap.
TEST(PlanCommandTest, UnpinnedMeshesArePlacedAsTheControllerPlacesThem) {
  std::vector<std::string> args =
      With(With(Case1Args(), "--src-mesh", "2x4"), "--dst-mesh", "2x4");
  nlohmann::json json = RunJson(args);
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["src_mesh"]["devices"],
            nlohmann::json::array({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(json["dst_mesh"]["devices"],
            nlohmann::json::array({8, 9, 10, 11, 12, 13, 14, 15}));
  // A pinned destination on hosts 0-1 pushes the source to host 2.
  json = RunJson(With(With(With(Case1Args(), "--src-mesh", "4"), "--src-spec",
                           "S0RR"),
                      "--dst-mesh", "2x4@0"));
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["src_mesh"]["devices"], nlohmann::json::array({8, 9, 10, 11}));
  // Two hosts cannot hold two disjoint 2x4 meshes, unless they may overlap.
  args = With(With(With(Case1Args(), "--cluster", "2x4"), "--src-mesh", "2x4"),
              "--dst-mesh", "2x4");
  EXPECT_THAT(UsageError(args),
              HasSubstr("on disjoint hosts need 4 hosts; cluster has 2 hosts"));
  args.push_back("--allow-overlap");
  json = RunJson(args);
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["dst_mesh"]["devices"],
            nlohmann::json::array({0, 1, 2, 3, 4, 5, 6, 7}));
}


// ---- every kind (issue 10) ------------------------------------------------

std::vector<std::string> CollectiveArgs() {
  return {"collective", "--cluster", "2x4",  "--op",    "all_reduce",
          "--mesh",     "2x4",       "--bytes", "256MiB", "--dtype",
          "float32"};
}

TEST(PlanCommandTest, CollectiveOfflineTable) {
  const CommandResult result = RunPlanCommand(CollectiveArgs());
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("job:         collective: all_reduce of "
                                    "256MiB float32 on 2x4, sum, 1 "
                                    "iteration\n"));
  EXPECT_THAT(result.out, HasSubstr("placed:      mesh 2x4 on devices 0-7"));
  EXPECT_THAT(result.out, HasSubstr("* ring"));
  EXPECT_THAT(result.out, HasSubstr("lower bound"));
  EXPECT_THAT(result.out, HasSubstr("* chosen: ring, predicted "));
  // The kind's figures of the simulated plan, busbw beside its bound.
  EXPECT_THAT(result.out, HasSubstr("busbw "));
  EXPECT_THAT(result.out, HasSubstr("GB/s  (bound "));
  EXPECT_THAT(result.out, testing::Not(HasSubstr("busbw_predicted")));
}

TEST(PlanCommandTest, CollectiveOfflineJsonHasThePlanIr) {
  std::vector<std::string> args = CollectiveArgs();
  args.insert(args.end(), {"--output", "json"});
  const CommandResult result = RunPlanCommand(args);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["kind"], "collective");
  EXPECT_EQ(json["meshes"][0]["devices"],
            nlohmann::json({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(json["plan"]["kind"], "collective");
  ASSERT_EQ(json["plan"]["steps"].size(), 1u);
  EXPECT_EQ(json["plan"]["steps"][0]["op"], "OP_ALL_REDUCE");
  // The plan's bytes are the nccl-tests size: 256 MiB per rank.
  EXPECT_EQ(json["plan"]["steps"][0]["bytes"], "268435456");
  EXPECT_GT(json["predicted_seconds"].get<double>(), 0);
  EXPECT_GE(json["predicted_seconds"].get<double>(),
            json["lower_bound_seconds"].get<double>());
  EXPECT_EQ(json["alternatives"][0]["chosen"], true);
  // busbw = algbw x 2(n-1)/n for all-reduce on 8 ranks, within rounding.
  const nlohmann::json& m = json["predicted_metrics"];
  EXPECT_NEAR(m["busbw_bytes_per_second"].get<double>(),
              m["algbw_bytes_per_second"].get<double>() * 2 * 7 / 8,
              1e-6 * m["busbw_bytes_per_second"].get<double>());
}

// `meshctl plan -f` simulates the job a job file describes: here the
// GEMM -> reduce-scatter DAG of a tp_overlap job, the one the cluster test
// runs on four workers.
TEST(PlanCommandTest, JobFileOfAnyKindIsSimulated) {
  const std::string path =
      ::testing::TempDir() + "/plan_command_test_tp_overlap.yaml";
  std::ofstream(path) << "name: gemm-rs\n"
                         "tp_overlap:\n"
                         "  m: 512\n  n: 256\n  k: 1024\n"
                         "  mesh: 4x1\n"
                         "  collective: reduce_scatter\n";
  CommandResult result = RunPlanCommand(
      {"-f", path, "--cluster", "4x1", "--output", "json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["kind"], "tp_overlap");
  const nlohmann::json& steps = json["plan"]["steps"];
  // Sequential: the GEMM alone (4 steps) and the collective alone (1) that
  // the job measures first, then the mode's 4 GEMMs and its collective.
  ASSERT_EQ(steps.size(), 10u);
  EXPECT_EQ(steps[0]["op"], "OP_COMPUTE");
  EXPECT_EQ(steps[4]["op"], "OP_REDUCE_SCATTER");
  EXPECT_EQ(steps[5]["op"], "OP_COMPUTE");
  EXPECT_EQ(steps[9]["op"], "OP_REDUCE_SCATTER");
  // The collective waits for the GEMMs: its predicted start is after theirs.
  const nlohmann::json& start = json["plan"]["predicted_step_start"];
  const nlohmann::json& finish = json["plan"]["predicted_step_finish"];
  ASSERT_EQ(start.size(), 10u);
  EXPECT_GE(start[4].get<double>(), finish[0].get<double>());
  EXPECT_GE(start[9].get<double>(), finish[5].get<double>());
  EXPECT_GT(json["predicted_seconds"].get<double>(), 0);
  // The file says what to plan; a kind's flag beside it is refused.
  result = RunPlanCommand({"-f", path, "--cluster", "4x1", "--op",
                           "all_reduce"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--op: the job comes from -f"));
}

// --device-kind sets the devices' compute rates (planner/topology.h): the
// same GEMM-bound job is predicted far faster on H100s than on CPU cores.
TEST(PlanCommandTest, DeviceKindSetsTheComputeRates) {
  const std::string path =
      ::testing::TempDir() + "/plan_command_test_device_kind.yaml";
  std::ofstream(path) << "tp_overlap:\n"
                         "  m: 1024\n  n: 1024\n  k: 4096\n"
                         "  mesh: 4x1\n";
  const auto predicted = [&](const std::string& kind) {
    std::vector<std::string> args = {"-f",  path,       "--cluster",
                                     "4x1", "--output", "json"};
    if (!kind.empty()) args.insert(args.end(), {"--device-kind", kind});
    const CommandResult result = RunPlanCommand(args);
    EXPECT_EQ(result.exit_code, kExitOk) << result.err;
    return result.exit_code == kExitOk
               ? nlohmann::json::parse(result.out)["predicted_seconds"]
                     .get<double>()
               : 0.0;
  };
  const double cpu = predicted("");
  EXPECT_EQ(predicted("cpu"), cpu);
  EXPECT_LT(predicted("h100"), cpu / 10);
  const CommandResult bad =
      RunPlanCommand({"-f", path, "--cluster", "4x1", "--device-kind", "tpu"});
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("--device-kind"));
}

// --cpu-cores-per-device below 1 (CPU devices sharing cores) keeps
// tp_overlap's overlap modes out of auto: listed, with a note, not chosen.
TEST(PlanCommandTest, CrowdedCpuCoresKeepOverlapModesOutOfAuto) {
  const std::string path =
      ::testing::TempDir() + "/plan_command_test_crowded.yaml";
  std::ofstream(path) << "tp_overlap:\n"
                         "  m: 1024\n  n: 1024\n  k: 4096\n"
                         "  mesh: 4x1\n  mode: auto\n";
  const auto plan = [&](const std::string& cores) {
    std::vector<std::string> args = {"-f",           path, "--cluster", "4x1",
                                     "--inter-gbps", "1",  "--output",  "json"};
    if (!cores.empty())
      args.insert(args.end(), {"--cpu-cores-per-device", cores});
    const CommandResult result = RunPlanCommand(args);
    EXPECT_EQ(result.exit_code, kExitOk) << result.err;
    return result.exit_code == kExitOk ? nlohmann::json::parse(result.out)
                                       : nlohmann::json::object();
  };
  const auto chosen = [](const nlohmann::json& json) {
    for (const nlohmann::json& row : json["alternatives"]) {
      if (row["chosen"].get<bool>()) return row["name"].get<std::string>();
    }
    return std::string();
  };
  const nlohmann::json free = plan("");
  ASSERT_NE(chosen(free), "");
  ASSERT_NE(chosen(free), "sequential");  // overlap predicted to win
  for (const nlohmann::json& row : free["alternatives"]) {
    EXPECT_FALSE(row.contains("note")) << row;
  }
  const nlohmann::json crowded = plan("0.5");
  EXPECT_EQ(chosen(crowded), "sequential");
  int noted = 0;
  for (const nlohmann::json& row : crowded["alternatives"]) {
    if (row.contains("note")) {
      ++noted;
      EXPECT_THAT(row["note"].get<std::string>(),
                  HasSubstr("0.50 cores per CPU device"));
    }
  }
  EXPECT_EQ(noted, 2);  // chunked and fused
  const CommandResult table = RunPlanCommand(
      {"-f", path, "--cluster", "4x1", "--cpu-cores-per-device", "0.5"});
  ASSERT_EQ(table.exit_code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("note"));
  EXPECT_THAT(table.out, HasSubstr("not for auto"));
  const CommandResult bad = RunPlanCommand(
      {"-f", path, "--cluster", "4x1", "--cpu-cores-per-device", "-1"});
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("--cpu-cores-per-device: must be >= 0"));
}

TEST(PlanCommandTest, CollectiveErrorsNameTheFlag) {
  std::vector<std::string> args = With(CollectiveArgs(), "--op", "allreduce");
  CommandResult result = RunPlanCommand(args);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --op: \"allreduce\" is "
                                     "not one of all_reduce"));
  result = RunPlanCommand(With(CollectiveArgs(), "--mesh", "3x4"));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --mesh: "));
  EXPECT_THAT(result.err, HasSubstr("3 hosts"));
  result = RunPlanCommand(With(CollectiveArgs(), "--bytes", "big"));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --bytes: "));
  result = RunPlanCommand(With(CollectiveArgs(), "--src-spec", "S0RR"));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --src-spec: not a flag of "
                                     "collective plans"));
  // A reshard plan refuses collective flags.
  result = RunPlanCommand(With(Case1Args(), "--op", "all_reduce"));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err,
              StartsWith("meshctl plan: --op: not a flag of reshard plans"));
  // Offline needs --cluster, as for reshard.
  args = CollectiveArgs();
  args.erase(args.begin() + 1, args.begin() + 3);
  result = RunPlanCommand(args, ContextWithEnv({}));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --cluster: required"));
}

TEST(PlanCommandTest, ReshardKindWordIsOptional) {
  std::vector<std::string> args = Case1Args();
  const CommandResult plain = RunPlanCommand(args);
  args.insert(args.begin(), "reshard");
  const CommandResult named = RunPlanCommand(args);
  ASSERT_EQ(named.exit_code, kExitOk) << named.err;
  EXPECT_EQ(named.out, plain.out);
}

}  // namespace
}  // namespace meshcast::cli
