#include "controller/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr absl::string_view kIdPrefix = "job-";

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  number INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  state INTEGER NOT NULL,
  message TEXT NOT NULL,
  created_unix REAL NOT NULL,
  started_unix REAL NOT NULL,
  finished_unix REAL NOT NULL,
  progress REAL NOT NULL,
  spec BLOB,
  plan BLOB,
  result BLOB,
  placement BLOB
);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  state INTEGER NOT NULL,
  message TEXT NOT NULL,
  time_unix REAL NOT NULL,
  progress REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS hosts (
  name TEXT PRIMARY KEY,
  host_index INTEGER NOT NULL UNIQUE,
  num_devices INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS job_workers (
  job_id TEXT NOT NULL,
  name TEXT NOT NULL,
  address TEXT NOT NULL,
  PRIMARY KEY (job_id, name)
);
CREATE TABLE IF NOT EXISTS calibration (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  topology BLOB NOT NULL
);
)sql";

// Version 2 added jobs.placement: a serialized v1::Job that holds only the
// fields with no column of their own (placed_src_mesh, placed_dst_mesh and,
// since issue 10, placed_meshes: no schema change, the blob is a v1::Job).
constexpr int kSchemaVersion = 2;

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    status_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK
                  ? absl::OkStatus()
                  : SqliteError(db, sql);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  const absl::Status& status() const { return status_; }
  sqlite3_stmt* get() { return stmt_; }

  void BindText(int i, absl::string_view text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()),
                      SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& blob) {
    sqlite3_bind_blob(stmt_, i, blob.data(), static_cast<int>(blob.size()),
                      SQLITE_TRANSIENT);
  }
  void BindInt(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void BindDouble(int i, double v) { sqlite3_bind_double(stmt_, i, v); }

  // SQLITE_ROW -> true, SQLITE_DONE -> false, else the error.
  absl::StatusOr<bool> Step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, "step");
  }

  std::string ColumnText(int i) {
    const unsigned char* text = sqlite3_column_text(stmt_, i);
    return text == nullptr ? std::string()
                           : std::string(reinterpret_cast<const char*>(text),
                                         sqlite3_column_bytes(stmt_, i));
  }
  std::string ColumnBlob(int i) {
    const void* blob = sqlite3_column_blob(stmt_, i);
    return blob == nullptr ? std::string()
                           : std::string(static_cast<const char*>(blob),
                                         sqlite3_column_bytes(stmt_, i));
  }
  int64_t ColumnInt(int i) { return sqlite3_column_int64(stmt_, i); }
  double ColumnDouble(int i) { return sqlite3_column_double(stmt_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
};

absl::StatusOr<int64_t> NumberOfId(absl::string_view id) {
  int64_t number = 0;
  if (!absl::StartsWith(id, kIdPrefix) ||
      !absl::SimpleAtoi(id.substr(kIdPrefix.size()), &number) || number < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", id, "\" is not of the form job-<number>"));
  }
  return number;
}

constexpr const char* kJobColumns =
    "id, name, state, message, created_unix, started_unix, finished_unix, "
    "progress, spec, plan, result, placement";

// The part of a job stored in the placement column.
v1::Job PlacementOf(const v1::Job& job) {
  v1::Job placement;
  if (job.has_placed_src_mesh()) {
    *placement.mutable_placed_src_mesh() = job.placed_src_mesh();
  }
  if (job.has_placed_dst_mesh()) {
    *placement.mutable_placed_dst_mesh() = job.placed_dst_mesh();
  }
  *placement.mutable_placed_meshes() = job.placed_meshes();
  return placement;
}

// Reads a row selected with kJobColumns.
absl::StatusOr<v1::Job> ReadJob(Statement& stmt, bool include_plan) {
  v1::Job job;
  job.set_id(stmt.ColumnText(0));
  // name is stored for queries; the spec carries it too.
  job.set_state(static_cast<v1::JobState>(stmt.ColumnInt(2)));
  job.set_message(stmt.ColumnText(3));
  job.set_created_unix(stmt.ColumnDouble(4));
  job.set_started_unix(stmt.ColumnDouble(5));
  job.set_finished_unix(stmt.ColumnDouble(6));
  job.set_progress(stmt.ColumnDouble(7));
  if (!job.mutable_spec()->ParseFromString(stmt.ColumnBlob(8))) {
    return absl::DataLossError(
        absl::StrCat("stored spec of job ", job.id(), " is corrupt"));
  }
  if (include_plan &&
      !job.mutable_plan()->ParseFromString(stmt.ColumnBlob(9))) {
    return absl::DataLossError(
        absl::StrCat("stored plan of job ", job.id(), " is corrupt"));
  }
  if (!job.mutable_result()->ParseFromString(stmt.ColumnBlob(10))) {
    return absl::DataLossError(
        absl::StrCat("stored result of job ", job.id(), " is corrupt"));
  }
  // NULL in rows written before schema version 2: no placement known.
  v1::Job placement;
  if (!placement.ParseFromString(stmt.ColumnBlob(11))) {
    return absl::DataLossError(
        absl::StrCat("stored placement of job ", job.id(), " is corrupt"));
  }
  job.MergeFrom(PlacementOf(placement));
  if (!include_plan) {
    job.clear_plan();
    job.mutable_result()->clear_steps();
  }
  return job;
}

