#include "controller/job_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh database path per test, removed afterwards (with its WAL files).
class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/job_store_test_" +
            std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            ".db";
    Remove();
  }
  void TearDown() override { Remove(); }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove((path_ + suffix).c_str());
    }
  }
  std::unique_ptr<JobStore> Open() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  static v1::Job MakeJob(const std::string& id, v1::JobState state) {
    v1::Job job;
    job.set_id(id);
    job.set_state(state);
    job.set_message("msg " + id);
    job.set_created_unix(100);
    job.mutable_spec()->set_name("name " + id);
    job.mutable_spec()->mutable_reshard()->mutable_tensor()->add_shape(64);
    job.mutable_plan()->set_strategy("meshcast");
    job.mutable_plan()->add_steps()->set_bytes(256);
    job.mutable_result()->set_mismatches(0);
    job.mutable_result()->set_elements_verified(64);
    job.mutable_result()->add_steps()->set_seconds(0.5);
    return job;
  }
  std::string path_;
};

TEST_F(JobStoreTest, SavesAndReadsJobs) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  const std::string id = store->AllocateJobId();
  EXPECT_EQ(id, "job-000001");
  v1::Job job = MakeJob(id, v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(store->SaveJob(job).ok());
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_finished_unix(105);
  ASSERT_TRUE(store->SaveJob(job).ok());  // update in place
  absl::StatusOr<v1::Job> read = store->GetJob(id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(read->message(), "msg job-000001");
  EXPECT_EQ(read->spec().name(), "name job-000001");
  EXPECT_EQ(read->spec().reshard().tensor().shape(0), 64);
  EXPECT_EQ(read->plan().steps(0).bytes(), 256);
  EXPECT_EQ(read->result().elements_verified(), 64);
  EXPECT_DOUBLE_EQ(read->finished_unix(), 105);
  absl::StatusOr<v1::Job> missing = store->GetJob("job-999999");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("job-999999"));
}

TEST_F(JobStoreTest, ListsNewestFirstWithLimitAndWithoutPlans) {
  auto store = Open();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        store->SaveJob(MakeJob(store->AllocateJobId(), v1::JOB_STATE_SUCCEEDED))
            .ok());
  }
  absl::StatusOr<std::vector<v1::Job>> all = store->ListJobs(0, false);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id(), "job-000003");
  EXPECT_EQ((*all)[2].id(), "job-000001");
  EXPECT_EQ((*all)[0].plan().steps_size(), 0);
  EXPECT_EQ((*all)[0].result().steps_size(), 0);
  EXPECT_EQ((*all)[0].result().elements_verified(), 64);
  absl::StatusOr<std::vector<v1::Job>> two = store->ListJobs(2, true);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].id(), "job-000002");
  EXPECT_EQ((*two)[1].plan().steps_size(), 1);
}

