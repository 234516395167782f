#include "cli/calibrate_command.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/client_flags.h"
#include "cli/collective_input.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/flags.h"
#include "cli/job_commands.h"
#include "cli/job_file.h"
#include "cli/job_format.h"
#include "cli/output_format.h"
#include "cli/text_table.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/job_kind.h"
#include "planner/topology.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast::cli {
namespace {

constexpr char kCommand[] = "meshctl calibrate";

constexpr char kDescription[] =
    "Measures how long all-to-all, all-gather, reduce-scatter and all-reduce\n"
    "take on this cluster, inside a host (the devices of one host) and\n"
    "between hosts (one device per host), over a range of sizes, and fits\n"
    "t = alpha + beta x bytes per op and link class. The controller stores\n"
    "the fit (it survives restarts) and corrects every later plan's\n"
    "prediction of those collectives with it, so that `auto` choices\n"
    "(moe schedules, tp_overlap modes, ...) follow the live links rather\n"
    "than the nominal figures. Runs as a `calibrate` job: it waits for\n"
    "its devices like any job and is listed by `meshctl list`.\n"
    "\n"
    "output: progress, then the fitted table: per op and link class the\n"
    "ranks measured, alpha, the bandwidth 1/beta, the model's alpha and\n"
    "bandwidth before calibration, and measured / model time of 1 MiB.\n"
    "--show prints the stored table and runs nothing. --output json: the\n"
    "job (with --show: {calibration: [{op, link_class, ranks,\n"
    "alpha_seconds, beta_seconds_per_byte, model_alpha_seconds,\n"
    "model_beta_seconds_per_byte, job_id}]}).\n";

std::string Bandwidth(double beta) {
  return beta > 0 ? absl::StrFormat("%.3g GB/s", 1e-9 / beta) : "-";
}

OrderedJson CalibrationToJson(
    const google::protobuf::RepeatedPtrField<v1::CollectiveCalibration>& all) {
  OrderedJson rows = OrderedJson::array();
  for (const v1::CollectiveCalibration& c : all) {
    rows.push_back({{"op", c.op()},
                    {"link_class", c.link_class()},
                    {"ranks", c.ranks()},
                    {"alpha_seconds", c.alpha_seconds()},
                    {"beta_seconds_per_byte", c.beta_seconds_per_byte()},
                    {"model_alpha_seconds", c.model_alpha_seconds()},
                    {"model_beta_seconds_per_byte",
                     c.model_beta_seconds_per_byte()},
                    {"job_id", c.job_id()}});
  }
  return OrderedJson{{"calibration", rows}};
}

// The calibrate spec of the flags; the mesh defaults to the whole cluster.
absl::StatusOr<v1::JobSpec> SpecOf(const std::string& mesh,
                                   const std::string& ops,
                                   const std::string& min_size,
                                   const std::string& max_size, int points,
                                   int repeat, const std::string& verify,
                                   const v1::Topology& topology) {
  v1::JobSpec spec;
  spec.set_name("calibrate");
  v1::CalibrateSpec& c = *spec.mutable_calibrate();
  if (mesh.empty()) {
    if (topology.num_hosts() < 1) {
      return absl::FailedPreconditionError(
          "the cluster has no workers yet; start some, or give --mesh");
    }
    c.mutable_mesh()->add_shape(topology.num_hosts());
    c.mutable_mesh()->add_shape(topology.devices_per_host());
  } else {
    absl::StatusOr<std::pair<int, int>> shape = ParseClusterShape(mesh);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mesh: ", shape.status().message(), " (e.g. 2x4: hosts x devices)"));
    }
    c.mutable_mesh()->add_shape(shape->first);
    c.mutable_mesh()->add_shape(shape->second);
  }
  for (absl::string_view op : absl::StrSplit(ops, ',', absl::SkipEmpty())) {
    c.add_ops(std::string(op));
  }
  c.set_min_size(min_size);
  c.set_max_size(max_size);
  c.set_points(points);
  c.set_repeat(repeat);
  ASSIGN_OR_RETURN(const v1::VerifyMode mode,
                   ParseVerifyMode(verify, "--verify"));
  spec.set_verify(mode);
  return spec;
}

}  // namespace

std::string RenderCalibration(
    const google::protobuf::RepeatedPtrField<v1::CollectiveCalibration>&
        calibration) {
  if (calibration.empty()) {
    return "no calibration stored: plans use the topology's link figures; "
           "run 'meshctl calibrate'\n";
  }
  TextTable table({"op", "links", "ranks", "alpha", "bandwidth",
                   "model alpha", "model bandwidth", "1 MiB / model", "job"},
                  {TextTable::kLeft, TextTable::kLeft});
  for (const v1::CollectiveCalibration& c : calibration) {
    const double mib = 1 << 20;
    const double measured = c.alpha_seconds() + mib * c.beta_seconds_per_byte();
    const double model =
        c.model_alpha_seconds() + mib * c.model_beta_seconds_per_byte();
    table.AddRow({c.op(), c.link_class(), absl::StrCat(c.ranks()),
                  FormatSeconds(c.alpha_seconds()),
                  Bandwidth(c.beta_seconds_per_byte()),
                  FormatSeconds(c.model_alpha_seconds()),
                  Bandwidth(c.model_beta_seconds_per_byte()),
                  model > 0 ? absl::StrFormat("%.2fx", measured / model) : "-",
                  c.job_id()});
  }
  return table.Render();
}

