#include "cli/job_format.h"

#include <string>
#include <vector>

#include "cli/text_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Job SucceededJob() {
  v1::Job job;
  job.set_id("j-42");
  job.mutable_spec()->set_name("case1");
  v1::ReshardSpec* reshard = job.mutable_spec()->mutable_reshard();
  reshard->mutable_tensor()->add_shape(64);
  reshard->mutable_tensor()->add_shape(64);
  reshard->mutable_tensor()->add_shape(256);
  reshard->mutable_tensor()->set_dtype(v1::DTYPE_INT32);
  reshard->mutable_src_mesh()->add_shape(2);
  reshard->mutable_src_mesh()->add_shape(4);
  reshard->mutable_src_mesh()->set_first_host(-1);
  reshard->mutable_src_spec()->set_text("S0RR");
  for (int d : {8, 9, 12, 13}) reshard->mutable_dst_mesh()->add_devices(d);
  reshard->mutable_dst_mesh()->add_shape(2);
  reshard->mutable_dst_mesh()->add_shape(2);
  reshard->mutable_dst_spec()->set_text("RS0R");
  reshard->set_strategy("meshcast");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_message("moved");
  job.set_progress(1);
  job.set_created_unix(1000);
  job.set_started_unix(1001);
  job.set_finished_unix(1003.5);
  v1::Plan* plan = job.mutable_plan();
  plan->set_strategy("meshcast");
  plan->set_predicted_seconds(0.01);
  for (int device : {3, 1, 2}) {
    v1::Buffer* buffer = plan->add_buffers();
    buffer->set_device(device);
    buffer->set_role(v1::Buffer::ROLE_SOURCE);
  }
  v1::Buffer* buffer = plan->add_buffers();
  buffer->set_device(8);
  buffer->set_role(v1::Buffer::ROLE_DESTINATION);
  v1::CommGroup* group = plan->add_groups();
  group->set_id(7);
  group->add_devices(1);
  group->add_devices(8);
  group->add_devices(9);
  v1::Step* step = plan->add_steps();
  step->set_id(0);
  step->set_group(7);
  step->set_bytes(4096);
  step->set_stage(2);
  step->add_deps(5);
  v1::Interval* interval = step->add_slice();
  interval->set_begin(0);
  interval->set_end(32);
  v1::JobResult* result = job.mutable_result();
  result->set_seconds(2.5);
  result->set_bytes_moved(4 << 20);
  result->set_elements_verified(1048576);
  v1::StepResult* step_result = result->add_steps();
  step_result->set_step(0);
  step_result->set_worker("worker-1");
  return job;
}

TEST(JobFormatTest, Names) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_TRUE(IsFinalState(v1::JOB_STATE_FAILED));
  EXPECT_FALSE(IsFinalState(v1::JOB_STATE_PLANNING));
  EXPECT_EQ(DTypeText(v1::DTYPE_BFLOAT16), "bfloat16");
  const v1::Job job = SucceededJob();
  EXPECT_EQ(DescribeMeshRequest(job.spec().reshard().src_mesh()), "2x4");
  EXPECT_EQ(DescribeMeshRequest(job.spec().reshard().dst_mesh()),
            "2x2[8,9,12,13]");
  EXPECT_EQ(DescribeReshard(job.spec().reshard()),
            "64x64x256 int32 (4 MiB): 2x4 S0RR -> 2x2[8,9,12,13] RS0R, "
            "strategy meshcast");
  EXPECT_THAT(PlanDevices(job.plan(), v1::Buffer::ROLE_SOURCE),
              ElementsAre(1, 2, 3));
}

