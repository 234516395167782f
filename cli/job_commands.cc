#include "cli/job_commands.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "cli/client_flags.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/flags.h"
#include "cli/collective_input.h"
#include "cli/job_file.h"
#include "cli/job_format.h"
#include "cli/job_ref.h"
#include "cli/output_format.h"
#include "cli/reshard_input.h"
#include "cli/timeline_chart.h"
#include "cli/trace_events.h"
#include "planner/kinds/job_kind.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast::cli {
namespace {

constexpr char kSubmitDescription[] =
    "Submits a job to the controller and names its id (or, with --wait,\n"
    "follows it until it ends). KIND is one of:\n"
    "  reshard     move one tensor from a source device mesh and sharding\n"
    "              spec to a destination mesh and spec; the workers fill the\n"
    "              source tiles with a known pattern, move the bytes with the\n"
    "              chosen strategy and verify the destination elements\n"
    "  collective  run one collective (--op all_reduce, all_gather,\n"
    "              reduce_scatter, all_to_all or broadcast) of --bytes per\n"
    "              rank on --mesh, verified, and report algbw and busbw as\n"
    "              nccl-tests defines them, next to the bound the topology\n"
    "              allows: a check of the cluster's fabric\n"
    "The controller checks the spec (offline, meshctl checks it with the\n"
    "same planner library first) and places the meshes; the live cluster is\n"
    "the topology. 'meshctl plan KIND ...' predicts a job without running it.\n"
    "\n"
    "meshes (--src-mesh, --dst-mesh, --mesh):\n"
    "  2x4        2 hosts x 4 devices, placed by the controller (one mesh row\n"
    "             per host; source and destination on disjoint hosts unless\n"
    "             --allow-overlap)\n"
    "  2x4@1      pinned: hosts 1 and 2, the first 4 devices of each\n"
    "  8          a 1-D mesh: 8 devices of one host\n"
    "  --src-devices 0,1,4,5 --src-shape 2x2   (reshard) a device list\n"
    "specs: one entry per tensor dimension, R, S0, S1 or S01 (S0RR, S0,R,R).\n"
    "collective sizes (--bytes) count as nccl-tests does: the per-rank output\n"
    "of all_reduce and all_gather, the per-rank input of reduce_scatter, the\n"
    "per-rank send buffer of all_to_all, the buffer of broadcast: 256MiB,\n"
    "1.5GiB, 4096 (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB decimal).\n"
    "--verify full (default) checks every output element, sample a fixed\n"
    "pseudo-random subset (large benchmarks), off nothing.\n"
    "\n"
    "examples:\n"
    "  meshctl submit reshard --shape 64x64x256 --dtype int32 \\\n"
    "    --src-mesh 2x4 --src-spec S0RR --dst-mesh 2x4 --dst-spec RS0R --wait\n"
    "  meshctl submit collective --op all_reduce --mesh 2x4 --bytes 256MiB \\\n"
    "    --dtype float32 --verify sample --wait\n"
    "  meshctl submit -f job.yaml --strategy send_recv --wait\n"
    "\n"
    "job file (-f FILE, YAML or JSON; flags given too override its values):\n"
    "the JobSpec as protobuf's JSON mapping with proto field names, compact\n"
    "notations allowed as text (mesh 2x4@1, spec S0RR, dtype float32,\n"
    "verify sample):\n"
    "  name: fabric-check\n"
    "  verify: sample\n"
    "  collective:\n"
    "    op: all_reduce\n"
    "    mesh: {shape: [2, 4]}     # or 2x4, or 2x4@1\n"
    "    size: 256MiB\n"
    "    dtype: float32            # or DTYPE_FLOAT32\n"
    "    reduction: sum            # or max\n"
    "    iterations: 5\n"
    "or, for reshard, the compact form meshctl has always read:\n"
    "  name: my-job              # optional\n"
    "  kind: reshard             # optional\n"
    "  verify: full              # optional\n"
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
    "256], \"dtype\": \"int32\", \"src_mesh\": \"2x4\", ...}}. A reshard section\n"
    "with a \"tensor\" key is read as the JobSpec form.\n"
    "\n"
    "output: 'job ID submitted (QUEUED); follow it with ...' (table; for\n"
    "scripts: --output json | jq -r .id) or the job as one JSON object\n"
    "(--output json: id, name, state, message, progress, created_unix,\n"
    "started_unix, finished_unix, spec, plan, result{seconds, bytes_moved,\n"
    "bytes_delivered, elements_verified, mismatches, max_abs_error,\n"
    "metrics, ...}). With --wait, progress lines while it runs (table only)\n"
    "and the final job with its metrics; the exit code is 0 only if it\n"
    "SUCCEEDED.\n";

// How get, trace, watch and cancel take their job (job_ref.h).
constexpr char kJobRefHelp[] =
    "ID is the job's id (job-000042), its number (42, job-42) or a prefix\n"
    "of its id that only one job has.";

// --output (-o) for every job command.
void OutputFlag(FlagSet& flags, std::string* output) {
  AddOutputFlag(flags, output,
                "table: human-readable text (wide: the same); json: one "
                "JSON\nobject; yaml: the same data as YAML");
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

// What get, trace, watch and cancel share once their flags are registered:
// parse, --help, `check` of the parsed values (may be null), the one job ID
// argument, connect, and the job's full id from a number or prefix
// (ResolveJobId). Returns the CommandResult to end with (help or an error),
// or nullopt with `id` and `client` set.
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
  // A number or a unique prefix names the job too (job_ref.h).
  absl::StatusOr<std::string> resolved = ResolveJobId(**connected, *job_id);
  if (!resolved.ok()) return FailWithStatus(command, resolved.status());
  *id = *std::move(resolved);
  *client = *std::move(connected);
  return std::nullopt;
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
  flags.String("src-buffer", &text["src_buffer"], "NAME",
               "read the source tiles from the user buffer NAME that a\n"
               "process lent each source device's worker\n"
               "(docs/user_buffers.md; with --dst-buffer)");
  flags.String("dst-buffer", &text["dst_buffer"], "NAME",
               "write the destination tiles into the user buffer NAME");
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

// Flags of one kind only; the other kind's are refused by name.
constexpr const char* kReshardOnlyFlags[] = {
    "shape",    "src-mesh", "src-devices", "src-shape", "src-spec", "dst-mesh",
    "dst-devices", "dst-shape", "dst-spec", "strategy", "allow-overlap",
    "src-buffer", "dst-buffer"};
// The reshard of a JobSpec-form job file as ReshardInput text, so that
// flags override it field by field and the compact form's checks apply;
// origins name the file's keys.
ReshardInput ReshardInputFromSpec(const v1::ReshardSpec& reshard,
                                  const std::string& label) {
  ReshardInput input;
  input.file = label;
  const auto key = [&](absl::string_view field) {
    return absl::StrCat(label, ": reshard.", field);
  };
  if (reshard.has_tensor()) {
    if (reshard.tensor().shape_size() > 0) {
      input.Set("shape", absl::StrJoin(reshard.tensor().shape(), "x"),
                key("tensor.shape"));
    }
    if (reshard.tensor().dtype() != v1::DTYPE_UNSPECIFIED) {
      input.Set("dtype", DTypeText(reshard.tensor().dtype()),
                key("tensor.dtype"));
    }
  }
  for (const std::string side : {"src", "dst"}) {
    const v1::DeviceMesh& mesh =
        side == "src" ? reshard.src_mesh() : reshard.dst_mesh();
    const bool has = side == "src" ? reshard.has_src_mesh()
                                   : reshard.has_dst_mesh();
    if (!has) continue;
    const std::string field = side + "_mesh";
    if (mesh.devices_size() > 0) {
      input.Set(side + "_shape", absl::StrJoin(mesh.shape(), "x"),
                key(field + ".shape"));
      input.Set(side + "_devices", absl::StrJoin(mesh.devices(), ","),
                key(field + ".devices"));
    } else {
      std::string text = absl::StrJoin(mesh.shape(), "x");
      if (mesh.has_first_host() && mesh.first_host() >= 0) {
        absl::StrAppend(&text, "@", mesh.first_host());
      }
      input.Set(field, text, key(field));
    }
  }
  if (reshard.has_src_spec()) {
    input.Set("src_spec", reshard.src_spec().text(), key("src_spec.text"));
  }
  if (reshard.has_dst_spec()) {
    input.Set("dst_spec", reshard.dst_spec().text(), key("dst_spec.text"));
  }
  if (!reshard.strategy().empty()) {
    input.Set("strategy", reshard.strategy(), key("strategy"));
  }
  if (reshard.allow_overlap()) {
    input.Set("allow_overlap", "true", key("allow_overlap"));
  }
  if (!reshard.src_buffer().empty()) {
    input.Set("src_buffer", reshard.src_buffer(), key("src_buffer"));
  }
  if (!reshard.dst_buffer().empty()) {
    input.Set("dst_buffer", reshard.dst_buffer(), key("dst_buffer"));
  }
  return input;
}

}  // namespace

const std::vector<std::string>& FlagKinds() {
  static const auto* const kinds =
      new std::vector<std::string>{"reshard", "collective"};
  return *kinds;
}

// Final line of a job that ended: "job ID SUCCEEDED: message".
std::string FinalLine(const v1::Job& job) {
  return absl::StrCat("job ", EscapeForTerminal(job.id()), " ",
                      JobStateName(job.state()),
                      job.message().empty() ? "" : ": ",
                      EscapeForTerminal(job.message()));
}

// Follows a job until it ends, streaming each event as `events` says,
// then fetches and returns the final job.
absl::StatusOr<v1::Job> FollowJob(ControllerClient& client,
                                  const std::string& id, absl::Duration timeout,
                                  absl::string_view events,
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
      if (IsStructuredOutput(events)) {
        context.Stream(RenderStructuredDocument(EventToJson(event), events));
      } else if (!events.empty()) {
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


CommandResult RunSubmitCommand(const std::vector<std::string>& args,
                               const CommandContext& context) {
  constexpr char kCommand[] = "meshctl submit";
  std::map<std::string, std::string> text;
  bool allow_overlap = false;
  std::string name;
  std::string file_path;
  std::string verify = "full";
  bool wait = false;
  double timeout_seconds = 0;
  std::string output = "table";
  ClientFlags client_flags;
  FlagSet flags("meshctl submit KIND",
                absl::StrCat(kSubmitDescription, "\n", kControllerHelp, "\n\n",
                             kExitCodesHelp));
  flags.String("f", &file_path, "FILE",
               "job file, YAML or JSON (format below)");
  flags.String("file", &file_path, "FILE", "the same as -f");
  flags.String("name", &name, "NAME", "job name, shown by list and get");
  AddReshardFlags(flags, text, &allow_overlap);
  AddCollectiveFlags(flags, text);
  flags.Choice("verify", &verify, {"full", "sample", "off", "checksum"},
               "check every output element (full), a fixed pseudo-random\n"
               "subset (sample), none (off), or compare every tile's\n"
               "checksum with the sources' (checksum: for user buffers)");
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
  const std::vector<std::string>& kinds = FlagKinds();
  if (positional.size() > 1 ||
      (!positional.empty() &&
       std::find(kinds.begin(), kinds.end(), positional[0]) == kinds.end())) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unknown job kind '", positional.back(),
                             "'; allowed: reshard, collective (e.g. 'meshctl "
                             "submit collective --op all_reduce --mesh 2x4 "
                             "--bytes 256MiB' or 'meshctl submit -f "
                             "job.yaml')"));
  }
  if (positional.empty() && file_path.empty()) {
    return Fail(kCommand, kExitUsage,
                "missing job kind; use 'meshctl submit reshard --shape ...', "
                "'meshctl submit collective --op ...' or 'meshctl submit -f "
                "job.yaml'");
  }

