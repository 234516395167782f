#include "cli/job_commands.h"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "cli/client_flags.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/flags.h"
#include "cli/job_format.h"
#include "cli/reshard_input.h"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

constexpr char kSubmitDescription[] =
    "Submits a job to the controller and names its id (or, with --wait,\n"
    "follows it until it ends). The only kind is 'reshard': move one tensor\n"
    "from a source device mesh and sharding spec to a destination mesh and\n"
    "spec; the workers fill the source tiles with a known pattern, move the\n"
    "bytes with the chosen strategy and verify every destination element.\n"
    "The flags are those of 'meshctl plan' without --cluster: the live\n"
    "cluster is the topology.\n"
    "\n"
    "meshes:\n"
    "  2x4        2 hosts x 4 devices, placed by the controller (one mesh row\n"
    "             per host; source and destination on disjoint hosts unless\n"
    "             --allow-overlap)\n"
    "  2x4@1      pinned: hosts 1 and 2, the first 4 devices of each\n"
    "  --src-devices 0,1,4,5 --src-shape 2x2   pinned to a device list\n"
    "specs: one entry per tensor dimension, R, S0, S1 or S01 (S0RR, S0,R,R).\n"
    "\n"
    "examples:\n"
    "  meshctl submit reshard --shape 64x64x256 --dtype int32 \\\n"
    "    --src-mesh 2x4 --src-spec S0RR --dst-mesh 2x4 --dst-spec RS0R --wait\n"
    "  meshctl submit -f job.yaml --strategy send_recv --wait\n"
    "\n"
    "job file (-f FILE, YAML or JSON; flags given too override its values):\n"
    "  name: my-job              # optional\n"
    "  kind: reshard             # optional\n"
    "  reshard:\n"
    "    shape: 64x64x256        # or [64, 64, 256]\n"
    "    dtype: int32            # default float32\n"
    "    src_mesh: 2x4           # or [2, 4], 2x4@0, or {shape: [2, 2],\n"
    "                            #              devices: [0, 1, 4, 5]}\n"
    "    src_spec: S0RR          # or S0,R,R or [S0, R, R]\n"
    "    dst_mesh: 2x4\n"
    "    dst_spec: RS0R\n"
    "    strategy: auto          # send_recv, local_allgather, broadcast,\n"
    "                            # broadcast_lb, meshcast or auto\n"
    "    allow_overlap: false\n"
    "The same as JSON: {\"name\": \"my-job\", \"reshard\": {\"shape\": [64, "
    "64,\n"
    "256], \"dtype\": \"int32\", \"src_mesh\": \"2x4\", ...}}.\n"
    "\n"
    "output: 'job ID submitted (QUEUED); follow it with ...' (table; for\n"
    "scripts: --output json | jq -r .id) or the job as one JSON object\n"
    "(--output json: id, name, state, message, progress, created_unix,\n"
    "started_unix, finished_unix, spec, plan, result{seconds, bytes_moved,\n"
    "bytes_delivered, elements_verified, mismatches, ...}). With --wait,\n"
    "progress lines while it runs (table only) and the final job; the exit\n"
    "code is 0 only if it SUCCEEDED.\n";

// --output for every job command.
void OutputFlag(FlagSet& flags, std::string* output) {
  flags.Choice("output", output, {"table", "json"},
               "table: human-readable text; json: one JSON object");
}

absl::Status CheckTimeout(double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--timeout: must be >= 0 seconds (0 = no limit), got ", seconds));
}

absl::Duration TimeoutOf(double seconds) {
  return seconds > 0 ? absl::Seconds(seconds) : absl::InfiniteDuration();
}

// The single positional job id of get/watch/cancel.
absl::StatusOr<std::string> JobIdArgument(const FlagSet& flags,
                                          absl::string_view command) {
  const std::vector<std::string>& positional = flags.positional();
  if (positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing job ID, e.g. '", command,
                     " ID'; 'meshctl list' shows the ids"));
  }
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", positional[1], "'; give one job ID"));
  }
  return positional[0];
}