CommandResult RunCalibrateCommand(const std::vector<std::string>& args,
                                  const CommandContext& context) {
  bool show = false;
  std::string mesh, ops, min_size = "64KiB", max_size = "16MiB";
  std::string verify = "sample", output = "table";
  int points = 4, repeat = 3;
  double timeout_seconds = 0;
  ClientFlags client_flags;
  FlagSet flags(kCommand, absl::StrCat(kDescription, "\n", kControllerHelp,
                                       "\n\n", kExitCodesHelp));
  flags.Bool("show", &show, "print the stored fit; run nothing");
  flags.String("mesh", &mesh, "HxD",
               "hosts x devices measured (default: every host x its "
               "devices);\nintra-host on the first host, inter-host on the "
               "first device of each");
  flags.String("ops", &ops, "OP,...",
               "all_to_all, all_gather, reduce_scatter, all_reduce (default: "
               "all)");
  flags.String("min-size", &min_size, "SIZE", "smallest per-rank size");
  flags.String("max-size", &max_size, "SIZE", "largest per-rank size");
  flags.Int("points", &points, "N", "sizes from min to max (geometric), >= 2");
  flags.Int("repeat", &repeat, "N", "runs per size; the median is fitted");
  flags.Choice("verify", &verify, {"full", "sample", "off"},
               "check of the collectives' outputs");
  flags.Double("timeout", &timeout_seconds, "SECONDS",
               "give up waiting after this long (0 = never)");
  AddOutputFlag(flags, &output,
                "table: human-readable text (wide: the same); json: one "
                "JSON\nobject; yaml: the same data as YAML");
  client_flags.Register(flags);
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "see 'meshctl calibrate --help'")) {
    return *done;
  }
  if (!(timeout_seconds >= 0)) {
    return Fail(kCommand, kExitUsage,
                "--timeout: must be >= 0 seconds (0 = no limit)");
  }
  const bool json = IsStructuredOutput(output);
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
  if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
  if (show) {
    CommandResult result;
    result.out =
        json ? RenderStructured(
                   CalibrationToJson(cluster->topology().calibration()), output)
             : RenderCalibration(cluster->topology().calibration());
    return result;
  }
  absl::StatusOr<v1::JobSpec> spec =
      SpecOf(mesh, ops, min_size, max_size, points, repeat, verify,
             cluster->topology());
  if (spec.ok()) {
    if (absl::Status valid = ValidateOffline(*spec); !valid.ok()) {
      spec = valid;
    }
  }
  if (!spec.ok()) return FailWithStatus(kCommand, spec.status());
  absl::StatusOr<v1::Job> job = (*client)->SubmitJob(*spec);
  if (!job.ok()) return FailWithStatus(kCommand, job.status());
  if (!json) {
    context.Stream(absl::StrCat("job ", EscapeForTerminal(job->id()),
                                " submitted: ", DescribeSpec(*spec), "\n"));
  }
  absl::StatusOr<v1::Job> final_job = FollowJob(
      **client, job->id(),
      timeout_seconds > 0 ? absl::Seconds(timeout_seconds)
                          : absl::InfiniteDuration(),
      /*events=*/json ? "" : "table", context);
  if (!final_job.ok()) return FailWithStatus(kCommand, final_job.status());
  CommandResult result;
  if (json) {
    result.out = RenderStructured(JobToJson(*final_job, /*details=*/true),
                                  output);
  } else {
    result.out = absl::StrCat(FinalLine(*final_job), "\n");
    absl::StatusOr<const JobKind*> kind = FindJobKind(*spec);
    if (kind.ok() && final_job->state() == v1::JOB_STATE_SUCCEEDED) {
      google::protobuf::RepeatedPtrField<v1::CollectiveCalibration> fits;
      for (CollectiveCalibration& c :
           (*kind)->Calibration(*spec, final_job->result())) {
        c.job_id = final_job->id();
        *fits.Add() = CalibrationToProto(c);
      }
      absl::StrAppend(&result.out, RenderCalibration(fits));
    }
  }
  if (final_job->state() != v1::JOB_STATE_SUCCEEDED) {
    result.exit_code = kExitFailure;
    result.err = absl::StrCat(kCommand, ": ", FinalLine(*final_job), "\n");
  }
  return result;
}

}  // namespace meshcast::cli
