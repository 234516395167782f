#include "controller/job_manager.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "controller/fake_worker_client.h"
#include "util/log.h"
#include "controller/program_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// The real kind of a spec, whose Plan fails on demand: every call after the
// first `plans_before_failure` fails (negative: never). Counts its calls.
class SwitchableKind : public JobKind {
 public:
  explicit SwitchableKind(const JobKind* real) : real_(real) {}
  std::string name() const override { return real_->name(); }
  absl::Status Validate(const v1::JobSpec& spec) const override {
    return real_->Validate(spec);
  }
  absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const override {
    return real_->Meshes(spec);
  }
  absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                  const std::vector<DeviceMesh>& meshes,
                                  const Topology& topology,
                                  const PlanOptions& options) const override {
    const int call = plans_.fetch_add(1);
    const int budget = plans_before_failure_.load();
    if (budget >= 0 && call >= budget) {
      return absl::InternalError("planner exploded");
    }
    return real_->Plan(spec, meshes, topology, options);
  }
  void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                 v1::JobResult& result) const override {
    real_->Summarize(spec, plan, result);
  }
  // Fails every Plan call from the next `n`-th on.
  void FailAfter(int n) { plans_before_failure_ = plans_.load() + n; }
  void NeverFail() { plans_before_failure_ = -1; }
  int plans() const { return plans_.load(); }

 private:
  const JobKind* real_;
  mutable std::atomic<int> plans_{0};
  std::atomic<int> plans_before_failure_{-1};
};

v1::JobSpec ReshardJob(std::vector<int> src_shape, const std::string& src_spec,
                       std::vector<int> dst_shape, const std::string& dst_spec,
                       std::vector<int64_t> tensor = {8, 8},
                       const std::string& strategy = "") {
  v1::JobSpec job;
  job.set_name("test");
  v1::ReshardSpec* r = job.mutable_reshard();
  for (int64_t d : tensor) r->mutable_tensor()->add_shape(d);
  r->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
  for (int d : src_shape) r->mutable_src_mesh()->add_shape(d);
  r->mutable_src_mesh()->set_first_host(-1);
  r->mutable_src_spec()->set_text(src_spec);
  for (int d : dst_shape) r->mutable_dst_mesh()->add_shape(d);
  r->mutable_dst_mesh()->set_first_host(-1);
  r->mutable_dst_spec()->set_text(dst_spec);
  r->set_strategy(strategy);
  return job;
}