// What get, watch and cancel share once their flags are registered:
// parse, --help, `check` of the parsed values (may be null), the one job ID
// argument, connect. Returns the CommandResult to end with (help or an
// error), or nullopt with `id` and `client` set.
std::optional<CommandResult> StartJobIdCommand(
    const char* command, const std::vector<std::string>& args,
    const CommandContext& context, FlagSet& flags, ClientFlags& client_flags,
    const std::function<absl::Status()>& check, std::string* id,
    std::unique_ptr<ControllerClient>* client) {
  client_flags.Register(flags);
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(command, kExitUsage, parsed.message());
  if (check != nullptr) {
    if (absl::Status status = check(); !status.ok()) {
      return FailWithStatus(command, status);
    }
  }
  absl::StatusOr<std::string> job_id = JobIdArgument(flags, command);
  if (!job_id.ok()) return FailWithStatus(command, job_id.status());
  absl::StatusOr<std::unique_ptr<ControllerClient>> connected =
      client_flags.Connect(context);
  if (!connected.ok()) return FailWithStatus(command, connected.status());
  *id = *std::move(job_id);
  *client = *std::move(connected);
  return std::nullopt;
}

// Final line of a job that ended: "job ID SUCCEEDED: message".
std::string FinalLine(const v1::Job& job) {
  return absl::StrCat("job ", job.id(), " ", JobStateName(job.state()),
                      job.message().empty() ? "" : ": ", job.message());
}

// Follows a job until it ends, streaming one line per event when `stream`,
// then fetches and returns the final job.
absl::StatusOr<v1::Job> FollowJob(ControllerClient& client,
                                  const std::string& id, absl::Duration timeout,
                                  bool stream, bool json_lines,
                                  const CommandContext& context) {
  v1::JobEvent last;
  bool have_last = false;
  bool ended = false;
  RETURN_IF_ERROR(client.WatchJob(id, timeout, [&](const v1::JobEvent& event) {
    // The stream repeats the state on reconnects and progress ticks;
    // print only what changed.
    const bool changed = !have_last || event.state() != last.state() ||
                         event.message() != last.message() ||
                         event.progress() != last.progress();
    if (changed) {
      if (json_lines) {
        context.Stream(EventToJson(event).dump() + "\n");
      } else if (stream) {
        context.Stream(RenderEvent(event));
      }
    }
    last = event;
    have_last = true;
    if (IsFinalState(event.state())) ended = true;
    return true;
  }));
  absl::StatusOr<v1::Job> fetched = client.GetJob(id);
  if (!fetched.ok() && ended) {
    // The controller sent the final state and then went away (e.g. it shut
    // down, failing its jobs): report what it said.
    v1::Job job;
    job.set_id(id);
    job.set_state(last.state());
    job.set_message(last.message());
    job.set_progress(last.progress());
    return job;
  }
  ASSIGN_OR_RETURN(v1::Job job, std::move(fetched));
  if (!IsFinalState(job.state())) {
    return absl::UnavailableError(
        absl::StrCat("the controller ended the watch of job ", id,
                     " while it was ", JobStateName(job.state()),
                     ended ? "" : " (controller shutting down?)"));
  }
  return job;
}

