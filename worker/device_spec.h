// DeviceSpec: the worker's --devices flag.
//
//   cpu:N       N virtual CPU devices (N >= 1)
//   cpu         4 virtual CPU devices
//   cuda        one logical device per visible GPU
//   cuda:0,2    GPUs 0 and 2 (CUDA ordinals), one logical device each
//   cuda:0x4    four logical (virtual) devices on GPU 0; transfers between
//               them are device-to-device copies. Items mix: cuda:0x2,1x2.
//   (empty)     the default: cpu:4
//
// Parsing is pure: "cuda" leaves the GPU list open (all_visible_gpus) until
// ResolveGpuDevices learns how many GPUs the CUDA runtime sees.
//
//   ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(flag));
//   ASSIGN_OR_RETURN(spec, ResolveGpuDevices(spec, cuda::GpuCount()));
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_DEVICE_SPEC_H_
#define MESHCAST_WORKER_DEVICE_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::worker {

struct DeviceSpec {
  std::string kind = "cpu";  // "cpu" or "cuda", as reported to the controller
  int count = 4;             // logical devices
  // kind "cuda": the CUDA ordinal behind logical device i (count entries once
  // resolved). A GPU appears several times for virtual devices (cuda:0x4).
  std::vector<int> gpus;
  // kind "cuda" written without ids: every visible GPU, filled in by
  // ResolveGpuDevices (count is 0 until then).
  bool all_visible_gpus = false;
};

inline constexpr int kDefaultCpuDevices = 4;
inline constexpr int kMaxCpuDevices = 1024;
// Logical devices per worker on GPUs (virtual devices included).
inline constexpr int kMaxGpuLogicalDevices = 1024;

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);

// For kind "cuda": fills in all visible GPUs, or checks that every listed
// ordinal is below `visible_gpus`. FailedPrecondition naming --devices when
// a GPU is missing. Other kinds are returned unchanged.
absl::StatusOr<DeviceSpec> ResolveGpuDevices(DeviceSpec spec, int visible_gpus);

// The spec back in flag syntax, e.g. "cpu:4", "cuda:0x4", "cuda:0,2".
std::string DeviceSpecToString(const DeviceSpec& spec);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_DEVICE_SPEC_H_