// One host's worth of source and one of destination.
v1::JobSpec SmallJob() { return ReshardJob({1, 2}, "S1R", {1, 2}, "RS1"); }

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogQuiet(true);
    store_ = *JobStore::Open(":memory:");
    WorkerRegistry::Options options;
    options.lease = absl::Seconds(5);
    registry_ = std::make_unique<WorkerRegistry>(options, &clock_);
  }
  void TearDown() override {
    if (manager_ != nullptr) manager_->Shutdown("test over");
    manager_.reset();
    if (!db_path_.empty()) {
      store_.reset();
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::remove((db_path_ + suffix).c_str());
      }
    }
  }

  absl::Duration progress_event_interval_ = absl::ZeroDuration();
  absl::Duration reserve_after_ = absl::Seconds(10);

  // Replaces the in-memory store with a database file in the test's temp
  // directory (removed first).
  void UseDatabaseFile(const std::string& name) {
    db_path_ = ::testing::TempDir() + "/" + name + "_" +
               std::to_string(getpid()) + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove((db_path_ + suffix).c_str());
    }
    store_ = *JobStore::Open(db_path_);
  }
  std::string db_path_;

  void RegisterWorkers(int hosts, int devices) {
    for (int h = 0; h < hosts; ++h) {
      WorkerRecord w;
      w.name = absl::StrCat("w", h);
      w.address = absl::StrCat("127.0.0.1:", 9000 + h);
      w.num_devices = devices;
      ASSERT_TRUE(registry_->Register(w).ok());
    }
  }
  void Start(int hosts, int devices) {
    RegisterWorkers(hosts, devices);
    JobManager::Options options;
    options.schedule_interval = absl::Milliseconds(10);
    options.abort_timeout = absl::Seconds(1);
    options.task_timeout = absl::Seconds(20);
    options.progress_interval = absl::Milliseconds(10);
    options.progress_event_interval = progress_event_interval_;
    options.reserve_after = reserve_after_;
    options.find_kind =
        [this](const v1::JobSpec& spec) -> absl::StatusOr<const JobKind*> {
      absl::StatusOr<const JobKind*> kind = FindJobKind(spec);
      if (kind.ok() && (*kind)->name() == "reshard") return &reshard_;
      return kind;
    };
    manager_ = std::make_unique<JobManager>(
        options, store_.get(), registry_.get(), &kv_, &client_, &clock_);
    ASSERT_TRUE(manager_->Start().ok());
  }
  v1::Job WaitForFinal(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    v1::Job job;
    while (absl::Now() < deadline) {
      job = *manager_->Get(id);
      if (IsFinal(job.state())) return job;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "job " << id
                  << " did not finish: " << job.ShortDebugString();
    return job;
  }
  // Waits until the job's message contains `text`.
  bool WaitForMessage(const std::string& id, const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (manager_->Get(id)->message().find(text) != std::string::npos) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }
  std::string Submit(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = manager_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  FakeClock clock_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  KvStore kv_;
  FakeWorkerClient client_;
  SwitchableKind reshard_{*FindJobKindByName("reshard")};
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, RunsAJobToSuccess) {
  Start(2, 2);
  absl::StatusOr<v1::Job> submitted = manager_->Submit(SmallJob());
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->id(), "job-000001");
  EXPECT_EQ(submitted->state(), v1::JOB_STATE_QUEUED);
  // The spec is kept as submitted; the plan names the strategy auto chose.
  EXPECT_EQ(submitted->spec().reshard().strategy(), "");
  v1::Job job = WaitForFinal(submitted->id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_THAT(job.message(), HasSubstr("verified 64 elements"));
  EXPECT_DOUBLE_EQ(job.progress(), 1.0);
  EXPECT_GT(job.plan().steps_size(), 0);
  EXPECT_EQ(job.plan().kind(), "reshard");
  EXPECT_FALSE(job.plan().strategy().empty());
  // Planned once, at Submit: the job landed where Submit placed it.
  EXPECT_EQ(reshard_.plans(), 1);
  ASSERT_EQ(job.placed_meshes_size(), 2);
  EXPECT_THAT(job.placed_meshes(0).devices(), ElementsAre(0, 1));
  EXPECT_THAT(job.placed_meshes(1).devices(), ElementsAre(2, 3));
  EXPECT_THAT(job.placed_src_mesh().devices(), ElementsAre(0, 1));
  EXPECT_THAT(job.placed_dst_mesh().devices(), ElementsAre(2, 3));
  int64_t plan_bytes = 0;
  for (const v1::Step& s : job.plan().steps()) plan_bytes += s.bytes();
  EXPECT_GT(plan_bytes, 0);
  EXPECT_EQ(job.result().bytes_moved(), plan_bytes);
  EXPECT_EQ(job.result().bytes_delivered(), DeliveredBytes(job.plan()));
  EXPECT_GE(job.result().bytes_delivered(), plan_bytes);
  EXPECT_EQ(job.result().elements_verified(), 8 * 8);
  EXPECT_EQ(job.result().mismatches(), 0);
  EXPECT_DOUBLE_EQ(job.result().seconds(), 0.002);  // max over two workers
  EXPECT_GT(job.result().predicted_seconds(), 0);
  EXPECT_GT(job.result().steps_size(), 0);
  EXPECT_FALSE(job.result().steps(0).worker().empty());
  EXPECT_GT(job.finished_unix(), 0);
  // One program per worker, ranks in host order.
  std::vector<v1::WorkerProgram> programs = client_.programs();
  ASSERT_EQ(programs.size(), 2u);
  for (const v1::WorkerProgram& p : programs) {
    EXPECT_EQ(p.job_id(), job.id());
    EXPECT_EQ(p.verify(), v1::VERIFY_MODE_FULL);
    EXPECT_EQ(p.world_size(), 2);
    EXPECT_EQ(p.rank(), p.worker() == "w0" ? 0 : 1);
  }
  // The history: every state in order, persisted. The store is written by
  // the manager's writer thread; List waits for it.
  ASSERT_EQ(manager_->List(0)->size(), 1u);
  std::vector<v1::JobState> states;
  absl::StatusOr<std::vector<v1::JobEvent>> events =
      store_->ListEvents(job.id());
  ASSERT_TRUE(events.ok()) << events.status();
  for (const v1::JobEvent& e : *events) {
    if (states.empty() || states.back() != e.state()) {
      states.push_back(e.state());
    }
  }
  EXPECT_THAT(states,
              ElementsAre(v1::JOB_STATE_QUEUED, v1::JOB_STATE_PLANNING,
                          v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(store_->GetJob(job.id())->state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(manager_->List(0)->size(), 1u);
}

TEST_F(JobManagerTest, EveryStrategyRuns) {
  Start(2, 2);
  for (const char* strategy : {"send_recv", "local_allgather", "broadcast",
                               "broadcast_lb", "meshcast"}) {
    v1::Job job = WaitForFinal(
        Submit(ReshardJob({1, 2}, "S1R", {1, 2}, "RR", {6, 5}, strategy)));
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED)
        << strategy << ": " << job.message();
    EXPECT_EQ(job.plan().strategy(), strategy);
    EXPECT_EQ(job.result().elements_verified(), 2 * 6 * 5);
  }
}

TEST_F(JobManagerTest, RejectsBadSpecsAtSubmit) {
  Start(2, 2);
  struct Case {
    v1::JobSpec spec;
    const char* expected;
  };
  v1::JobSpec bad_dtype = SmallJob();
  bad_dtype.mutable_reshard()->mutable_tensor()->set_dtype(
      static_cast<v1::DType>(42));
  std::vector<Case> cases = {
      {ReshardJob({1, 2}, "S1Q", {1, 2}, "RS1"), "unknown token"},
      {ReshardJob({1, 2}, "S1", {1, 2}, "RS1"), "src_spec S1 has 1 entries"},
      {ReshardJob({1, 2}, "S1R", {1, 2}, "RS1", {8, 8}, "warp"), "warp"},
      {ReshardJob({1, 2}, "S1R", {3, 2}, "RS1"),
       "dst_mesh 3x2 needs 3 hosts with 2 free devices; cluster has 2 hosts "
       "x 2 devices"},
      {ReshardJob({2, 2}, "S1R", {2, 2}, "RS1"),
       "on disjoint hosts need 4 hosts"},
      {bad_dtype, "unknown value 42"},
      // No kind set: the error names the known kinds.
      {v1::JobSpec(), "reshard"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<v1::Job> job = manager_->Submit(c.spec);
    ASSERT_FALSE(job.ok()) << c.expected;
    EXPECT_TRUE(absl::IsInvalidArgument(job.status())) << job.status();
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.expected));
  }
  EXPECT_TRUE(manager_->List(0)->empty());
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("job-000001").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(manager_->Get("").status()));
}

TEST_F(JobManagerTest, EmptyClusterIsAClearError) {
  Start(0, 0);
  absl::StatusOr<v1::Job> job = manager_->Submit(SmallJob());
  EXPECT_TRUE(absl::IsFailedPrecondition(job.status())) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("no workers"));
}