  std::optional<JobFile> file;
  if (!file_path.empty()) {
    absl::StatusOr<JobFile> loaded = LoadJobSpecFile(file_path);
    if (!loaded.ok()) {
      return Fail(kCommand, kExitUsage, loaded.status().message());
    }
    file = *std::move(loaded);
  }
  const std::string kind = !positional.empty() ? positional[0] : file->kind;
  if (file.has_value() && file->kind != kind) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("-f: ", file_path, " describes a ", file->kind,
                             " job, not ", kind, "; drop '", kind,
                             "' or give a ", kind, " job file"));
  }
  // A flag of the other kind is a mistake, not something to ignore.
  const auto foreign_flag = [&]() -> std::optional<std::string> {
    if (kind != "reshard") {
      for (const char* flag : kReshardOnlyFlags) {
        if (flags.IsSet(flag)) return std::string(flag);
      }
    }
    if (kind != "collective") {
      for (const auto& [flag, field] : kCollectiveFlags) {
        if (flags.IsSet(flag)) return std::string(flag);
      }
    }
    return std::nullopt;
  }();
  if (foreign_flag.has_value()) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--", *foreign_flag, ": not a flag of ", kind,
                             " jobs; see 'meshctl submit --help'"));
  }

  v1::JobSpec spec;
  ReshardInput reshard_input;
  std::map<std::string, std::string> collective_origins;
  if (kind == "reshard") {
    if (file.has_value()) {
      reshard_input = file->compact
                          ? file->reshard
                          : ReshardInputFromSpec(file->spec.reshard(),
                                                 file->label);
    }
    ApplyReshardFlags(flags, text, allow_overlap, &reshard_input);
    absl::StatusOr<v1::JobSpec> built = BuildJobSpec(reshard_input);
    if (!built.ok()) {
      return Fail(kCommand, kExitUsage, built.status().message());
    }
    spec = *std::move(built);
  } else if (kind != "collective") {
    // Kinds without flags of their own come from a job file as they are;
    // the planner library checks them below.
    spec = file->spec;
  } else {
    absl::StatusOr<v1::CollectiveSpec> built =
        BuildCollectiveSpec(flags, text, file.has_value() ? &*file : nullptr,
                            &collective_origins);
    if (!built.ok()) {
      return Fail(kCommand, kExitUsage, built.status().message());
    }
    *spec.mutable_collective() = *std::move(built);
  }
  if (file.has_value() && file->name.has_value()) spec.set_name(*file->name);
  if (flags.IsSet("name")) spec.set_name(name);
  if (file.has_value() && file->verify.has_value()) {
    spec.set_verify(*file->verify);
  }
  if (flags.IsSet("verify")) {
    absl::StatusOr<v1::VerifyMode> mode = ParseVerifyMode(verify, "--verify");
    if (!mode.ok()) return FailWithStatus(kCommand, mode.status());
    spec.set_verify(*mode);
  }
  if (kind != "reshard") {
    absl::Status valid = AttributeCollectiveError(ValidateOffline(spec),
                                                  collective_origins);
    if (!valid.ok()) return FailWithStatus(kCommand, valid);
  }
  const auto attribute = [&](const absl::Status& status) {
    return kind == "reshard"
               ? AttributeServerError(status, reshard_input)
               : AttributeCollectiveError(status, collective_origins);
  };

  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  if (kind == "reshard" && NeedsTopology(reshard_input)) {
    absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
    if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
    absl::Status pinned = PinMeshes(cluster->topology(), reshard_input, &spec);
    if (!pinned.ok()) return FailWithStatus(kCommand, pinned);
  }
  absl::StatusOr<v1::Job> job = (*client)->SubmitJob(spec);
  if (!job.ok()) return FailWithStatus(kCommand, attribute(job.status()));
  const bool json = IsStructuredOutput(output);
  if (!wait) {
    CommandResult result;
    if (json) {
      result.out = RenderStructured(JobToJson(*job, /*details=*/false), output);
    } else {
      result.out = absl::StrCat(
          "job ", job->id(), " submitted (", JobStateName(job->state()),
          "); follow it with 'meshctl watch ", job->id(), "'\n");
    }
    return result;
  }
  if (!json) {
    context.Stream(absl::StrCat("job ", EscapeForTerminal(job->id()),
                                " submitted: ",
                                DescribeSpec(spec), "\n"));
  }
  absl::StatusOr<v1::Job> final_job =
      FollowJob(**client, job->id(), TimeoutOf(timeout_seconds),
                /*events=*/json ? "" : "table", context);
  if (!final_job.ok()) return FailWithStatus(kCommand, final_job.status());
  CommandResult result;
  if (json) {
    result.out = RenderStructured(JobToJson(*final_job, /*details=*/true),
                                  output);
  } else {
    result.out = absl::StrCat(FinalLine(*final_job), "\n");
    if (const std::string meshes = DescribePlacedMeshes(*final_job);
        !meshes.empty()) {
      absl::StrAppend(&result.out, "placed: ", meshes, "\n");
    }
    // A collective's figures (busbw beside its bound) are the point of it.
    absl::StrAppend(&result.out, RenderJobMetrics(final_job->result()));
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
  bool timeline = false;
  ClientFlags client_flags;
  FlagSet flags(
      "meshctl get ID",
      absl::StrCat(
          "Shows one job: its spec, state, placement, plan summary and\n"
          "result, with the figures of its kind (a collective's algbw and\n"
          "busbw, in GB/s as nccl-tests prints them, busbw beside the bound\n"
          "the topology allows). --output json prints it as one object, with\n"
          "result.metrics (name -> value in base units) and per-step timings.\n"
          "--timeline adds a text Gantt chart: one row per (worker, device),\n"
          "each step a bar over the job's time (its op's letter), within 100\n"
          "columns. 'meshctl trace ID -o trace.json' writes the same timings\n"
          "for Perfetto or chrome://tracing, with the predicted timeline.\n\n",
          kJobRefHelp, "\n\n", kControllerHelp, "\n\n", kExitCodesHelp));
  OutputFlag(flags, &output);
  flags.Bool("timeline", &timeline,
             "add a text Gantt chart of the steps per worker and device");
  std::string id;
  std::unique_ptr<ControllerClient> client;
  if (std::optional<CommandResult> end = StartJobIdCommand(
          kCommand, args, context, flags, client_flags,
          [&]() -> absl::Status {
            if (timeline && IsStructuredOutput(output)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "--timeline: draws text; with --output ", output,
                  " the steps' start_seconds and end_seconds are in "
                  "result.steps"));
            }
            return absl::OkStatus();
          },
          &id, &client)) {
    return *end;
  }
  absl::StatusOr<v1::Job> job = client->GetJob(id);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  CommandResult result;
  result.out = IsStructuredOutput(output)
                   ? RenderStructured(JobToJson(*job, /*details=*/true), output)
                   : RenderJobDetails(*job, NowUnix());
  if (timeline) absl::StrAppend(&result.out, "\n", RenderTimeline(*job));
  return result;
}