void AddReshardFlags(FlagSet& flags, std::map<std::string, std::string>& text,
                     bool* allow_overlap) {
  flags.String("shape", &text["shape"], "AxBx...",
               "tensor shape, e.g. 1024x1024x512 (required)");
  flags.String("dtype", &text["dtype"], "TYPE",
               "element type: int8, uint8, int32, int64, float16, bfloat16,\n"
               "float32 (default), float64 (aliases fp16, bf16, fp32, ...)");
  flags.String("src-mesh", &text["src_mesh"], "HxG[@h]",
               "source mesh: HxG placed by the controller, HxG@h pinned");
  flags.String("src-devices", &text["src_devices"], "IDS",
               "source mesh as a device list, e.g. 0,1,4,5 (with --src-shape)");
  flags.String("src-shape", &text["src_shape"], "AxB",
               "shape of the --src-devices mesh, e.g. 2x2");
  flags.String("src-spec", &text["src_spec"], "SPEC",
               "source sharding spec, e.g. S0RR (required)");
  flags.String("dst-mesh", &text["dst_mesh"], "HxG[@h]",
               "destination mesh, as --src-mesh");
  flags.String("dst-devices", &text["dst_devices"], "IDS",
               "destination mesh as a device list (with --dst-shape)");
  flags.String("dst-shape", &text["dst_shape"], "AxB",
               "shape of the --dst-devices mesh");
  flags.String("dst-spec", &text["dst_spec"], "SPEC",
               "destination sharding spec, e.g. S0RR (required)");
  flags.String("strategy", &text["strategy"], "NAME",
               "auto (lowest predicted time, default) or one of send_recv,\n"
               "local_allgather, broadcast, broadcast_lb, meshcast");
  flags.Bool("allow-overlap", allow_overlap,
             "let the controller place source and destination on the same "
             "hosts");
}

// Copies the reshard flags that were given into `input`, overriding a job
// file's values. A mesh given by flags in one form replaces the file's mesh
// in the other form (--src-mesh replaces src_mesh: {shape, devices}, and
// --src-devices / --src-shape replace src_mesh: 2x4).
void ApplyReshardFlags(const FlagSet& flags,
                       const std::map<std::string, std::string>& text,
                       bool allow_overlap, ReshardInput* input) {
  for (const std::string side : {"src", "dst"}) {
    const bool flag_mesh = flags.IsSet(side + "-mesh");
    const bool flag_list =
        flags.IsSet(side + "-devices") || flags.IsSet(side + "-shape");
    if (flag_mesh) {
      input->Erase(side + "_devices");
      input->Erase(side + "_shape");
    }
    if (flag_list) input->Erase(side + "_mesh");
  }
  for (const char* field : kReshardFields) {
    const std::string flag = absl::StrReplaceAll(field, {{"_", "-"}});
    if (!flags.IsSet(flag)) continue;
    if (std::string(field) == "allow_overlap") {
      input->Set(field, allow_overlap ? "true" : "false", "--" + flag);
      continue;
    }
    auto it = text.find(field);
    input->Set(field, it == text.end() ? "" : it->second, "--" + flag);
  }
}

}  // namespace