TEST_F(JobManagerTest, WorkerFailureFailsTheJobAndAbortsTheOthers) {
  Start(2, 2);
  client_.SetMode("w0", FakeWorkerClient::Mode::kBlock);
  client_.SetMode("w1", FakeWorkerClient::Mode::kFail);
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.message(), "worker w1 failed: injected failure");
  EXPECT_THAT(client_.aborts(), Contains(Pair("w0", job.id())));
}

TEST_F(JobManagerTest, UnreachableWorkerIsNamed) {
  Start(2, 2);
  client_.SetMode("w0", FakeWorkerClient::Mode::kUnreachable);
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("worker w0 (127.0.0.1:9000): RunTask "
                                       "failed: UNAVAILABLE"));
}

TEST_F(JobManagerTest, MismatchesFailTheJob) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kMismatch);
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  // Only w1 holds destination tiles.
  EXPECT_THAT(job.message(), HasSubstr("3 mismatched elements"));
  EXPECT_EQ(job.result().mismatches(), 3);
}

TEST_F(JobManagerTest, UnverifiedElementsFailTheJob) {
  Start(2, 2);
  client_.SetMode("w1", FakeWorkerClient::Mode::kUnverified);
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  // The report of w1 contradicts its tiles (result_check.h).
  EXPECT_THAT(job.message(),
              HasSubstr("worker w1: result contradicts the plan: verified 0 "
                        "elements; its destination buffers hold 64"));
}

TEST_F(JobManagerTest, PlanningFailureFailsTheJob) {
  Start(4, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  // a holds hosts 0 and 1, where Submit places (and plans) the next job on
  // the idle cluster; it lands on hosts 2 and 3 and is planned again there.
  const std::string a = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  client_.SetDefaultMode(FakeWorkerClient::Mode::kSucceed);
  reshard_.FailAfter(1);  // Submit's plan succeeds, the job thread's fails
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("planning failed: planner exploded"));
  EXPECT_THAT(job.placed_src_mesh().devices(), ElementsAre(4, 5));
  // Its devices were released: the next job runs there.
  reshard_.NeverFail();
  job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_THAT(job.placed_src_mesh().devices(), ElementsAre(4, 5));
  // A plan that fails at Submit refuses the job; the kind's own code kept.
  reshard_.FailAfter(0);
  absl::StatusOr<v1::Job> refused = manager_->Submit(SmallJob());
  EXPECT_TRUE(absl::IsInternal(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("planning on the idle cluster failed: planner "
                        "exploded"));
  reshard_.NeverFail();
  ASSERT_EQ(manager_->Cancel(a)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, VerifyModeReachesEveryWorkerAndDecidesCompleteness) {
  Start(2, 2);
  // Sampled verification checks fewer elements than the destination holds:
  // not a failure.
  client_.SetMode("w1", FakeWorkerClient::Mode::kUnverified);
  v1::JobSpec sampled = SmallJob();
  sampled.set_verify(v1::VERIFY_MODE_SAMPLE);
  v1::Job job = WaitForFinal(Submit(sampled));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_THAT(job.message(), HasSubstr("verified a sample of"));
  for (const v1::WorkerProgram& p : client_.programs()) {
    EXPECT_EQ(p.verify(), v1::VERIFY_MODE_SAMPLE) << p.worker();
  }
  v1::JobSpec off = SmallJob();
  off.set_verify(v1::VERIFY_MODE_OFF);
  job = WaitForFinal(Submit(off));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_THAT(job.message(), HasSubstr("verification off"));
  // The kind's figures are filled from the merged result.
  EXPECT_TRUE(job.result().metrics().contains("movbw_bytes_per_second"));
}

TEST_F(JobManagerTest, CancelRunningJobAbortsWorkersAndCleansUp) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  EXPECT_EQ(manager_->Get(id)->state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(kv_.Set("job/" + id + "/gloo/rank0", "addr").ok());
  absl::StatusOr<v1::Job> cancelled = manager_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled->message(), "cancelled by user");
  EXPECT_THAT(client_.aborts(), Contains(Pair("w0", id)));
  EXPECT_THAT(client_.aborts(), Contains(Pair("w1", id)));
  EXPECT_EQ(kv_.size(), 0u);
  // Cancelling again is harmless; cancelling unknown jobs is NOT_FOUND.
  EXPECT_TRUE(manager_->Cancel(id).ok());
  EXPECT_TRUE(absl::IsNotFound(manager_->Cancel("job-000099").status()));
  // The devices are free again.
  client_.SetDefaultMode(FakeWorkerClient::Mode::kSucceed);
  const std::string next = Submit(SmallJob());
  EXPECT_EQ(WaitForFinal(next).state(), v1::JOB_STATE_SUCCEEDED);
  absl::StatusOr<v1::Job> late = manager_->Cancel(next);
  EXPECT_TRUE(absl::IsFailedPrecondition(late.status())) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("already finished"));
}