CommandResult RunTraceCommand(const std::vector<std::string>& args,
                              const CommandContext& context) {
  constexpr char kCommand[] = "meshctl trace";
  std::string path;
  ClientFlags client_flags;
  FlagSet flags(
      "meshctl trace ID",
      absl::StrCat(
          "Writes a job's timeline as Chrome trace-event JSON, which\n"
          "https://ui.perfetto.dev and chrome://tracing open: every step a\n"
          "complete event (\"ph\": \"X\", ts and dur in microseconds from the\n"
          "job's start barrier, name '<op> #<step>', args with its bytes) on\n"
          "process = worker, thread = device, and beside them a process named\n"
          "\"predicted\" with the planner's simulated start and finish of every\n"
          "step on each of its devices. Metadata events name the processes\n"
          "and threads. Without -o the JSON goes to stdout.\n\n"
          "example:\n"
          "  meshctl trace job-000001 -o trace.json\n\n",
          kJobRefHelp, "\n\n", kControllerHelp, "\n\n", kExitCodesHelp));
  flags.String("o", &path, "FILE", "write the trace here (default: stdout)");
  flags.String("out", &path, "FILE", "the same as -o");
  std::string id;
  std::unique_ptr<ControllerClient> client;
  if (std::optional<CommandResult> end =
          StartJobIdCommand(kCommand, args, context, flags, client_flags,
                            nullptr, &id, &client)) {
    return *end;
  }
  absl::StatusOr<v1::Job> job = client->GetJob(id);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  const OrderedJson trace = JobToTraceEvents(*job);
  int measured = 0, predicted = 0;
  for (const OrderedJson& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    (event["cat"] == "measured" ? measured : predicted) += 1;
  }
  if (measured + predicted == 0) {
    return Fail(kCommand, kExitFailure,
                absl::StrCat("job ", id, " (", JobStateName(job->state()),
                             ") has no step timings and no predicted "
                             "timeline yet; trace it once it has run"));
  }
  CommandResult result;
  if (path.empty() || path == "-") {
    result.out = trace.dump() + "\n";
    return result;
  }
  std::ofstream out(path);
  out << trace.dump() << "\n";
  out.close();
  if (!out) {
    return Fail(kCommand, kExitFailure,
                absl::StrCat("-o: cannot write '", path, "'"));
  }
  result.out = absl::StrCat(
      "wrote ", path, ": job ", id, ", ", measured, " measured and ",
      predicted,
      " predicted step events; open it in https://ui.perfetto.dev or "
      "chrome://tracing\n");
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
      absl::StrCat("Lists jobs, newest first. -o wide adds columns (kind, "
                   "placed\nmeshes, devices, owner, predicted and measured "
                   "seconds).\n--output json (-o json) prints "
                   "{\"jobs\": [...]}\nwith each job as 'meshctl get' prints "
                   "it, without the plan (the controller\nleaves plans out of "
                   "listings) and per-step timings: 'meshctl get ID'\nhas "
                   "both.\n\n",
                   kControllerHelp, "\n\n", kExitCodesHelp));
  flags.Int("limit", &limit, "N", "show at most N jobs (0 = all)");
  AddOutputFlag(flags, &output,
                "table: one row per job; wide: also its kind, placed meshes,\n"
                "devices, owner, predicted and measured seconds; json:\n"
                "{\"jobs\": [...]}; yaml: the same data as YAML");
  client_flags.Register(flags);
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "'meshctl get ID' shows one job")) {
    return *done;
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
  if (IsStructuredOutput(output)) {
    OrderedJson list = OrderedJson::array();
    for (const v1::Job& job : *jobs) {
      list.push_back(JobToJson(job, /*details=*/false));
    }
    result.out =
        RenderStructured(OrderedJson{{"jobs", std::move(list)}}, output);
  } else {
    result.out = RenderJobList(*jobs, NowUnix(), /*wide=*/output == "wide");
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
          kJobRefHelp, "\n\n", kControllerHelp, "\n\n", kExitCodesHelp));
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
  const bool json = IsStructuredOutput(output);
  absl::StatusOr<v1::Job> job =
      FollowJob(*client, id, TimeoutOf(timeout_seconds),
                /*events=*/json ? output : "table", context);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  CommandResult result;
  result.out = json ? RenderStructuredDocument(
                         JobToJson(*job, /*details=*/false), output)
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
                             kJobRefHelp, "\n\n", kControllerHelp, "\n\n",
                             kExitCodesHelp));
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
  result.out =
      IsStructuredOutput(output)
          ? RenderStructured(JobToJson(*job, /*details=*/false), output)
          : absl::StrCat(FinalLine(*job), "\n");
  return result;
}

}  // namespace meshcast::cli
