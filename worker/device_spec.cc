#include "worker/device_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace meshcast::worker {

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  DeviceSpec spec;
  if (text.empty() || text == "cpu") {
    spec.count = kDefaultCpuDevices;
    return spec;
  }
  if (absl::StartsWith(text, "cuda")) {
    return absl::UnimplementedError(absl::StrCat(
        "--devices=", text,
        ": GPU devices are not implemented in this worker yet; use "
        "--devices=cpu:N"));
  }
  absl::string_view count = text;
  if (absl::ConsumePrefix(&count, "cpu:")) {
    int n = 0;
    if (!absl::SimpleAtoi(count, &n) || n < 1 || n > kMaxCpuDevices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--devices=", text, ": N in cpu:N must be an integer in [1, ",
          kMaxCpuDevices, "]"));
    }
    spec.count = n;
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--devices=", text,
                   ": expected cpu:N (virtual CPU devices), cpu, or "
                   "cuda[:ids] (not implemented yet)"));
}

}  // namespace meshcast::worker