TEST_F(JobManagerTest, JobsOnDisjointDevicesRunTogetherOthersWait) {
  Start(4, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string a = Submit(SmallJob());
  const std::string b = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(4, absl::Seconds(10)));
  EXPECT_EQ(manager_->Get(a)->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(manager_->Get(b)->state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(manager_->BusyHosts(), ElementsAre(0, 1, 2, 3));
  // Each running job shows where it went: a on hosts 0 and 1, b on 2 and 3.
  EXPECT_THAT(manager_->Get(a)->placed_src_mesh().devices(), ElementsAre(0, 1));
  EXPECT_THAT(manager_->Get(a)->placed_dst_mesh().devices(), ElementsAre(2, 3));
  EXPECT_THAT(manager_->Get(b)->placed_src_mesh().devices(), ElementsAre(4, 5));
  EXPECT_THAT(manager_->Get(b)->placed_dst_mesh().devices(), ElementsAre(6, 7));
  const std::string c = Submit(SmallJob());
  ASSERT_TRUE(WaitForMessage(c, "waiting for devices"));
  EXPECT_EQ(manager_->Get(c)->state(), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(manager_->Get(c)->has_placed_src_mesh());
  // A queued job is cancelled at once.
  const std::string d = Submit(SmallJob());
  absl::StatusOr<v1::Job> cancelled = manager_->Cancel(d);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  // Freeing a's devices lets c start.
  ASSERT_EQ(manager_->Cancel(a)->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(client_.WaitForBlocked(4, absl::Seconds(10)));
  EXPECT_EQ(manager_->Get(c)->state(), v1::JOB_STATE_RUNNING);
  // Shutdown fails what is still running.
  manager_->Shutdown("controller shut down");
  EXPECT_EQ(store_->GetJob(b)->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(store_->GetJob(c)->message(), "controller shut down");
  EXPECT_TRUE(absl::IsUnavailable(manager_->Submit(SmallJob()).status()));
}

// Waits until job `id` is in `state`.
bool WaitForState(JobManager& manager, const std::string& id,
                  v1::JobState state) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (manager.Get(id)->state() == state) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

TEST_F(JobManagerTest, StepsDoneOnWorkersBecomeRunningProgress) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  // The workers' programs, to script how far each is.
  std::vector<v1::WorkerProgram> programs = client_.programs();
  ASSERT_EQ(programs.size(), 2u);
  int64_t all_steps = 0, all_bytes = 0;
  for (const v1::WorkerProgram& p : programs) {
    all_steps += p.plan().steps_size();
    for (const v1::Step& step : p.plan().steps()) all_bytes += step.bytes();
  }
  ASSERT_GT(all_bytes, 0);
  // w0 has finished all its steps; w1 none.
  const v1::WorkerProgram& first =
      programs[0].worker() == "w0" ? programs[0] : programs[1];
  int64_t first_bytes = 0;
  for (const v1::Step& step : first.plan().steps()) first_bytes += step.bytes();
  v1::GetStatusResponse status;
  v1::TaskProgress* task = status.add_tasks();
  task->set_job_id(id);
  task->set_steps_done(first.plan().steps_size());
  task->set_steps_total(first.plan().steps_size());
  task->set_bytes_done(first_bytes);
  task->set_bytes_total(first_bytes);
  v1::TaskProgress* other = status.add_tasks();  // another job's: ignored
  other->set_job_id("job-other");
  other->set_steps_done(1000);
  other->set_bytes_done(int64_t{1} << 40);
  client_.SetStatus("w0", status);

  ASSERT_TRUE(WaitForMessage(id, "running: "));
  const v1::Job job = *manager_->Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(job.message(),
              HasSubstr(absl::StrCat(first.plan().steps_size(), "/", all_steps,
                                     " worker steps done")));
  // Bytes decide: 10% for planning, the rest in proportion.
  EXPECT_NEAR(job.progress(),
              0.1 + 0.9 * static_cast<double>(first_bytes) / all_bytes, 1e-9);
  EXPECT_LT(job.progress(), 1.0);
  ASSERT_EQ(manager_->Cancel(id)->state(), v1::JOB_STATE_CANCELLED);
}

// Polls `condition` for up to 10 s.
bool WaitUntil(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return condition();
}

// A worker's TaskProgress for `program`: `steps` of its steps done.
v1::TaskProgress ProgressOf(const v1::WorkerProgram& program, int steps,
                            const std::string& phase) {
  v1::TaskProgress task;
  task.set_job_id(program.job_id());
  task.set_steps_total(program.plan().steps_size());
  task.set_steps_done(steps);
  int64_t bytes_total = 0, bytes_done = 0;
  for (int i = 0; i < program.plan().steps_size(); ++i) {
    bytes_total += program.plan().steps(i).bytes();
    if (i < steps) bytes_done += program.plan().steps(i).bytes();
  }
  task.set_bytes_total(bytes_total);
  task.set_bytes_done(bytes_done);
  task.set_phase(phase);
  return task;
}

TEST_F(JobManagerTest, PushedProgressBecomesRunningEventsWithThePhase) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  absl::StatusOr<JobManager::Watch> watch = manager_->WatchJob(id);
  ASSERT_TRUE(watch.ok());
  std::vector<v1::WorkerProgram> programs = client_.programs();
  ASSERT_EQ(programs.size(), 2u);
  if (programs[0].worker() != "w0") std::swap(programs[0], programs[1]);
  int64_t all_steps = 0, all_bytes = 0;
  for (const v1::WorkerProgram& p : programs) {
    all_steps += p.plan().steps_size();
    for (const v1::Step& step : p.plan().steps()) all_bytes += step.bytes();
  }
  ASSERT_GT(all_bytes, 0);
  const int w0_steps = programs[0].plan().steps_size();
  ASSERT_GT(w0_steps, 0);

  // Both connect: the job is in phase connect, nothing moved yet.
  ASSERT_EQ(*manager_->ReportProgress("w0", {ProgressOf(programs[0], 0,
                                                        "connect")}),
            1);
  ASSERT_EQ(*manager_->ReportProgress("w1", {ProgressOf(programs[1], 0,
                                                        "connect")}),
            1);
  ASSERT_TRUE(WaitForMessage(id, "phase connect"));
  EXPECT_THAT(manager_->Get(id)->message(),
              HasSubstr(absl::StrCat("0/", all_steps, " worker steps done")));
  // w0 done with its steps, w1 still connecting: the job's phase is the
  // earliest; progress is weighted by bytes.
  v1::TaskProgress other;  // another job's: ignored
  other.set_job_id("job-other");
  other.set_steps_done(1000);
  ASSERT_EQ(*manager_->ReportProgress(
                "w0", {ProgressOf(programs[0], w0_steps, "verify"), other}),
            1);
  int64_t w0_bytes = 0;
  for (const v1::Step& step : programs[0].plan().steps()) {
    w0_bytes += step.bytes();
  }
  const double expected = 0.1 + 0.9 * static_cast<double>(w0_bytes) / all_bytes;
  ASSERT_TRUE(WaitForMessage(
      id, absl::StrCat(w0_steps, "/", all_steps, " worker steps done")));
  v1::Job job = *manager_->Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(job.message(), HasSubstr("phase connect"));
  EXPECT_NEAR(job.progress(), expected, 1e-9);
  // w1 verifying too, with counts: the job verifies.
  v1::TaskProgress verifying =
      ProgressOf(programs[1], programs[1].plan().steps_size(), "verify");
  verifying.set_verify_done(30);
  verifying.set_verify_total(120);
  ASSERT_EQ(*manager_->ReportProgress("w1", {verifying}), 1);
  ASSERT_TRUE(WaitForMessage(id, "phase verify (30/120 elements checked)"));
  EXPECT_NEAR(manager_->Get(id)->progress(), 1.0, 1e-9);
  // Every step was published as an event, in order, never backwards.
  std::vector<std::string> messages;
  double last = 0;
  while (std::optional<v1::JobEvent> event =
             watch->events->Next(absl::Milliseconds(100))) {
    EXPECT_GE(event->progress(), last);
    last = event->progress();
    messages.push_back(event->message());
  }
  ASSERT_GE(messages.size(), 3u);
  EXPECT_THAT(messages[0], HasSubstr("phase connect"));
  EXPECT_THAT(messages.back(), HasSubstr("phase verify"));
  ASSERT_EQ(manager_->Cancel(id)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ProgressEventsAreSpacedByTheEventInterval) {
  progress_event_interval_ = absl::Milliseconds(300);
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  const absl::Time running = absl::Now();  // the RUNNING event is about now
  absl::StatusOr<JobManager::Watch> watch = manager_->WatchJob(id);
  ASSERT_TRUE(watch.ok());
  std::vector<v1::WorkerProgram> programs = client_.programs();
  if (programs[0].worker() != "w0") std::swap(programs[0], programs[1]);
  int64_t w0_bytes = 0;
  for (const v1::Step& step : programs[0].plan().steps()) {
    w0_bytes += step.bytes();
  }
  ASSERT_GE(w0_bytes, 80);
  // A report every 10 ms, each moving the job forward a little.
  std::vector<absl::Time> published;
  for (int i = 1; i <= 80; ++i) {
    v1::TaskProgress task = ProgressOf(programs[0], 0, "data");
    task.set_bytes_done(w0_bytes * i / 80);
    ASSERT_EQ(*manager_->ReportProgress("w0", {task}), 1);
    absl::SleepFor(absl::Milliseconds(10));
    while (std::optional<v1::JobEvent> e =
               watch->events->Next(absl::ZeroDuration())) {
      published.push_back(absl::Now());
    }
  }
  // Not one event per report: at most one per 300 ms after RUNNING's.
  const absl::Duration elapsed = absl::Now() - running;
  EXPECT_GE(published.size(), 1u);
  EXPECT_LE(published.size(),
            static_cast<size_t>(elapsed / absl::Milliseconds(300)) + 1);
  ASSERT_EQ(manager_->Cancel(id)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ReportsAboutJobsNotRunningOnThatWorkerAreIgnored) {
  Start(4, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());  // hosts 0 and 1
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  const v1::WorkerProgram program = client_.programs()[0];
  // A worker the job does not run on, an unknown job, a queued job.
  EXPECT_EQ(*manager_->ReportProgress("w3", {ProgressOf(program, 1, "data")}),
            0);
  v1::TaskProgress unknown = ProgressOf(program, 1, "data");
  unknown.set_job_id("job-999999");
  EXPECT_EQ(*manager_->ReportProgress(program.worker(), {unknown}), 0);
  EXPECT_EQ(*manager_->ReportProgress(program.worker(), {}), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(
      manager_->ReportProgress("", {ProgressOf(program, 1, "data")})
          .status()));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(manager_->Get(id)->message(), Not(HasSubstr("running: ")));
  // Once the job ended, its reports count no more.
  ASSERT_EQ(manager_->Cancel(id)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(*manager_->ReportProgress(program.worker(),
                                      {ProgressOf(program, 1, "data")}),
            0);
  EXPECT_EQ(manager_->Get(id)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, AWorkerThatPushesIsNoLongerPolled) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  std::vector<v1::WorkerProgram> programs = client_.programs();
  if (programs[0].worker() != "w0") std::swap(programs[0], programs[1]);
  // Both are polled (every 10 ms) until w0 pushes ...
  ASSERT_TRUE(WaitUntil([&] {
    return client_.status_calls("w0") >= 2 && client_.status_calls("w1") >= 2;
  }));
  ASSERT_EQ(*manager_->ReportProgress("w0", {ProgressOf(programs[0], 1,
                                                        "data")}),
            1);
  absl::SleepFor(absl::Milliseconds(30));  // a poll may be under way
  const int w0_calls = client_.status_calls("w0");
  const int w1_calls = client_.status_calls("w1");
  // ... then only w1, the worker that never pushed, is.
  ASSERT_TRUE(
      WaitUntil([&] { return client_.status_calls("w1") >= w1_calls + 5; }));
  EXPECT_EQ(client_.status_calls("w0"), w0_calls);
  // A worker that registers anew (which fails its job) may be another
  // binary: polled again in the next job.
  WorkerRecord again;
  again.name = "w0";
  again.address = "127.0.0.1:9000";
  again.num_devices = 2;
  ASSERT_TRUE(registry_->Register(again).ok());
  EXPECT_EQ(WaitForFinal(id).state(), v1::JOB_STATE_FAILED);
  const std::string next = Submit(SmallJob());
  ASSERT_TRUE(
      WaitUntil([&] { return client_.status_calls("w0") > w0_calls; }));
  ASSERT_EQ(manager_->Cancel(next)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, AJobThatWaitedLongEnoughHoldsLaterJobsBack) {
  Start(4, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string a = Submit(SmallJob());  // hosts 0 and 1
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  // Needs all four hosts: waits for a.
  const std::string big = Submit(ReshardJob({2, 2}, "S0R", {2, 2}, "RS0"));
  ASSERT_TRUE(WaitForMessage(big, "waiting for devices"));
  // Before big has waited reserve_after (10 s), a small job overtakes it.
  const std::string early = Submit(SmallJob());
  ASSERT_TRUE(WaitForState(*manager_, early, v1::JOB_STATE_RUNNING));
  ASSERT_EQ(manager_->Cancel(early)->state(), v1::JOB_STATE_CANCELLED);
  // Once it has, the next small job waits behind it although hosts 2 and 3
  // are free ...
  clock_.Advance(absl::Seconds(11));
  const std::string late = Submit(SmallJob());
  ASSERT_TRUE(WaitForMessage(late, absl::StrCat("queued behind job ", big)))
      << manager_->Get(late)->message();
  EXPECT_THAT(manager_->Get(big)->message(),
              HasSubstr("later jobs wait until it starts"));
  absl::SleepFor(absl::Milliseconds(50));  // several scheduler passes
  EXPECT_EQ(manager_->Get(late)->state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(manager_->BusyHosts(), ElementsAre(0, 1));
  // ... big starts as soon as a's devices are free, then late after it.
  ASSERT_EQ(manager_->Cancel(a)->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(WaitForState(*manager_, big, v1::JOB_STATE_RUNNING));
  EXPECT_EQ(manager_->Get(late)->state(), v1::JOB_STATE_QUEUED);
  ASSERT_EQ(manager_->Cancel(big)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(WaitForState(*manager_, late, v1::JOB_STATE_RUNNING));
}

TEST_F(JobManagerTest, AJobWaitingForALostHostHoldsNothingBack) {
  Start(5, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  clock_.Advance(absl::Seconds(4));
  for (const char* name : {"w0", "w1", "w2", "w3"}) {
    ASSERT_TRUE(registry_->Heartbeat(name));
  }
  clock_.Advance(absl::Seconds(2));  // w4 silent for 6 s > 5 s lease
  ASSERT_EQ(registry_->Sweep().size(), 1u);
  // Needs all five hosts, so it waits for w4 however long it has waited.
  const std::string big = Submit(ReshardJob({2, 2}, "S0R", {3, 2}, "S0R"));
  clock_.Advance(absl::Seconds(60));
  const std::string small = Submit(SmallJob());
  EXPECT_TRUE(WaitForState(*manager_, small, v1::JOB_STATE_RUNNING));
  EXPECT_EQ(manager_->Get(big)->state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(manager_->Get(big)->message(), Not(HasSubstr("later jobs wait")));
}

TEST_F(JobManagerTest, LostWorkerFailsItsJobAndRejoins) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(registry_->Heartbeat("w0"));
  clock_.Advance(absl::Seconds(2));  // w1 silent for 6 s > 5 s lease
  ASSERT_EQ(registry_->Sweep().size(), 1u);
  v1::Job job = WaitForFinal(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("worker w1 lost"));
  // With host 1 gone a new job waits for it ...
  client_.SetDefaultMode(FakeWorkerClient::Mode::kSucceed);
  const std::string next = Submit(SmallJob());
  ASSERT_TRUE(WaitForMessage(next, "waiting for devices"));
  // ... and runs once the worker registers again.
  WorkerRecord w1;
  w1.name = "w1";
  w1.address = "127.0.0.1:9001";
  w1.num_devices = 2;
  ASSERT_TRUE(registry_->Register(w1).ok());
  EXPECT_EQ(WaitForFinal(next).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobManagerTest, RestartedWorkerFailsItsJob) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  WorkerRecord w0;
  w0.name = "w0";
  w0.address = "127.0.0.1:9000";
  w0.num_devices = 2;
  ASSERT_TRUE(registry_->Register(w0).ok());
  v1::Job job = WaitForFinal(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("worker w0 restarted"));
}

TEST_F(JobManagerTest, WatchStreamsStatesUntilTheEnd) {
  Start(2, 2);
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string id = Submit(SmallJob());
  absl::StatusOr<JobManager::Watch> watch = manager_->WatchJob(id);
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  std::thread canceller([&] { (void)manager_->Cancel(id); });
  std::vector<v1::JobState> seen = {watch->job.state()};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!IsFinal(seen.back()) && absl::Now() < deadline) {
    std::optional<v1::JobEvent> e = watch->events->Next(absl::Seconds(1));
    if (e.has_value()) seen.push_back(e->state());
  }
  canceller.join();
  EXPECT_EQ(seen.back(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(seen, Contains(v1::JOB_STATE_RUNNING));
  EXPECT_TRUE(absl::IsNotFound(manager_->WatchJob("job-000042").status()));
  // Watching a finished job gives its final state.
  watch = manager_->WatchJob(id);
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch->job.state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, UnfinishedJobsOfAPreviousRunAreFailed) {
  v1::Job old;
  old.set_id(store_->AllocateJobId());
  old.set_state(v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(store_->SaveJob(old).ok());
  Start(2, 2);
  absl::StatusOr<v1::Job> job = manager_->Get(old.id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job->message(), HasSubstr("controller restarted"));
  // New ids do not collide with old ones.
  EXPECT_EQ(Submit(SmallJob()), "job-000002");
}

// After a controller restart: a job that ran is failed and its recorded
// workers are told to abort it; a queued job is queued again and runs.
TEST_F(JobManagerTest, RestartAbortsRunningJobsAndResumesQueuedOnes) {
  v1::Job running;
  running.set_id(store_->AllocateJobId());
  running.set_state(v1::JOB_STATE_RUNNING);
  *running.mutable_spec() = SmallJob();
  ASSERT_TRUE(store_->SaveJob(running).ok());
  // w0 is back at a new address; w7 never comes back (its recorded address
  // is tried; the fake answers anything).
  ASSERT_TRUE(store_
                  ->SaveJobWorkers(running.id(), {{"w0", "10.0.0.1:1"},
                                                  {"w7", "10.0.0.7:1"}})
                  .ok());
  v1::Job queued;
  queued.set_id(store_->AllocateJobId());
  queued.set_state(v1::JOB_STATE_QUEUED);
  *queued.mutable_spec() = SmallJob();
  ASSERT_TRUE(store_->SaveJob(queued).ok());
  Start(2, 2);
  v1::Job failed = *manager_->Get(running.id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.message(),
              HasSubstr("controller restarted while the job ran"));
  v1::Job resumed = WaitForFinal(queued.id());
  EXPECT_EQ(resumed.state(), v1::JOB_STATE_SUCCEEDED) << resumed.message();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client_.aborts().size() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_THAT(client_.aborts(), Contains(Pair("w0", running.id())));
  EXPECT_THAT(client_.aborts(), Contains(Pair("w7", running.id())));
  // The resumed job recorded its requeue (List waits for the writer).
  ASSERT_TRUE(manager_->List(0).ok());
  absl::StatusOr<std::vector<v1::JobEvent>> events =
      store_->ListEvents(queued.id());
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->empty());
  EXPECT_EQ((*events)[0].message(), "queued again after a controller restart");
}

TEST_F(JobManagerTest, ForgedResultFailsTheJobNamingTheWorker) {
  Start(2, 2);
  client_.SetMode("w1", FakeWorkerClient::Mode::kForgeStep);
  v1::Job job = WaitForFinal(Submit(SmallJob()));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(),
              HasSubstr("worker w1: result contradicts the plan: step 999999 "
                        "is not a step of its program"));
  // The other workers were told to abort.
  EXPECT_THAT(client_.aborts(), Contains(Pair("w0", job.id())));
}

// A long queue writes O(1) events per job per state change, and each job's
// plan once (issue: 1000 queued jobs wrote 313k event rows).
TEST_F(JobManagerTest, LongQueueWritesFewEventsAndEachPlanOnce) {
  constexpr int kJobs = 1000;
  UseDatabaseFile("long_queue");
  reserve_after_ = absl::ZeroDuration();  // every job waits its turn
  Start(2, 2);
  // The first job holds both hosts while the others queue behind it.
  client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  std::vector<std::string> ids;
  ids.push_back(Submit(SmallJob()));
  ASSERT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
  for (int i = 1; i < kJobs; ++i) ids.push_back(Submit(SmallJob()));
  // Time passes while they wait: their messages change every second.
  for (int s = 0; s < 5; ++s) {
    clock_.Advance(absl::Seconds(1));
    absl::SleepFor(absl::Milliseconds(30));
  }
  EXPECT_THAT(manager_->Get(ids.back())->message(),
              HasSubstr("queued behind job " + ids[1]));
  client_.SetDefaultMode(FakeWorkerClient::Mode::kSucceed);
  ASSERT_EQ(manager_->Cancel(ids[0])->state(), v1::JOB_STATE_CANCELLED);
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  while (absl::Now() < deadline &&
         manager_->Get(ids.back())->state() != v1::JOB_STATE_SUCCEEDED) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(manager_->Get(ids.back())->state(), v1::JOB_STATE_SUCCEEDED);
  manager_->Shutdown("test over");
  // Independent count: the rows in the database file.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events", -1, &stmt,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  const int64_t rows = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  // Per job: queued, at most three waiting reasons, planning, running, one
  // note per worker (2) and the end: 9; at most 10 allowed.
  EXPECT_LE(rows, 10 * kJobs);
  EXPECT_GE(rows, 5 * kJobs);  // and the counting works
  for (const std::string& id : {ids[1], ids[kJobs / 2], ids.back()}) {
    std::vector<v1::JobEvent> events = *store_->ListEvents(id);
    int queued = 0;
    for (const v1::JobEvent& e : events) {
      queued += e.state() == v1::JOB_STATE_QUEUED;
    }
    EXPECT_LE(queued, 4) << id;
    EXPECT_LE(events.size(), 10u) << id;
  }
  const JobStore::WriteCounts counts = store_->write_counts();
  EXPECT_EQ(counts.event_writes, rows);
  // Every job got a plan (the first one while it ran): written once each.
  EXPECT_EQ(counts.plan_writes, kJobs);
  EXPECT_EQ(store_->GetJob(ids.back())->plan().steps_size(),
            manager_->Get(ids.back())->plan().steps_size());
  EXPECT_GT(store_->GetJob(ids.back())->plan().steps_size(), 0);
}

TEST_F(JobManagerTest, DryRunComparesEveryStrategy) {
  Start(2, 2);
  absl::StatusOr<DryRunResult> result = manager_->DryRun(SmallJob());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->kind, "reshard");
  EXPECT_EQ(result->alternatives.size(), 5u);
  int chosen = 0;
  for (const PlanAlternative& row : result->alternatives) chosen += row.chosen;
  EXPECT_EQ(chosen, 1);
  EXPECT_GT(result->plan.steps_size(), 0);
  EXPECT_EQ(result->topology.num_hosts, 2);
  ASSERT_EQ(result->placed_meshes.size(), 2u);
  EXPECT_THAT(result->placed_meshes[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(result->placed_meshes[1].devices, ElementsAre(2, 3));
  v1::JobSpec pinned = SmallJob();
  pinned.mutable_reshard()->set_strategy("send_recv");
  result = manager_->DryRun(pinned);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->plan.strategy(), "send_recv");
  for (const PlanAlternative& row : result->alternatives) {
    EXPECT_EQ(row.chosen, row.name == "send_recv");
  }
  v1::JobSpec bad = SmallJob();
  bad.mutable_reshard()->mutable_src_spec()->set_text("Z");
  EXPECT_TRUE(absl::IsInvalidArgument(manager_->DryRun(bad).status()));
  // Nothing was queued.
  EXPECT_TRUE(manager_->List(0)->empty());
}

}  // namespace
}  // namespace meshcast
