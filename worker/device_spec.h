// DeviceSpec: the worker's --devices flag.
//
//   cpu:N   N virtual CPU devices (N >= 1)
//   cpu     4 virtual CPU devices
//   cuda, cuda:0,2, cuda:0x4   GPUs (issue 6; refused for now with a clear
//                              error: this worker does not drive GPUs yet)
//   (empty) the default: cpu:4
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_DEVICE_SPEC_H_
#define MESHCAST_WORKER_DEVICE_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::worker {

struct DeviceSpec {
  std::string kind = "cpu";  // as reported to the controller
  int count = 4;
};

inline constexpr int kDefaultCpuDevices = 4;
inline constexpr int kMaxCpuDevices = 1024;

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_DEVICE_SPEC_H_