// Brings a database written by an older controller up to kSchemaVersion.
// CREATE TABLE IF NOT EXISTS leaves an old jobs table as it was, so columns
// added since are added here; old rows read them as NULL.
absl::Status Migrate(sqlite3* db) {
  int version = 0;
  {
    Statement stmt(db, "PRAGMA user_version");
    RETURN_IF_ERROR(stmt.status());
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (row) version = static_cast<int>(stmt.ColumnInt(0));
  }
  if (version >= kSchemaVersion) return absl::OkStatus();
  bool has_placement = false;
  {
    Statement stmt(db, "PRAGMA table_info(jobs)");
    RETURN_IF_ERROR(stmt.status());
    while (true) {
      ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      if (stmt.ColumnText(1) == "placement") has_placement = true;
    }
  }
  const std::string upgrade = absl::StrCat(
      has_placement ? "" : "ALTER TABLE jobs ADD COLUMN placement BLOB;",
      "PRAGMA user_version = ", kSchemaVersion, ";");
  char* error = nullptr;
  if (sqlite3_exec(db, upgrade.c_str(), nullptr, nullptr, &error) !=
      SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(message);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("--db ", path, ": cannot open database: ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  char* error = nullptr;
  // WAL keeps readers off the writer's back; NORMAL sync is durable across
  // process crashes, which is what a controller restart needs.
  std::string setup = absl::StrCat(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", kSchema);
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("--db ", path, ": cannot set up the schema: ", message));
  }
  if (absl::Status migrated = Migrate(db); !migrated.ok()) {
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat(
        "--db ", path, ": cannot upgrade the schema: ", migrated.message()));
  }
  int64_t next_number = 1;
  {
    Statement stmt(db, "SELECT COALESCE(MAX(number), 0) FROM jobs");
    if (!stmt.status().ok()) {
      sqlite3_close(db);
      return stmt.status();
    }
    absl::StatusOr<bool> row = stmt.Step();
    if (row.ok() && *row) next_number = stmt.ColumnInt(0) + 1;
  }
  return std::unique_ptr<JobStore>(new JobStore(db, next_number));
}

JobStore::~JobStore() { sqlite3_close(db_); }

std::string JobStore::AllocateJobId() {
  absl::MutexLock lock(&mu_);
  return absl::StrFormat("%s%06d", kIdPrefix, next_number_++);
}

absl::Status JobStore::SaveJob(const v1::Job& job, PlanWrite plan_write) {
  ASSIGN_OR_RETURN(const int64_t number, NumberOfId(job.id()));
  const bool with_plan = plan_write == PlanWrite::kWrite;
  std::string spec, plan, result, placement;
  job.spec().SerializeToString(&spec);
  if (with_plan) job.plan().SerializeToString(&plan);
  job.result().SerializeToString(&result);
  PlacementOf(job).SerializeToString(&placement);
  absl::MutexLock lock(&mu_);
  // kKeep inserts an empty plan and leaves a stored one as it is.
  Statement stmt(
      db_, absl::StrCat(
               "INSERT INTO jobs (number, id, name, state, message, "
               "created_unix, started_unix, finished_unix, progress, spec, "
               "plan, result, placement) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
               "?, ?, ?, ?) "
               "ON CONFLICT(number) DO UPDATE SET name=excluded.name, "
               "state=excluded.state, message=excluded.message, "
               "created_unix=excluded.created_unix, "
               "started_unix=excluded.started_unix, "
               "finished_unix=excluded.finished_unix, "
               "progress=excluded.progress, spec=excluded.spec, ",
               with_plan ? "plan=excluded.plan, " : "",
               "result=excluded.result, placement=excluded.placement")
               .c_str());
  RETURN_IF_ERROR(stmt.status());
  stmt.BindInt(1, number);
  stmt.BindText(2, job.id());
  stmt.BindText(3, job.spec().name());
  stmt.BindInt(4, job.state());
  stmt.BindText(5, job.message());
  stmt.BindDouble(6, job.created_unix());
  stmt.BindDouble(7, job.started_unix());
  stmt.BindDouble(8, job.finished_unix());
  stmt.BindDouble(9, job.progress());
  stmt.BindBlob(10, spec);
  stmt.BindBlob(11, plan);
  stmt.BindBlob(12, result);
  stmt.BindBlob(13, placement);
  RETURN_IF_ERROR(stmt.Step().status());
  if (number >= next_number_) next_number_ = number + 1;
  ++counts_.job_writes;
  if (with_plan) ++counts_.plan_writes;
  return absl::OkStatus();
}

