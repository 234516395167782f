// Runs the real meshcast-controller binary: flags (dashed spelling, the
// topology ones reported by GetCluster, bad values refused naming the flag),
// port 0 with --port-file, a worker registering and then missing its lease,
// a job failing on an unreachable worker, SIGTERM, and the history after a
// restart on the same database.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"

extern char** environ;

namespace meshcast {
namespace {

using ::testing::HasSubstr;

class Daemon {
 public:
  // `extra` flags come after the defaults below and override them.
  explicit Daemon(const std::string& dir,
                  const std::vector<std::string>& extra = {})
      : dir_(dir) {
    std::remove(PortFile().c_str());
    std::vector<std::string> args = {
        MESHCAST_CONTROLLER_BINARY,
        "--listen=127.0.0.1:0",
        "--db=" + dir + "/meshcast.db",
        "--port-file=" + PortFile(),
        "--lease-seconds=1",
        "--heartbeat-seconds=0.25",
        "--inter-gbps=40",
        "--metrics-port=0",
        "--metrics-address=127.0.0.1",
        "--insecure",  // security has its own tests (docs/security.md)
    };
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir + "/controller.log";
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    spawned_ = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(),
                           environ) == 0;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Daemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool spawned() const { return spawned_; }
  std::string PortFile() const { return dir_ + "/port"; }