CommandResult RunSubmitCommand(const std::vector<std::string>& args,
                               const CommandContext& context) {
  constexpr char kCommand[] = "meshctl submit";
  std::map<std::string, std::string> text;
  bool allow_overlap = false;
  std::string name;
  std::string file;
  bool wait = false;
  double timeout_seconds = 0;
  std::string output = "table";
  ClientFlags client_flags;
  FlagSet flags("meshctl submit reshard",
                absl::StrCat(kSubmitDescription, "\n", kControllerHelp, "\n\n",
                             kExitCodesHelp));
  flags.String("f", &file, "FILE", "job file, YAML or JSON (format below)");
  flags.String("file", &file, "FILE", "the same as -f");
  flags.String("name", &name, "NAME", "job name, shown by list and get");
  AddReshardFlags(flags, text, &allow_overlap);
  flags.Bool("wait", &wait,
             "follow the job until it ends; exit non-zero unless it "
             "SUCCEEDED");
  flags.Double("timeout", &timeout_seconds, "SECONDS",
               "with --wait: give up waiting after this long (0 = never)");
  OutputFlag(flags, &output);
  client_flags.Register(flags);
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(kCommand, kExitUsage, parsed.message());
  if (absl::Status status = CheckTimeout(timeout_seconds); !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  const std::vector<std::string>& positional = flags.positional();
  if (positional.size() > 1 ||
      (!positional.empty() && positional[0] != "reshard")) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unknown job kind '", positional.back(),
                             "'; allowed: reshard (e.g. 'meshctl submit "
                             "reshard --shape ...' or 'meshctl submit -f "
                             "job.yaml')"));
  }
  if (positional.empty() && file.empty()) {
    return Fail(kCommand, kExitUsage,
                "missing job kind; use 'meshctl submit reshard --shape ...' "
                "or 'meshctl submit -f job.yaml'");
  }

  ReshardInput input;
  if (!file.empty()) {
    if (absl::Status status = LoadJobFile(file, &input); !status.ok()) {
      return Fail(kCommand, kExitUsage, status.message());
    }
  }
  if (flags.IsSet("name")) input.name = name;
  ApplyReshardFlags(flags, text, allow_overlap, &input);
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  if (!spec.ok()) return Fail(kCommand, kExitUsage, spec.status().message());

  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  if (NeedsTopology(input)) {
    absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
    if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
    absl::Status pinned = PinMeshes(cluster->topology(), input, &*spec);
    if (!pinned.ok()) return FailWithStatus(kCommand, pinned);
  }
  absl::StatusOr<v1::Job> job = (*client)->SubmitJob(*spec);
  if (!job.ok()) {
    return FailWithStatus(kCommand, AttributeServerError(job.status(), input));
  }
  const bool json = output == "json";
  if (!wait) {
    CommandResult result;
    if (json) {
      result.out = JobToJson(*job, /*details=*/false).dump() + "\n";
    } else {
      result.out = absl::StrCat(
          "job ", job->id(), " submitted (", JobStateName(job->state()),
          "); follow it with 'meshctl watch ", job->id(), "'\n");
    }
    return result;
  }
  if (!json) {
    context.Stream(absl::StrCat("job ", job->id(), " submitted: ",
                                DescribeReshard(spec->reshard()), "\n"));
  }
  absl::StatusOr<v1::Job> final_job =
      FollowJob(**client, job->id(), TimeoutOf(timeout_seconds),
                /*stream=*/!json, /*json_lines=*/false, context);
  if (!final_job.ok()) return FailWithStatus(kCommand, final_job.status());
  CommandResult result;
  if (json) {
    result.out = JobToJson(*final_job, /*details=*/true).dump() + "\n";
  } else {
    result.out = absl::StrCat(FinalLine(*final_job), "\n");
    if (const std::string meshes = DescribePlacedMeshes(*final_job);
        !meshes.empty()) {
      absl::StrAppend(&result.out, "placed: ", meshes, "\n");
    }
  }
  if (final_job->state() != v1::JOB_STATE_SUCCEEDED) {
    result.exit_code = kExitFailure;
    result.err = absl::StrCat(kCommand, ": ", FinalLine(*final_job), "\n");
  }
  return result;
}

CommandResult RunGetCommand(const std::vector<std::string>& args,
                            const CommandContext& context) {
  constexpr char kCommand[] = "meshctl get";
  std::string output = "table";
  ClientFlags client_flags;
  FlagSet flags("meshctl get ID",
                absl::StrCat("Shows one job: its spec, state, plan summary "
                             "and result.\n--output json prints it as one "
                             "object, with per-step timings.\n\n",
                             kControllerHelp, "\n\n", kExitCodesHelp));
  OutputFlag(flags, &output);
  std::string id;
  std::unique_ptr<ControllerClient> client;
  if (std::optional<CommandResult> end =
          StartJobIdCommand(kCommand, args, context, flags, client_flags,
                            nullptr, &id, &client)) {
    return *end;
  }
  absl::StatusOr<v1::Job> job = client->GetJob(id);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  CommandResult result;
  result.out = output == "json"
                   ? JobToJson(*job, /*details=*/true).dump() + "\n"
                   : RenderJobDetails(*job, NowUnix());
  return result;
}

