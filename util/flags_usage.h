// Flags usage: makes `--help` of the meshcast daemons list their own flags.
//
// Abseil's --help shows only the flags defined in a file named after the
// program (meshcast-controller.cc, ...). The daemons define their flags in
// main.cc and in their libraries, so by default --help prints "No flags
// matched". InstallMeshcastFlagsUsage() replaces that filter with one that
// accepts the project's source directories, so --help and --helpshort list
// every meshcast flag and none of Abseil's own.
//
//   int main(int argc, char** argv) {
//     meshcast::InstallMeshcastFlagsUsage();  // before ParseCommandLine
//     absl::ParseCommandLine(argc, argv);
//
// Contract: call once, before absl::ParseCommandLine; later calls replace
// the configuration with the same one. IsMeshcastFlagsFile is the filter
// itself, exposed for tests: true for a path with a directory component of
// the project (controller, worker, util, security, cli, planner), false for
// anything else (Abseil, gRPC, system headers).
//
// Errors: none. Thread safety: InstallMeshcastFlagsUsage must run before
// other threads read flags; IsMeshcastFlagsFile is pure.
#ifndef MESHCAST_UTIL_FLAGS_USAGE_H_
#define MESHCAST_UTIL_FLAGS_USAGE_H_

#include "absl/strings/string_view.h"

namespace meshcast {

bool IsMeshcastFlagsFile(absl::string_view path);

void InstallMeshcastFlagsUsage();

}  // namespace meshcast

#endif  // MESHCAST_UTIL_FLAGS_USAGE_H_