absl::Status JobStore::AppendEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  return AppendEventLocked(event);
}

JobStore::WriteCounts JobStore::write_counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

absl::Status JobStore::SaveJobWorkers(
    absl::string_view job_id, const std::vector<JobWorker>& workers) {
  absl::MutexLock lock(&mu_);
  for (const JobWorker& worker : workers) {
    Statement stmt(db_,
                   "INSERT OR REPLACE INTO job_workers (job_id, name, "
                   "address) VALUES (?, ?, ?)");
    RETURN_IF_ERROR(stmt.status());
    stmt.BindText(1, job_id);
    stmt.BindText(2, worker.name);
    stmt.BindText(3, worker.address);
    RETURN_IF_ERROR(stmt.Step().status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobStore::JobWorker>> JobStore::ListJobWorkers(
    absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  return ListJobWorkersLocked(job_id);
}

absl::StatusOr<std::vector<JobStore::JobWorker>>
JobStore::ListJobWorkersLocked(absl::string_view job_id) {
  Statement stmt(db_,
                 "SELECT name, address FROM job_workers WHERE job_id = ? "
                 "ORDER BY name");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, job_id);
  std::vector<JobWorker> workers;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    workers.push_back({stmt.ColumnText(0), stmt.ColumnText(1)});
  }
  return workers;
}

absl::Status JobStore::SaveHost(const StoredHost& host) {
  absl::MutexLock lock(&mu_);
  // A name keeps one index; an index names one host (a removed name's
  // index may pass to another name, whose row replaces it).
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO hosts (name, host_index, "
                 "num_devices) VALUES (?, ?, ?)");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, host.name);
  stmt.BindInt(2, host.host_index);
  stmt.BindInt(3, host.num_devices);
  return stmt.Step().status();
}

absl::Status JobStore::DeleteHost(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "DELETE FROM hosts WHERE name = ?");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, name);
  return stmt.Step().status();
}

absl::StatusOr<std::vector<StoredHost>> JobStore::LoadHosts() {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "SELECT name, host_index, num_devices FROM hosts ORDER BY "
                 "host_index");
  RETURN_IF_ERROR(stmt.status());
  std::vector<StoredHost> hosts;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    hosts.push_back({stmt.ColumnText(0), static_cast<int>(stmt.ColumnInt(1)),
                     static_cast<int>(stmt.ColumnInt(2))});
  }
  return hosts;
}

absl::Status JobStore::SaveCalibration(const v1::Topology& calibration) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO calibration (id, topology) VALUES "
                 "(1, ?)");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindBlob(1, calibration.SerializeAsString());
  return stmt.Step().status();
}

absl::StatusOr<v1::Topology> JobStore::LoadCalibration() {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT topology FROM calibration WHERE id = 1");
  RETURN_IF_ERROR(stmt.status());
  v1::Topology calibration;
  ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (row && !calibration.ParseFromString(stmt.ColumnBlob(0))) {
    return absl::DataLossError("the stored calibration does not parse");
  }
  return calibration;
}

absl::Status JobStore::AppendEventLocked(const v1::JobEvent& event) {
  Statement stmt(db_,
                 "INSERT INTO events (job_id, state, message, time_unix, "
                 "progress) VALUES (?, ?, ?, ?, ?)");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, event.job_id());
  stmt.BindInt(2, event.state());
  stmt.BindText(3, event.message());
  stmt.BindDouble(4, event.time_unix());
  stmt.BindDouble(5, event.progress());
  RETURN_IF_ERROR(stmt.Step().status());
  ++counts_.event_writes;
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobStore::GetJob(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  Statement stmt(
      db_,
      absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?").c_str());
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, id);
  ASSIGN_OR_RETURN(const bool found, stmt.Step());
  if (!found) {
    return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  }
  return ReadJob(stmt, /*include_plan=*/true);
}

