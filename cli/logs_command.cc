#include "cli/logs_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/cluster_file.h"
#include "cli/command_errors.h"
#include "cli/flags.h"
#include "cli/job_ref.h"
#include "cli/suggest.h"
#include "meshcast/v1/job.pb.h"
#include "util/log.h"

namespace meshcast::cli {
namespace {

constexpr char kCommand[] = "meshctl logs";
constexpr absl::Duration kPollPeriod = absl::Milliseconds(250);

// One daemon's log file and how far it has been read.
struct LogFile {
  std::string name;  // "controller", "worker-0": the file's stem
  std::string path;
  std::streamoff offset = 0;
  std::string partial;  // a last line not yet ended by '\n'
};

struct Entry {
  absl::Time time;
  std::string text;
};

// DIR/logs/*.log of the daemons, by name. Prometheus's own log (another
// format) is left out.
absl::StatusOr<std::vector<LogFile>> FindLogFiles(const std::string& dir) {
  const std::filesystem::path logs = std::filesystem::path(dir) / "logs";
  std::error_code error;
  std::vector<LogFile> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(logs, error)) {
    if (entry.path().extension() != ".log") continue;
    const std::string name = entry.path().stem().string();
    if (name == "prometheus") continue;
    files.push_back({name, entry.path().string()});
  }
  if (error || files.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no daemon logs in ", logs.string(),
        "; start a local cluster with 'meshctl up' (or name its directory "
        "with --dir)"));
  }
  std::sort(files.begin(), files.end(),
            [](const LogFile& a, const LogFile& b) { return a.name < b.name; });
  return files;
}

// The lines appended to `file` since the last call (complete lines only).
std::vector<std::string> ReadNewLines(LogFile& file) {
  std::ifstream in(file.path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < file.offset) {  // truncated or replaced: start over
    file.offset = 0;
    file.partial.clear();
  }
  in.seekg(file.offset);
  std::string chunk(static_cast<size_t>(size - file.offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  file.offset += static_cast<std::streamoff>(chunk.size());
  std::string text = file.partial + chunk;
  const size_t last_newline = text.rfind('\n');
  if (last_newline == std::string::npos) {
    file.partial = std::move(text);
    return {};
  }
  file.partial = text.substr(last_newline + 1);
  text.resize(last_newline);
  return absl::StrSplit(text, '\n');
}

// The lines of `files` in the logger's format that pass the filter, in time
// order (lines of one time keep their file and line order).
std::vector<Entry> ReadEntries(std::vector<LogFile>& files,
                               const std::string& job_id,
                               std::set<std::string>* jobs_seen) {
  std::vector<Entry> entries;
  for (LogFile& file : files) {
    for (std::string& text : ReadNewLines(file)) {
      const std::optional<LogLine> line = ParseLogLine(text);
      if (!line.has_value()) continue;
      if (jobs_seen != nullptr && !line->job_id.empty()) {
        jobs_seen->insert(line->job_id);
      }
      if (!job_id.empty() && line->job_id != job_id) continue;
      entries.push_back({line->time, std::move(text)});
    }
  }
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const Entry& a, const Entry& b) { return a.time < b.time; });
  return entries;
}

std::string Join(const std::vector<Entry>& entries) {
  std::string out;
  for (const Entry& entry : entries) absl::StrAppend(&out, entry.text, "\n");
  return out;
}

// The job id `text` names among the jobs the logs mention (job_ref.h's
// rules); NOT_FOUND when none does.
absl::StatusOr<std::string> ResolveJobInLogs(
    const std::string& text, const std::set<std::string>& jobs_seen) {
  std::vector<v1::Job> jobs;
  // Newest first, as the controller lists them, so an ambiguity lists the
  // newest jobs.
  for (auto it = jobs_seen.rbegin(); it != jobs_seen.rend(); ++it) {
    v1::Job job;
    job.set_id(*it);
    jobs.push_back(std::move(job));
  }
  absl::StatusOr<std::string> id = MatchJobId(text, jobs);
  if (!id.ok() && absl::IsNotFound(id.status())) {
    return absl::NotFoundError(
        absl::StrCat("no log line names job '", text, "' (",
                     jobs_seen.empty()
                         ? std::string("the logs name no job")
                         : absl::StrCat(jobs_seen.size(), " jobs logged, ",
                                        *jobs_seen.begin(), " .. ",
                                        *jobs_seen.rbegin()),
                     ")"));
  }
  return id;
}

}  // namespace