TEST(JobFormatTest, JobJson) {
  const OrderedJson json = JobToJson(SucceededJob(), /*details=*/true);
  EXPECT_EQ(json["id"], "j-42");
  EXPECT_EQ(json["name"], "case1");
  EXPECT_EQ(json["state"], "SUCCEEDED");
  EXPECT_EQ(json["spec"]["reshard"]["shape"], OrderedJson({64, 64, 256}));
  EXPECT_EQ(json["spec"]["reshard"]["dtype"], "int32");
  EXPECT_EQ(json["spec"]["reshard"]["src_mesh"]["shape"], OrderedJson({2, 4}));
  EXPECT_FALSE(json["spec"]["reshard"]["src_mesh"].contains("devices"));
  EXPECT_EQ(json["spec"]["reshard"]["dst_mesh"]["devices"],
            OrderedJson({8, 9, 12, 13}));
  EXPECT_EQ(json["plan"]["src_devices"], OrderedJson({1, 2, 3}));
  EXPECT_EQ(json["plan"]["steps"], 1);
  EXPECT_EQ(json["result"]["elements_verified"], 1048576);
  EXPECT_EQ(json["result"]["mismatches"], 0);
  ASSERT_EQ(json["result"]["steps"].size(), 1u);
  EXPECT_EQ(json["result"]["steps"][0]["worker"], "worker-1");
  EXPECT_FALSE(JobToJson(SucceededJob(), false)["result"].contains("steps"));
  EXPECT_EQ(json["result"]["bytes_moved"], 4 << 20);
  EXPECT_EQ(json["result"]["bytes_delivered"], 0);  // not reported
}

// A broadcast's bytes reach several devices: the details show both figures,
// and only when they differ.
TEST(JobFormatTest, DeliveredBytesShownWhenBroadcastsMultiplyThem) {
  v1::Job job = SucceededJob();
  EXPECT_THAT(RenderJobDetails(job, 1010), Not(HasSubstr("delivered")));
  job.mutable_result()->set_bytes_delivered(12 << 20);
  const std::string details = RenderJobDetails(job, 1010);
  EXPECT_THAT(details, HasSubstr("moved 4 MiB in 2.500 s (0.013 Gbps), "
                                 "delivered 12 MiB (0.040 Gbps)"));
  EXPECT_EQ(JobToJson(job, false)["result"]["bytes_delivered"], 12 << 20);
}

TEST(JobFormatTest, TransfersJsonFollowsTheGroupChain) {
  const OrderedJson transfers = PlanTransfersToJson(SucceededJob().plan());
  ASSERT_EQ(transfers.size(), 1u);
  EXPECT_EQ(transfers[0]["src_device"], 1);
  EXPECT_EQ(transfers[0]["dst_devices"], OrderedJson({8, 9}));
  EXPECT_EQ(transfers[0]["slice"], OrderedJson::parse("[[0, 32]]"));
  EXPECT_EQ(transfers[0]["bytes"], 4096);
  EXPECT_EQ(transfers[0]["stage"], 2);
  EXPECT_EQ(transfers[0]["deps"], OrderedJson({5}));
}

TEST(JobFormatTest, HumanViews) {
  const v1::Job job = SucceededJob();
  const std::string details = RenderJobDetails(job, 1010);
  EXPECT_THAT(details, HasSubstr("id:         j-42\n"));
  EXPECT_THAT(details, HasSubstr("state:      SUCCEEDED\n"));
  EXPECT_THAT(details, HasSubstr("verified 1048576 elements, 0 mismatches"));
  EXPECT_THAT(details, HasSubstr("source tiles on devices 1-3"));
  EXPECT_THAT(details, HasSubstr("duration:   2.500 s"));

  v1::Job running = job;
  running.set_id("j-43");
  running.set_state(v1::JOB_STATE_RUNNING);
  running.set_progress(0.5);
  running.set_finished_unix(0);
  running.set_message(std::string(100, 'x'));
  const std::string list = RenderJobList({running, job}, 1010);
  EXPECT_THAT(list, HasSubstr("ID"));
  EXPECT_THAT(list, HasSubstr("j-43"));
  EXPECT_THAT(list, HasSubstr("RUNNING"));
  EXPECT_THAT(list, HasSubstr("50%"));
  EXPECT_THAT(list, HasSubstr("10s ago"));
  EXPECT_THAT(list, HasSubstr("9.000 s"));  // running: until now
  EXPECT_THAT(list, HasSubstr("x\xE2\x80\xA6"));  // long messages cut
  EXPECT_THAT(list, Not(HasSubstr(std::string(100, 'x'))));
  EXPECT_THAT(RenderJobList({}, 0), HasSubstr("no jobs yet"));

  v1::JobEvent event;
  event.set_state(v1::JOB_STATE_RUNNING);
  event.set_progress(0.25);
  event.set_message("worker w1 finished (1/4)");
  event.set_time_unix(1000);
  const std::string line = RenderEvent(event);
  EXPECT_THAT(line, HasSubstr("RUNNING    25%  worker w1 finished (1/4)\n"));
  EXPECT_EQ(EventToJson(event)["state"], "RUNNING");
}

