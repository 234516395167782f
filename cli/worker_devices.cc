#include "cli/worker_devices.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshcast::cli {
namespace {

// The worker's own limits (worker/device_spec.h), so that meshctl refuses
// what the worker would refuse.
constexpr int kMaxDevicesPerWorker = 1024;
constexpr int kMaxGpuOrdinal = 1023;

constexpr char kAccepted[] =
    "expected cpu:N (N virtual CPU devices, 1..1024), cuda (every visible "
    "GPU), cuda:ID[,ID...] (CUDA ordinals) or cuda:IDxK (K devices on GPU "
    "ID), e.g. cpu:4, cuda, cuda:0,1, cuda:0x4";

absl::Status Bad(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--devices: '", spec, "': ", why, "; ", kAccepted));
}

bool ParseBounded(absl::string_view text, int low, int high, int* value) {
  return !text.empty() && absl::ascii_isdigit(text[0]) &&
         absl::SimpleAtoi(text, value) && *value >= low && *value <= high;
}

}  // namespace

absl::StatusOr<WorkerDevices> ParseWorkerDevices(absl::string_view spec) {
  const absl::string_view text = absl::StripAsciiWhitespace(spec);
  WorkerDevices devices;
  devices.spec = std::string(text);
  if (text == "cpu") {
    devices.kind = "cpu";
    devices.count = kDefaultCpuDevicesPerWorker;
    return devices;
  }
  if (text == "cuda") {
    devices.kind = "cuda";
    devices.count = 0;  // the worker counts the visible GPUs
    return devices;
  }
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "cpu:")) {
    devices.kind = "cpu";
    if (!ParseBounded(rest, 1, kMaxDevicesPerWorker, &devices.count)) {
      return Bad(spec, absl::StrCat("N must be an integer in [1, ",
                                    kMaxDevicesPerWorker, "]"));
    }
    return devices;
  }
  if (absl::ConsumePrefix(&rest, "cuda:")) {
    devices.kind = "cuda";
    if (rest.empty()) return Bad(spec, "missing GPU ids after 'cuda:'");
    for (absl::string_view item : absl::StrSplit(rest, ',')) {
      absl::string_view id = item;
      int copies = 1;
      if (const size_t x = item.find('x'); x != absl::string_view::npos) {
        id = item.substr(0, x);
        if (!ParseBounded(item.substr(x + 1), 1, kMaxDevicesPerWorker,
                          &copies)) {
          return Bad(
              spec, absl::StrCat("K in '", item, "' must be an integer in [1, ",
                                 kMaxDevicesPerWorker, "]"));
        }
      }
      int ordinal = 0;
      if (!ParseBounded(id, 0, kMaxGpuOrdinal, &ordinal)) {
        return Bad(spec,
                   absl::StrCat("GPU id '", id, "' must be an integer in [0, ",
                                kMaxGpuOrdinal, "]"));
      }
      devices.count += copies;
      if (devices.count > kMaxDevicesPerWorker) {
        return Bad(spec, absl::StrCat("more than ", kMaxDevicesPerWorker,
                                      " devices per worker"));
      }
    }
    return devices;
  }
  return Bad(spec, "unknown device kind");
}

absl::StatusOr<WorkerDevices> ResolveWorkerDevices(
    absl::string_view devices_spec, int devices_per_worker,
    bool devices_per_worker_given) {
  if (devices_per_worker < 1 || devices_per_worker > kMaxDevicesPerWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices-per-worker: must be 1..", kMaxDevicesPerWorker,
                     ", got ", devices_per_worker));
  }
  if (devices_spec.empty()) {
    return ParseWorkerDevices(absl::StrCat("cpu:", devices_per_worker));
  }
  absl::StatusOr<WorkerDevices> devices = ParseWorkerDevices(devices_spec);
  if (!devices.ok()) return devices.status();
  if (devices_per_worker_given &&
      (devices->kind != "cpu" || devices->count != devices_per_worker)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices ", devices->spec, " and --devices-per-worker ",
        devices_per_worker,
        " disagree; --devices-per-worker K is short for --devices cpu:K, so "
        "give only --devices"));
  }
  return devices;
}

}  // namespace meshcast::cli