TEST_F(JobStoreTest, EventsInOrder) {
  auto store = Open();
  for (auto state :
       {v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED}) {
    v1::JobEvent e;
    e.set_job_id("job-000001");
    e.set_state(state);
    e.set_message(v1::JobState_Name(state));
    ASSERT_TRUE(store->AppendEvent(e).ok());
  }
  v1::JobEvent other;
  other.set_job_id("job-000002");
  ASSERT_TRUE(store->AppendEvent(other).ok());
  absl::StatusOr<std::vector<v1::JobEvent>> events =
      store->ListEvents("job-000001");
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ((*events)[2].state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobStoreTest, ReopenKeepsHistoryAndFailsUnfinishedJobs) {
  {
    auto store = Open();
    ASSERT_TRUE(
        store->SaveJob(MakeJob(store->AllocateJobId(), v1::JOB_STATE_SUCCEEDED))
            .ok());
    ASSERT_TRUE(
        store->SaveJob(MakeJob(store->AllocateJobId(), v1::JOB_STATE_RUNNING))
            .ok());
    ASSERT_TRUE(
        store->SaveJob(MakeJob(store->AllocateJobId(), v1::JOB_STATE_QUEUED))
            .ok());
    ASSERT_TRUE(
        store->SaveJob(MakeJob(store->AllocateJobId(), v1::JOB_STATE_CANCELLED))
            .ok());
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<std::string>> failed =
      store->FailUnfinishedJobs("controller restarted", 200);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_THAT(*failed, ElementsAre("job-000002", "job-000003"));
  EXPECT_EQ(store->GetJob("job-000001")->state(), v1::JOB_STATE_SUCCEEDED);
  v1::Job running = *store->GetJob("job-000002");
  EXPECT_EQ(running.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(running.message(), "controller restarted");
  EXPECT_DOUBLE_EQ(running.finished_unix(), 200);
  EXPECT_EQ(store->GetJob("job-000004")->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(store->ListEvents("job-000003")->back().message(),
            "controller restarted");
  // Ids continue after the ones already used.
  EXPECT_EQ(store->AllocateJobId(), "job-000005");
  // A second pass finds nothing left to fail.
  EXPECT_TRUE(store->FailUnfinishedJobs("again", 300)->empty());
}

TEST_F(JobStoreTest, KeepsPlacedMeshes) {
  auto store = Open();
  v1::Job job = MakeJob(store->AllocateJobId(), v1::JOB_STATE_RUNNING);
  job.mutable_placed_src_mesh()->add_shape(1);
  job.mutable_placed_src_mesh()->add_shape(2);
  job.mutable_placed_src_mesh()->add_devices(4);
  job.mutable_placed_src_mesh()->add_devices(5);
  job.mutable_placed_dst_mesh()->add_shape(2);
  job.mutable_placed_dst_mesh()->add_devices(8);
  job.mutable_placed_dst_mesh()->add_devices(10);
  ASSERT_TRUE(store->SaveJob(job).ok());
  absl::StatusOr<v1::Job> read = store->GetJob(job.id());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->placed_src_mesh().shape(), ElementsAre(1, 2));
  EXPECT_THAT(read->placed_src_mesh().devices(), ElementsAre(4, 5));
  EXPECT_THAT(read->placed_dst_mesh().devices(), ElementsAre(8, 10));
  // Listed jobs carry them too (they are small, unlike plans).
  absl::StatusOr<std::vector<v1::Job>> listed = store->ListJobs(0, false);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_THAT((*listed)[0].placed_dst_mesh().devices(), ElementsAre(8, 10));
  // A job saved before placement has none.
  const v1::Job queued = MakeJob(store->AllocateJobId(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(store->SaveJob(queued).ok());
  EXPECT_FALSE(store->GetJob(queued.id())->has_placed_src_mesh());
}

TEST_F(JobStoreTest, UpgradesADatabaseWithoutThePlacementColumn) {
  // The schema of the first controller release, with one finished job.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  std::string spec;
  MakeJob("job-000001", v1::JOB_STATE_SUCCEEDED)
      .spec()
      .SerializeToString(&spec);
  const std::string old_schema = R"sql(
    CREATE TABLE jobs (number INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
      name TEXT NOT NULL, state INTEGER NOT NULL, message TEXT NOT NULL,
      created_unix REAL NOT NULL, started_unix REAL NOT NULL,
      finished_unix REAL NOT NULL, progress REAL NOT NULL, spec BLOB,
      plan BLOB, result BLOB);
    CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
      job_id TEXT NOT NULL, state INTEGER NOT NULL, message TEXT NOT NULL,
      time_unix REAL NOT NULL, progress REAL NOT NULL);
    INSERT INTO jobs VALUES (1, 'job-000001', 'old', 4, 'done', 1, 2, 3, 1,
      NULL, NULL, NULL);
    PRAGMA user_version = 1;)sql";
  ASSERT_EQ(sqlite3_exec(db, old_schema.c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  auto store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<v1::Job> old = store->GetJob("job-000001");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(old->has_placed_src_mesh());
  v1::Job job = MakeJob(store->AllocateJobId(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.id(), "job-000002");
  job.mutable_placed_dst_mesh()->add_devices(3);
  ASSERT_TRUE(store->SaveJob(job).ok());
  store.reset();
  // Opening the upgraded database again changes nothing.
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->GetJob("job-000002")->placed_dst_mesh().devices(),
              ElementsAre(3));
}

TEST_F(JobStoreTest, RejectsForeignIdsAndUnopenablePaths) {
  auto store = Open();
  EXPECT_TRUE(absl::IsInvalidArgument(
      store->SaveJob(MakeJob("bogus", v1::JOB_STATE_QUEUED))));
  absl::StatusOr<std::unique_ptr<JobStore>> bad =
      JobStore::Open("/nonexistent-dir/x/y.db");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("--db /nonexistent-dir/x/y.db"));
}

TEST_F(JobStoreTest, WritesThePlanOnlyWhenAsked) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  v1::Job job = MakeJob(store->AllocateJobId(), v1::JOB_STATE_QUEUED);
  v1::Job without_plan = job;
  without_plan.clear_plan();
  // Inserted without a plan: none stored.
  ASSERT_TRUE(store->SaveJob(without_plan, JobStore::PlanWrite::kKeep).ok());
  EXPECT_EQ(store->GetJob(job.id())->plan().steps_size(), 0);
  ASSERT_TRUE(store->SaveJob(job, JobStore::PlanWrite::kWrite).ok());
  // Later state changes keep it, whatever plan they carry.
  without_plan.set_state(v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(store->SaveJob(without_plan, JobStore::PlanWrite::kKeep).ok());
  absl::StatusOr<v1::Job> read = store->GetJob(job.id());
  EXPECT_EQ(read->state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(read->plan().steps_size(), 1);
  EXPECT_EQ(read->plan().steps(0).bytes(), 256);
  v1::JobEvent event;
  event.set_job_id(job.id());
  ASSERT_TRUE(store->AppendEvent(event).ok());
  const JobStore::WriteCounts counts = store->write_counts();
  EXPECT_EQ(counts.job_writes, 3);
  EXPECT_EQ(counts.plan_writes, 1);
  EXPECT_EQ(counts.event_writes, 1);
}

TEST_F(JobStoreTest, RecoveryFailsStartedJobsWithTheirWorkersKeepsQueued) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->SaveJob(MakeJob(store->AllocateJobId(),
                                       v1::JOB_STATE_RUNNING))
                    .ok());  // job-000001
    ASSERT_TRUE(store->SaveJob(MakeJob(store->AllocateJobId(),
                                       v1::JOB_STATE_QUEUED))
                    .ok());  // job-000002
    ASSERT_TRUE(store->SaveJob(MakeJob(store->AllocateJobId(),
                                       v1::JOB_STATE_SUCCEEDED))
                    .ok());  // job-000003
    ASSERT_TRUE(store
                    ->SaveJobWorkers("job-000001",
                                     {{"w0", "h0:1"}, {"w1", "h1:1"}})
                    .ok());
    ASSERT_TRUE(store->SaveHost({"w0", 0, 4}).ok());
    ASSERT_TRUE(store->SaveHost({"w1", 1, 4}).ok());
    // An index passes to another name: the old row goes.
    ASSERT_TRUE(store->SaveHost({"w9", 1, 4}).ok());
  }
  auto store = Open();  // a restarted controller
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobStore::Recovery> recovery =
      store->RecoverAfterRestart("controller restarted", 200);
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  ASSERT_EQ(recovery->failed.size(), 1u);
  EXPECT_EQ(recovery->failed[0].id, "job-000001");
  ASSERT_EQ(recovery->failed[0].workers.size(), 2u);
  EXPECT_EQ(recovery->failed[0].workers[1].name, "w1");
  EXPECT_EQ(recovery->failed[0].workers[1].address, "h1:1");
  ASSERT_EQ(recovery->queued.size(), 1u);
  EXPECT_EQ(recovery->queued[0].id(), "job-000002");
  EXPECT_EQ(recovery->queued[0].spec().name(), "name job-000002");
  EXPECT_EQ(store->GetJob("job-000001")->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(store->GetJob("job-000002")->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(store->GetJob("job-000003")->state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<StoredHost> hosts = *store->LoadHosts();
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].name, "w0");
  EXPECT_EQ(hosts[1].name, "w9");
  EXPECT_EQ(hosts[1].num_devices, 4);
  ASSERT_TRUE(store->DeleteHost("w0").ok());
  EXPECT_EQ(store->LoadHosts()->size(), 1u);
}

}  // namespace
}  // namespace meshcast