absl::StatusOr<std::vector<v1::Job>> JobStore::ListJobs(int limit,
                                                        bool include_plans) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, absl::StrCat("SELECT ", kJobColumns,
                                   " FROM jobs ORDER BY number DESC LIMIT ?")
                          .c_str());
  RETURN_IF_ERROR(stmt.status());
  stmt.BindInt(1, limit > 0 ? limit : -1);  // -1: no limit in SQLite
  std::vector<v1::Job> jobs;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(v1::Job job, ReadJob(stmt, include_plans));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::ListEvents(
    absl::string_view id) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "SELECT job_id, state, message, time_unix, progress FROM "
                 "events WHERE job_id = ? ORDER BY seq");
  RETURN_IF_ERROR(stmt.status());
  stmt.BindText(1, id);
  std::vector<v1::JobEvent> events;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    v1::JobEvent event;
    event.set_job_id(stmt.ColumnText(0));
    event.set_state(static_cast<v1::JobState>(stmt.ColumnInt(1)));
    event.set_message(stmt.ColumnText(2));
    event.set_time_unix(stmt.ColumnDouble(3));
    event.set_progress(stmt.ColumnDouble(4));
    events.push_back(std::move(event));
  }
  return events;
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountJobsByState() {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  RETURN_IF_ERROR(stmt.status());
  std::map<v1::JobState, int64_t> counts;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    counts[static_cast<v1::JobState>(stmt.ColumnInt(0))] = stmt.ColumnInt(1);
  }
  return counts;
}

absl::StatusOr<std::vector<std::string>> JobStore::FailUnfinishedJobs(
    absl::string_view message, double now_unix) {
  absl::MutexLock lock(&mu_);
  return FailJobsLocked(
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_PLANNING, v1::JOB_STATE_RUNNING},
      message, now_unix);
}

absl::StatusOr<JobStore::Recovery> JobStore::RecoverAfterRestart(
    absl::string_view message, double now_unix) {
  absl::MutexLock lock(&mu_);
  Recovery recovery;
  ASSIGN_OR_RETURN(
      std::vector<std::string> failed,
      FailJobsLocked({v1::JOB_STATE_PLANNING, v1::JOB_STATE_RUNNING}, message,
                     now_unix));
  for (std::string& id : failed) {
    ASSIGN_OR_RETURN(std::vector<JobWorker> workers,
                     ListJobWorkersLocked(id));
    recovery.failed.push_back({std::move(id), std::move(workers)});
  }
  Statement stmt(db_, absl::StrCat("SELECT ", kJobColumns,
                                   " FROM jobs WHERE state = ? ORDER BY number")
                          .c_str());
  RETURN_IF_ERROR(stmt.status());
  stmt.BindInt(1, v1::JOB_STATE_QUEUED);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(v1::Job job, ReadJob(stmt, /*include_plan=*/false));
    recovery.queued.push_back(std::move(job));
  }
  return recovery;
}

absl::StatusOr<std::vector<std::string>> JobStore::FailJobsLocked(
    const std::vector<v1::JobState>& states, absl::string_view message,
    double now_unix) {
  std::vector<std::pair<std::string, double>> unfinished;  // id, progress
  {
    // The states are enum values: safe to spell into the SQL.
    Statement stmt(
        db_, absl::StrCat("SELECT id, progress FROM jobs WHERE state IN (",
                          absl::StrJoin(states, ","), ") ORDER BY number")
                 .c_str());
    RETURN_IF_ERROR(stmt.status());
    while (true) {
      ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      unfinished.emplace_back(stmt.ColumnText(0), stmt.ColumnDouble(1));
    }
  }
  std::vector<std::string> ids;
  for (const auto& [id, progress] : unfinished) {
    Statement stmt(db_,
                   "UPDATE jobs SET state = ?, message = ?, finished_unix = ? "
                   "WHERE id = ?");
    RETURN_IF_ERROR(stmt.status());
    stmt.BindInt(1, v1::JOB_STATE_FAILED);
    stmt.BindText(2, message);
    stmt.BindDouble(3, now_unix);
    stmt.BindText(4, id);
    RETURN_IF_ERROR(stmt.Step().status());
    v1::JobEvent event;
    event.set_job_id(id);
    event.set_state(v1::JOB_STATE_FAILED);
    event.set_message(std::string(message));
    event.set_time_unix(now_unix);
    event.set_progress(progress);
    RETURN_IF_ERROR(AppendEventLocked(event));
    ids.push_back(id);
  }
  return ids;
}

}  // namespace meshcast