TEST(JobFormatTest, Cluster) {
  v1::GetClusterResponse cluster;
  cluster.mutable_topology()->set_num_hosts(2);
  cluster.mutable_topology()->set_devices_per_host(4);
  cluster.mutable_topology()->set_inter_host_bandwidth(10e9 / 8);
  cluster.mutable_topology()->set_intra_host_bandwidth(100e9 / 8);
  for (int host : {1, 0}) {
    v1::WorkerInfo* worker = cluster.add_workers();
    worker->set_name("worker-" + std::to_string(host));
    worker->set_address("127.0.0.1:" + std::to_string(5000 + host));
    worker->set_host_index(host);
    worker->set_num_devices(4);
    worker->set_device_kind("cpu");
    worker->set_state(host == 0 ? v1::WorkerInfo::STATE_READY
                                : v1::WorkerInfo::STATE_LOST);
    worker->set_last_heartbeat_unix(995);
    if (host == 0) worker->set_memory_bytes(int64_t{24} << 30);
  }
  const std::string text = RenderCluster(cluster, "127.0.0.1:1234", 1000);
  EXPECT_THAT(text, HasSubstr("MEMORY"));
  EXPECT_THAT(text, HasSubstr("24 GiB"));
  EXPECT_THAT(text, HasSubstr("2 hosts x 4 devices, 10 Gbps between hosts, "
                              "100 Gbps inside a host"));
  EXPECT_THAT(text, HasSubstr("2 (1 ready, 0 busy, 1 lost)"));
  EXPECT_THAT(text, HasSubstr("4-7 (4 cpu)"));
  EXPECT_THAT(text, HasSubstr("5s ago"));
  // Sorted by host.
  EXPECT_LT(text.find("worker-0"), text.find("worker-1"));
  const OrderedJson json = ClusterToJson(cluster, "127.0.0.1:1234");
  EXPECT_EQ(json["topology"]["num_hosts"], 2);
  EXPECT_EQ(json["workers"][0]["devices"], OrderedJson({4, 5, 6, 7}));
  EXPECT_EQ(json["workers"][0]["state"], "lost");
  EXPECT_EQ(json["workers"][0]["memory_bytes"], 0);  // not reported
  EXPECT_EQ(json["workers"][1]["memory_bytes"], int64_t{24} << 30);
}

// Names, messages and addresses come from the network: no control
// character reaches the terminal, and table cells stay bounded.
TEST(JobFormatTest, UntrustedTextIsEscaped) {
  const std::string kClear = "\x1b[2J";  // "clear the screen"
  v1::Job job = SucceededJob();
  job.set_id("j-1" + kClear);
  job.mutable_spec()->set_name("n\x1b]0;owned\x07");
  job.set_message("failed:\r\x1b[31mforged line\n");
  (*job.mutable_result()->mutable_metrics())["evil\x1b[5m_seconds"] = 1;
  const std::string details = RenderJobDetails(job, 1010);
  EXPECT_THAT(details, HasSubstr("id:         j-1\\x1B[2J\n"));
  EXPECT_THAT(details, HasSubstr("name:       n\\x1B]0;owned\\x07\n"));
  EXPECT_THAT(details,
              HasSubstr("message:    failed:\\x0D\\x1B[31mforged line\\x0A\n"));
  EXPECT_THAT(details, HasSubstr("evil\\x1B[5m"));
  const std::string list = RenderJobList({job}, 1010);
  v1::JobEvent event;
  event.set_message("step\x1b[1A\x1b[2K done");
  const std::string line = RenderEvent(event);
  EXPECT_THAT(line, HasSubstr("step\\x1B[1A\\x1B[2K done\n"));

  v1::GetClusterResponse cluster;
  v1::WorkerInfo* worker = cluster.add_workers();
  worker->set_name("w\x1b[8m" + std::string(200, 'n'));
  worker->set_address("10.0.0.1:1\x9b");  // not valid UTF-8 after \x1b
  worker->set_num_devices(1);
  const std::string text = RenderCluster(cluster, "127.0.0.1:1", 1000);
  EXPECT_THAT(text, HasSubstr("w\\x1B[8mnnn"));
  EXPECT_THAT(text, HasSubstr("10.0.0.1:1\\x9B"));
  EXPECT_THAT(text, Not(HasSubstr(std::string(200, 'n'))));  // cut
  for (const std::string& out : {details, list, line, text}) {
    for (char c : out) {
      EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20)
          << "control byte " << static_cast<int>(c) << " in:\n" << out;
    }
  }
}