CommandResult RunLogsCommand(const std::vector<std::string>& args,
                             const CommandContext& context) {
  std::string dir_flag;
  std::string worker;
  bool follow = false;
  double follow_seconds = 0;
  FlagSet flags(
      kCommand,
      "Prints a local cluster's daemon logs (DIR/logs) merged in time\n"
      "order: every line, or with JOB (a full id, a number such as 42, or a\n"
      "unique prefix) the lines of the controller and of every worker about\n"
      "that job. Lines look like\n"
      "  2026-11-27T05:40:01.123Z INFO worker/worker-0 job=job-000042 "
      "succeeded\n"
      "(time in UTC, severity, daemon, job, message), so the same grep works\n"
      "on the files themselves.\n\n"
      "usage: meshctl logs [JOB] [--worker NAME] [--follow [--for SECONDS]] "
      "[--dir DIR]\n");
  flags.String("dir", &dir_flag, "DIR",
               "cluster directory (default: $MESHCAST_HOME, else ./.meshcast)");
  flags.String("worker", &worker, "NAME",
               "only this daemon's lines (worker-0, ..., or controller)");
  flags.Bool("follow", &follow,
             "keep printing new lines until interrupted or the cluster stops");
  flags.Alias("f", "follow");
  flags.Double("for", &follow_seconds, "SECONDS",
               "with --follow: stop after this long (0: no limit)");
  if (auto done = ParseCommandFlags(flags, args, kCommand, 1,
                                    "see 'meshctl logs --help'")) {
    return *done;
  }
  if (follow_seconds < 0 || (flags.IsSet("for") && !follow)) {
    return Fail(kCommand, kExitUsage,
                "--for: needs --follow and a number of seconds >= 0");
  }
  const std::string dir = LocalClusterDir(dir_flag, context);
  absl::StatusOr<std::vector<LogFile>> found = FindLogFiles(dir);
  if (!found.ok()) return FailWithStatus(kCommand, found.status());
  std::vector<LogFile> files = *std::move(found);
  if (!worker.empty()) {
    std::vector<std::string> names;
    for (const LogFile& file : files) names.push_back(file.name);
    if (std::find(names.begin(), names.end(), worker) == names.end()) {
      return Fail(kCommand, kExitUsage,
                  absl::StrCat("--worker: no log of '", worker, "' in ", dir,
                               "/logs; allowed: ", absl::StrJoin(names, ", ")));
    }
    files.erase(std::remove_if(files.begin(), files.end(),
                               [&](const LogFile& f) { return f.name != worker; }),
                files.end());
  }

  // The job: resolved against every job the logs name, then the lines read
  // again from the start with the filter.
  std::string job_id;
  if (!flags.positional().empty()) {
    std::set<std::string> jobs_seen;
    std::vector<LogFile> scan = files;
    ReadEntries(scan, "", &jobs_seen);
    absl::StatusOr<std::string> id =
        ResolveJobInLogs(flags.positional()[0], jobs_seen);
    if (!id.ok()) return FailWithStatus(kCommand, id.status());
    job_id = *id;
  }
  std::string out = Join(ReadEntries(files, job_id, nullptr));
  if (!follow) return CommandResult{kExitOk, std::move(out), ""};

  context.Stream(out);
  const bool cluster_running =
      std::filesystem::exists(ClusterFilePath(dir));
  const absl::Time end = follow_seconds > 0
                             ? absl::Now() + absl::Seconds(follow_seconds)
                             : absl::InfiniteFuture();
  while (absl::Now() < end) {
    absl::SleepFor(std::min(kPollPeriod, end - absl::Now()));
    context.Stream(Join(ReadEntries(files, job_id, nullptr)));
    if (cluster_running && !std::filesystem::exists(ClusterFilePath(dir))) {
      context.Stream(Join(ReadEntries(files, job_id, nullptr)));
      return CommandResult{kExitOk, "",
                           "meshctl logs: the cluster stopped\n"};
    }
  }
  return CommandResult{kExitOk, "", ""};
}

}  // namespace meshcast::cli
