#include "util/flags_usage.h"

#include <string>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace meshcast {
namespace {

// Directories that define meshcast flags. Matched as whole path components,
// because flags record __FILE__ as the compiler saw it: absolute in a build
// tree (/work/main/controller/main.cc), possibly relative elsewhere.
constexpr absl::string_view kProjectDirs[] = {
    "controller", "worker", "util", "security", "cli", "planner"};

}  // namespace

bool IsMeshcastFlagsFile(absl::string_view path) {
  // Abseil's own flags (e.g. --flagfile) live under .../absl/...; they are
  // what --helpfull is for.
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "absl") return false;
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    for (absl::string_view dir : kProjectDirs) {
      if (part == dir) return true;
    }
  }
  return false;
}

void InstallMeshcastFlagsUsage() {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = &IsMeshcastFlagsFile;
  config.contains_helpshort_flags = &IsMeshcastFlagsFile;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace meshcast