CommandResult RunListCommand(const std::vector<std::string>& args,
                             const CommandContext& context) {
  constexpr char kCommand[] = "meshctl list";
  std::string output = "table";
  int limit = 0;
  ClientFlags client_flags;
  FlagSet flags(
      kCommand,
      absl::StrCat("Lists jobs, newest first. --output json prints "
                   "{\"jobs\": [...]}\nwith each job as 'meshctl get' prints "
                   "it, without the plan (the controller\nleaves plans out of "
                   "listings) and per-step timings: 'meshctl get ID'\nhas "
                   "both.\n\n",
                   kControllerHelp, "\n\n", kExitCodesHelp));
  flags.Int("limit", &limit, "N", "show at most N jobs (0 = all)");
  OutputFlag(flags, &output);
  client_flags.Register(flags);
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(kCommand, kExitUsage, parsed.message());
  if (!flags.positional().empty()) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unexpected argument '", flags.positional()[0],
                             "'; 'meshctl get ID' shows one job"));
  }
  if (limit < 0) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--limit: must be >= 0 (0 = all), got ", limit));
  }
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  absl::StatusOr<std::vector<v1::Job>> jobs = (*client)->ListJobs(limit);
  if (!jobs.ok()) return FailWithStatus(kCommand, jobs.status());
  CommandResult result;
  if (output == "json") {
    OrderedJson list = OrderedJson::array();
    for (const v1::Job& job : *jobs) {
      list.push_back(JobToJson(job, /*details=*/false));
    }
    result.out = OrderedJson{{"jobs", std::move(list)}}.dump() + "\n";
  } else {
    result.out = RenderJobList(*jobs, NowUnix());
  }
  return result;
}

CommandResult RunWatchCommand(const std::vector<std::string>& args,
                              const CommandContext& context) {
  constexpr char kCommand[] = "meshctl watch";
  std::string output = "table";
  double timeout_seconds = 0;
  ClientFlags client_flags;
  FlagSet flags(
      "meshctl watch ID",
      absl::StrCat(
          "Follows a job: one line per state change or progress step until\n"
          "it ends, then the final state. --output json prints one JSON\n"
          "object per event ({job_id, state, message, progress, time_unix})\n"
          "and then the job. Exit code 0 only if the job SUCCEEDED.\n\n",
          kControllerHelp, "\n\n", kExitCodesHelp));
  flags.Double("timeout", &timeout_seconds, "SECONDS",
               "give up after this long (0 = never)");
  OutputFlag(flags, &output);
  std::string id;
  std::unique_ptr<ControllerClient> client;
  if (std::optional<CommandResult> end = StartJobIdCommand(
          kCommand, args, context, flags, client_flags,
          [&] { return CheckTimeout(timeout_seconds); }, &id, &client)) {
    return *end;
  }
  const bool json = output == "json";
  absl::StatusOr<v1::Job> job =
      FollowJob(*client, id, TimeoutOf(timeout_seconds), /*stream=*/!json,
                /*json_lines=*/json, context);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  CommandResult result;
  result.out = json ? JobToJson(*job, /*details=*/false).dump() + "\n"
                    : absl::StrCat(FinalLine(*job), "\n");
  if (job->state() != v1::JOB_STATE_SUCCEEDED) {
    result.exit_code = kExitFailure;
    result.err = absl::StrCat(kCommand, ": ", FinalLine(*job), "\n");
  }
  return result;
}

CommandResult RunCancelCommand(const std::vector<std::string>& args,
                               const CommandContext& context) {
  constexpr char kCommand[] = "meshctl cancel";
  std::string output = "table";
  ClientFlags client_flags;
  FlagSet flags("meshctl cancel ID",
                absl::StrCat("Cancels a queued or running job (a running one "
                             "is aborted on its workers).\nA job that already "
                             "ended cannot be cancelled (exit code 1).\n\n",
                             kControllerHelp, "\n\n", kExitCodesHelp));
  OutputFlag(flags, &output);
  std::string id;
  std::unique_ptr<ControllerClient> client;
  if (std::optional<CommandResult> end =
          StartJobIdCommand(kCommand, args, context, flags, client_flags,
                            nullptr, &id, &client)) {
    return *end;
  }
  absl::StatusOr<v1::Job> job = client->CancelJob(id);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  CommandResult result;
  result.out = output == "json"
                   ? JobToJson(*job, /*details=*/false).dump() + "\n"
                   : absl::StrCat(FinalLine(*job), "\n");
  return result;
}

}  // namespace meshcast::cli