  // The port from --port-file, or 0 after 20 s.
  int WaitForPort() {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      std::ifstream in(PortFile());
      int port = 0;
      if (in >> port && port > 0) return port;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  }
  // SIGTERM, then the exit status (-1 if it did not exit within 20 s).
  int Terminate() {
    kill(pid_, SIGTERM);
    return Wait();
  }
  // The exit status once it exits on its own (-1 if not within 20 s).
  int Wait() {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool spawned_ = false;
};

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  return context;
}

TEST(DaemonTest, ServesShutsDownOnSigtermAndKeepsHistory) {
  char dir_template[] = "/tmp/meshcast_daemon_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::string job_id;
  {
    Daemon daemon(dir);
    ASSERT_TRUE(daemon.spawned());
    const int port = daemon.WaitForPort();
    ASSERT_GT(port, 0) << "no port file";
    auto stub = v1::Controller::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    // Two workers that never answer: nothing listens on their addresses.
    for (const char* name : {"ghost0", "ghost1"}) {
      v1::RegisterWorkerRequest request;
      request.mutable_worker()->set_name(name);
      request.mutable_worker()->set_address("127.0.0.1:1");
      request.mutable_worker()->set_num_devices(1);
      v1::RegisterWorkerResponse response;
      ASSERT_TRUE(
          stub->RegisterWorker(Context().get(), request, &response).ok());
      EXPECT_DOUBLE_EQ(response.lease_seconds(), 1);
      EXPECT_DOUBLE_EQ(response.heartbeat_seconds(), 0.25);
    }
    v1::GetClusterResponse cluster;
    ASSERT_TRUE(
        stub->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
            .ok());
    EXPECT_EQ(cluster.topology().num_hosts(), 2);
    EXPECT_DOUBLE_EQ(cluster.topology().inter_host_bandwidth(), 40e9 / 8);
    // Not given: the defaults, with no CPU-side costs.
    EXPECT_DOUBLE_EQ(cluster.topology().inter_host_latency(), 10e-6);
    EXPECT_EQ(cluster.topology().host_copy_bandwidth(), 0);
    EXPECT_EQ(cluster.topology().transfer_setup_seconds(), 0);

    v1::SubmitJobRequest submit;
    v1::ReshardSpec* r = submit.mutable_spec()->mutable_reshard();
    r->mutable_tensor()->add_shape(4);
    r->mutable_tensor()->set_dtype(v1::DTYPE_INT32);
    r->mutable_src_mesh()->add_shape(1);
    r->mutable_src_spec()->set_text("R");
    r->mutable_dst_mesh()->add_shape(1);
    r->mutable_dst_spec()->set_text("R");
    v1::SubmitJobResponse submitted;
    ASSERT_TRUE(stub->SubmitJob(Context().get(), submit, &submitted).ok());
    job_id = submitted.job().id();
    v1::Job job;
    for (int i = 0; i < 1000; ++i) {
      v1::GetJobRequest get;
      get.set_id(job_id);
      v1::GetJobResponse got;
      ASSERT_TRUE(stub->GetJob(Context().get(), get, &got).ok());
      job = got.job();
      if (job.state() == v1::JOB_STATE_FAILED) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
    EXPECT_THAT(job.message(), HasSubstr("worker ghost"));

    // Without heartbeats both leases run out.
    bool lost = false;
    for (int i = 0; i < 300 && !lost; ++i) {
      absl::SleepFor(absl::Milliseconds(20));
      ASSERT_TRUE(
          stub->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
              .ok());
      lost = cluster.workers(0).state() == v1::WorkerInfo::STATE_LOST;
    }
    EXPECT_TRUE(lost);
    v1::HeartbeatRequest heartbeat;
    heartbeat.set_name("ghost0");
    v1::HeartbeatResponse known;
    ASSERT_TRUE(stub->Heartbeat(Context().get(), heartbeat, &known).ok());
    EXPECT_FALSE(known.known());
    EXPECT_EQ(daemon.Terminate(), 0);
  }
  {
    Daemon daemon(dir);
    const int port = daemon.WaitForPort();
    ASSERT_GT(port, 0);
    auto stub = v1::Controller::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    v1::ListJobsResponse list;
    ASSERT_TRUE(
        stub->ListJobs(Context().get(), v1::ListJobsRequest(), &list).ok());
    ASSERT_EQ(list.jobs_size(), 1);
    EXPECT_EQ(list.jobs(0).id(), job_id);
    EXPECT_EQ(daemon.Terminate(), 0);
  }
  std::ifstream log(dir + "/controller.log");
  const std::string text((std::istreambuf_iterator<char>(log)),
                         std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("received SIGTERM"));
  // One line format (util/log.h): the job is a field, so grep finds it.
  EXPECT_THAT(text, HasSubstr(" WARN controller job=" + job_id + " FAILED"));
  EXPECT_THAT(text, HasSubstr(" INFO controller received SIGTERM"));
  if (getenv("KEEP_DAEMON_LOG")) std::cerr << text;
  for (const char* f : {"/meshcast.db", "/meshcast.db-wal", "/meshcast.db-shm",
                        "/port", "/controller.log"}) {
    std::remove((dir + f).c_str());
  }
  rmdir(dir.c_str());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(DaemonTest, TopologyFlagsReachGetCluster) {
  char dir_template[] = "/tmp/meshcast_daemon_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  {
    Daemon daemon(dir, {"--intra-gbps=80", "--inter-latency-us=40",
                        "--intra_latency_us=3", "--host-copy-gbps=24",
                        "--transfer-setup-us=300"});
    ASSERT_TRUE(daemon.spawned());
    const int port = daemon.WaitForPort();
    ASSERT_GT(port, 0) << ReadFile(dir + "/controller.log");
    auto stub = v1::Controller::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    v1::GetClusterResponse cluster;
    ASSERT_TRUE(
        stub->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
            .ok());
    const v1::Topology& t = cluster.topology();
    EXPECT_DOUBLE_EQ(t.inter_host_bandwidth(), 40e9 / 8);
    EXPECT_DOUBLE_EQ(t.intra_host_bandwidth(), 80e9 / 8);
    EXPECT_DOUBLE_EQ(t.inter_host_latency(), 40e-6);
    EXPECT_DOUBLE_EQ(t.intra_host_latency(), 3e-6);
    EXPECT_DOUBLE_EQ(t.host_copy_bandwidth(), 3e9);
    EXPECT_DOUBLE_EQ(t.transfer_setup_seconds(), 300e-6);
    EXPECT_GT(t.pipeline_chunk_bytes(), 0);
    EXPECT_EQ(daemon.Terminate(), 0);
  }
  // The startup line says what the planner assumes.
  EXPECT_THAT(ReadFile(dir + "/controller.log"),
              HasSubstr("host copy 24 Gbps, transfer setup 300 us"));

  // Bad values: exit status 2 before serving, the message naming the flag.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--host-copy-gbps=-1", "--host-copy-gbps must be"},
      {"--transfer-setup-us=-300", "--transfer-setup-us must be"},
      {"--inter-latency-us=-5", "--inter-latency-us must be"},
      {"--intra-gbps=0", "--intra-gbps must be"},
  };
  for (const auto& [flag, message] : bad) {
    std::remove((dir + "/controller.log").c_str());
    Daemon daemon(dir, {flag});
    ASSERT_TRUE(daemon.spawned());
    EXPECT_EQ(daemon.Wait(), 2) << flag;
    EXPECT_THAT(ReadFile(dir + "/controller.log"), HasSubstr(message)) << flag;
  }
  for (const char* f : {"/meshcast.db", "/meshcast.db-wal", "/meshcast.db-shm",
                        "/port", "/controller.log"}) {
    std::remove((dir + f).c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace meshcast