TEST(JobFormatTest, TopologyShowsCpuCostsOnlyWhenSet) {
  v1::Topology topology;
  topology.set_num_hosts(2);
  topology.set_devices_per_host(4);
  topology.set_inter_host_bandwidth(1.25e9);
  topology.set_intra_host_bandwidth(150e9);
  EXPECT_THAT(DescribeTopology(topology), Not(HasSubstr("host copy")));
  EXPECT_THAT(DescribeTopology(topology), Not(HasSubstr("setup")));
  const OrderedJson plain = TopologyToJson(topology);
  EXPECT_EQ(plain["host_copy_bandwidth_bytes_per_second"], 0.0);
  EXPECT_EQ(plain["transfer_setup_seconds"], 0.0);
  EXPECT_EQ(plain["pipeline_chunk_bytes"], 0.0);

  topology.set_host_copy_bandwidth(10e9);  // 80 Gbps
  topology.set_transfer_setup_seconds(20e-6);
  topology.set_pipeline_chunk_bytes(1 << 20);
  const std::string text = DescribeTopology(topology);
  EXPECT_THAT(text, HasSubstr("host copy 80 Gbps"));
  EXPECT_THAT(text, HasSubstr("transfer setup " + FormatSeconds(20e-6)));
  EXPECT_THAT(text, HasSubstr("pipeline chunks of " + FormatBytes(1 << 20)));
  const OrderedJson json = TopologyToJson(topology);
  EXPECT_EQ(json["host_copy_bandwidth_bytes_per_second"], 10e9);
  EXPECT_EQ(json["transfer_setup_seconds"], 20e-6);
  EXPECT_EQ(json["pipeline_chunk_bytes"], 1 << 20);
  EXPECT_EQ(json["inter_host_bandwidth_bytes_per_second"], 1.25e9);
}

TEST(JobFormatTest, PlacedMeshesInDetailsAndJson) {
  v1::Job job = SucceededJob();
  EXPECT_EQ(DescribePlacedMeshes(job), "");
  EXPECT_THAT(RenderJobDetails(job, 1010), Not(HasSubstr("meshes:")));
  EXPECT_FALSE(JobToJson(job, false).contains("placed_src_mesh"));

  v1::DeviceMesh* src = job.mutable_placed_src_mesh();
  src->add_shape(2);
  src->add_shape(4);
  for (int d = 0; d < 8; ++d) src->add_devices(d);
  EXPECT_EQ(DescribePlacedMeshes(job), "src mesh 2x4 on devices 0-7");
  v1::DeviceMesh* dst = job.mutable_placed_dst_mesh();
  dst->add_shape(2);
  dst->add_shape(2);
  for (int d : {8, 9, 12, 13}) dst->add_devices(d);
  EXPECT_THAT(RenderJobDetails(job, 1010),
              HasSubstr("meshes:     src mesh 2x4 on devices 0-7, dst mesh "
                        "2x2 on devices " +
                        FormatDeviceRanges({8, 9, 12, 13}) + "\n"));
  const OrderedJson json = JobToJson(job, false);
  EXPECT_EQ(json["placed_src_mesh"]["shape"], OrderedJson({2, 4}));
  EXPECT_EQ(json["placed_src_mesh"]["devices"],
            OrderedJson({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(json["placed_dst_mesh"]["devices"], OrderedJson({8, 9, 12, 13}));
}

}  // namespace
}  // namespace meshcast::cli
