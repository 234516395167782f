#include "worker/device_spec.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshcast::worker {
namespace {

constexpr int kMaxGpuOrdinal = 1023;

absl::Status BadCudaSpec(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--devices=", text, ": ", why,
      "; expected cuda (every visible GPU), cuda:ID[,ID...] (CUDA ordinals) "
      "or cuda:IDxK (K logical devices on GPU ID), e.g. cuda:0,2 or "
      "cuda:0x4"));
}

absl::StatusOr<DeviceSpec> ParseCudaSpec(absl::string_view text) {
  DeviceSpec spec;
  spec.kind = "cuda";
  spec.gpus.clear();
  absl::string_view list = text;
  absl::ConsumePrefix(&list, "cuda");
  if (list.empty()) {
    spec.all_visible_gpus = true;
    spec.count = 0;
    return spec;
  }
  if (!absl::ConsumePrefix(&list, ":") || list.empty()) {
    return BadCudaSpec(text, "missing GPU ids after 'cuda:'");
  }
  absl::flat_hash_set<int> seen;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    item = absl::StripAsciiWhitespace(item);
    absl::string_view id_text = item;
    int copies = 1;
    const size_t x = item.find('x');
    if (x != absl::string_view::npos) {
      id_text = item.substr(0, x);
      if (!absl::SimpleAtoi(item.substr(x + 1), &copies) || copies < 1 ||
          copies > kMaxGpuLogicalDevices) {
        return BadCudaSpec(
            text, absl::StrCat("K in '", item, "' must be an integer in [1, ",
                               kMaxGpuLogicalDevices, "]"));
      }
    }
    int id = 0;
    if (!absl::SimpleAtoi(id_text, &id) || id < 0 || id > kMaxGpuOrdinal) {
      return BadCudaSpec(text, absl::StrCat("GPU id '", id_text,
                                            "' must be an integer in [0, ",
                                            kMaxGpuOrdinal, "]"));
    }
    if (!seen.insert(id).second) {
      return BadCudaSpec(
          text, absl::StrCat("GPU ", id,
                             " is listed twice (write IDxK for K logical "
                             "devices on one GPU)"));
    }
    if (spec.gpus.size() + copies > size_t{kMaxGpuLogicalDevices}) {
      return BadCudaSpec(text, absl::StrCat("more than ", kMaxGpuLogicalDevices,
                                            " logical devices"));
    }
    spec.gpus.insert(spec.gpus.end(), copies, id);
  }
  spec.count = static_cast<int>(spec.gpus.size());
  return spec;
}

}  // namespace

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  DeviceSpec spec;
  if (text.empty() || text == "cpu") {
    spec.count = kDefaultCpuDevices;
    return spec;
  }
  if (absl::StartsWith(text, "cuda")) return ParseCudaSpec(text);
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
                   ": expected cpu:N (virtual CPU devices), cpu, cuda, "
                   "cuda:ID[,ID...] or cuda:IDxK"));
}

absl::StatusOr<DeviceSpec> ResolveGpuDevices(DeviceSpec spec,
                                             int visible_gpus) {
  if (spec.kind != "cuda") return spec;
  if (visible_gpus <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--devices=", DeviceSpecToString(spec),
                     ": no CUDA GPU is visible to this process (check the "
                     "driver, nvidia-smi and CUDA_VISIBLE_DEVICES)"));
  }
  if (spec.all_visible_gpus) {
    spec.gpus.clear();
    for (int gpu = 0; gpu < visible_gpus; ++gpu) spec.gpus.push_back(gpu);
    spec.count = visible_gpus;
    spec.all_visible_gpus = false;
    return spec;
  }
  for (int gpu : spec.gpus) {
    if (gpu >= visible_gpus) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--devices=", DeviceSpecToString(spec), ": GPU ", gpu,
          " is not visible (", visible_gpus, " visible GPU",
          visible_gpus == 1 ? "" : "s", ": ids 0..", visible_gpus - 1, ")"));
    }
  }
  return spec;
}

std::string DeviceSpecToString(const DeviceSpec& spec) {
  if (spec.kind != "cuda") return absl::StrCat(spec.kind, ":", spec.count);
  if (spec.all_visible_gpus) return "cuda";
  std::vector<std::string> items;
  for (size_t i = 0; i < spec.gpus.size();) {
    size_t j = i;
    while (j < spec.gpus.size() && spec.gpus[j] == spec.gpus[i]) ++j;
    items.push_back(j - i == 1 ? absl::StrCat(spec.gpus[i])
                               : absl::StrCat(spec.gpus[i], "x", j - i));
    i = j;
  }
  return absl::StrCat("cuda:", absl::StrJoin(items, ","));
}

}  // namespace meshcast::worker
