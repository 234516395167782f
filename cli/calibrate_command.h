// `meshctl calibrate`: measures the live cluster's collectives per class of
// links with a `calibrate` job (planner/kinds/calibrate/calibrate_kind.h)
// and prints the fit the controller now plans with; `--show` prints the
// stored fit without running anything.
//
//   meshctl calibrate                     # mesh: every host x its devices
//   meshctl calibrate --mesh 2x4 --ops all_to_all,all_gather --repeat 5
//   meshctl calibrate --show [-o json]
//
// The job runs like any other (queued, placed, progress on the terminal,
// verified with --verify sample by default); the command exits non-zero
// unless it SUCCEEDED. Flag errors name the flag and the allowed values.
//
// Thread safety: reentrant.
#ifndef MESHCAST_CLI_CALIBRATE_COMMAND_H_
#define MESHCAST_CLI_CALIBRATE_COMMAND_H_

#include <string>
#include <vector>

#include "cli/command.h"
#include "meshcast/v1/types.pb.h"

namespace meshcast::cli {

CommandResult RunCalibrateCommand(const std::vector<std::string>& args,
                                  const CommandContext& context);

// The fitted table: one row per (op, link class) with alpha, the bandwidth
// 1 / beta, the model's alpha and bandwidth, and measured / model time at
// 1 MiB; "no calibration stored ..." when `calibration` is empty.
std::string RenderCalibration(
    const google::protobuf::RepeatedPtrField<v1::CollectiveCalibration>&
        calibration);

inline constexpr char kCalibrateCommandSummary[] =
    "measure the collectives' alpha-beta per link class; --show the fit";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CALIBRATE_COMMAND_H_
