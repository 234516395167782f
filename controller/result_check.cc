#include "controller/result_check.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace meshcast {
namespace {

int64_t ElementsOfBox(const v1::Buffer& buffer) {
  int64_t n = 1;
  for (const v1::Interval& i : buffer.box()) {
    n *= std::max<int64_t>(0, i.end() - i.begin());
  }
  return n;
}

// Elements of the destination buffers on the worker's own devices: a
// program also holds other workers' buffers (the reference closure), which
// the worker does not verify.
int64_t OwnDestinationElements(const v1::WorkerProgram& program) {
  const absl::flat_hash_set<int32_t> local(program.local_devices().begin(),
                                           program.local_devices().end());
  int64_t total = 0;
  for (const v1::Buffer& buffer : program.plan().buffers()) {
    // A user buffer holds the user's values, which the worker cannot
    // check (worker/buffer_set.h).
    if (buffer.role() == v1::Buffer::ROLE_DESTINATION &&
        buffer.user_buffer().empty() && local.contains(buffer.device())) {
      total += ElementsOfBox(buffer);
    }
  }
  return total;
}

absl::Status Contradiction(const v1::WorkerProgram& program,
                           absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "worker ", program.worker(), ": result contradicts the plan: ", what));
}

absl::Status CheckSteps(const v1::WorkerProgram& program,
                        const v1::JobResult& result,
                        const ResultCheckOptions& options) {
  absl::flat_hash_map<int32_t, const v1::Step*> steps;
  for (const v1::Step& step : program.plan().steps()) steps[step.id()] = &step;
  // A collective over a group of one device moves nothing (a one-rank
  // all-gather in place: MoE's gather over an MP group of 1): its bytes
  // take no time.
  absl::flat_hash_set<int32_t> one_device_groups;
  for (const v1::CommGroup& group : program.plan().groups()) {
    if (group.devices_size() <= 1) one_device_groups.insert(group.id());
  }
  absl::flat_hash_set<int32_t> seen;
  for (const v1::StepResult& reported : result.steps()) {
    auto it = steps.find(reported.step());
    if (it == steps.end()) {
      return Contradiction(program,
                           absl::StrCat("step ", reported.step(),
                                        " is not a step of its program"));
    }
    if (!seen.insert(reported.step()).second) {
      return Contradiction(program, absl::StrCat("step ", reported.step(),
                                                 " is reported twice"));
    }
    const v1::Step& step = *it->second;
    if (reported.bytes() != step.bytes()) {
      return Contradiction(
          program,
          absl::StrCat("step ", step.id(), " reports ", reported.bytes(),
                       " bytes; the plan has ", step.bytes()));
    }
    if (reported.seconds() < 0) {
      return Contradiction(
          program, absl::StrFormat("step %d reports negative seconds (%g)",
                                   step.id(), reported.seconds()));
    }
    if (options.max_bytes_per_second <= 0 ||
        step.op() == v1::Step::OP_COMPUTE ||
        step.bytes() < kMinRateCheckBytes ||
        (step.op() != v1::Step::OP_SEND_RECV &&
         step.op() != v1::Step::OP_LOCAL_COPY &&
         one_device_groups.contains(step.group()))) {
      continue;
    }
    if (reported.seconds() * options.max_bytes_per_second < step.bytes()) {
      return Contradiction(
          program,
          absl::StrFormat("step %d moved %d bytes in %g s, faster than the "
                          "plausible maximum of %g bytes/s (a multiple of "
                          "the topology's fastest link)",
                          step.id(), step.bytes(), reported.seconds(),
                          options.max_bytes_per_second));
    }
  }
  return absl::OkStatus();
}

// VERIFY_MODE_CHECKSUM: no element verified, and one checksum for each
// source and destination buffer of the worker's own devices.
absl::Status CheckChecksumsReported(const v1::WorkerProgram& program,
                                    const v1::JobResult& result) {
  if (result.elements_verified() != 0) {
    return Contradiction(program,
                         absl::StrCat("verified ", result.elements_verified(),
                                      " elements with verify checksum"));
  }
  const absl::flat_hash_set<int32_t> local(program.local_devices().begin(),
                                           program.local_devices().end());
  absl::flat_hash_set<int32_t> expected;
  for (const v1::Buffer& buffer : program.plan().buffers()) {
    if (buffer.role() != v1::Buffer::ROLE_SCRATCH &&
        local.contains(buffer.device())) {
      expected.insert(buffer.id());
    }
  }
  absl::flat_hash_set<int32_t> seen;
  for (const v1::TileChecksum& tile : result.tile_checksums()) {
    if (!expected.contains(tile.buffer()) || !seen.insert(tile.buffer()).second) {
      return Contradiction(
          program, absl::StrCat("a checksum for buffer ", tile.buffer(),
                                ", which is not one of its source or "
                                "destination buffers, or comes twice"));
    }
  }
  if (seen.size() != expected.size()) {
    return Contradiction(program,
                         absl::StrCat("checksums of ", seen.size(), " of its ",
                                      expected.size(), " tiles"));
  }
  return absl::OkStatus();
}

absl::Status CheckVerification(const v1::WorkerProgram& program,
                               const v1::JobResult& result) {
  const int64_t verified = result.elements_verified();
  if (verified < 0 || result.mismatches() < 0) {
    return Contradiction(
        program, absl::StrCat("negative elements_verified (", verified,
                              ") or mismatches (", result.mismatches(), ")"));
  }
  if (result.mismatches() > verified) {
    return Contradiction(
        program, absl::StrCat(result.mismatches(), " mismatches of only ",
                              verified, " elements verified"));
  }
  const int64_t own = OwnDestinationElements(program);
  switch (program.verify()) {
    case v1::VERIFY_MODE_CHECKSUM:
      return CheckChecksumsReported(program, result);
    case v1::VERIFY_MODE_OFF:
      if (verified != 0) {
        return Contradiction(program,
                             absl::StrCat("verified ", verified,
                                          " elements with verification off"));
      }
      break;
    case v1::VERIFY_MODE_SAMPLE:
      if (verified > own) {
        return Contradiction(
            program,
            absl::StrCat("sampled ", verified,
                         " elements; its destination buffers hold ", own));
      }
      break;
    default:
      if (verified != own) {
        return Contradiction(
            program,
            absl::StrCat("verified ", verified,
                         " elements; its destination buffers hold ", own));
      }
      break;
  }
  return absl::OkStatus();
}

}  // namespace

double MaxPlausibleBytesPerSecond(const Topology& topology, double factor) {
  const double fastest =
      std::max({topology.inter_host_bandwidth, topology.intra_host_bandwidth,
                topology.host_copy_bandwidth, kMemoryCopyBytesPerSecond,
                topology.device_memory_bandwidth});
  return factor > 0 ? factor * fastest : 0;
}

absl::Status CheckWorkerResult(const v1::WorkerProgram& program,
                               const v1::JobResult& result,
                               const ResultCheckOptions& options) {
  if (result.seconds() < 0) {
    return Contradiction(
        program, absl::StrFormat("negative seconds (%g)", result.seconds()));
  }
  if (absl::Status s = CheckSteps(program, result, options); !s.ok()) return s;
  return CheckVerification(program, result);
}

absl::Status CheckTensorChecksums(
    const v1::Plan& plan, const std::vector<const v1::JobResult*>& results) {
  absl::flat_hash_map<int32_t, uint64_t> checksum;
  for (const v1::JobResult* result : results) {
    for (const v1::TileChecksum& tile : result->tile_checksums()) {
      checksum[tile.buffer()] = tile.checksum();
    }
  }
  // tensor -> role -> box (as text) -> checksum of the first tile seen.
  using Boxes = std::map<std::string, uint64_t>;
  std::map<int32_t, std::map<bool, Boxes>> tensors;
  for (const v1::Buffer& buffer : plan.buffers()) {
    if (buffer.role() == v1::Buffer::ROLE_SCRATCH) continue;
    const auto it = checksum.find(buffer.id());
    if (it == checksum.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checksum: no worker reported buffer ", buffer.id(), " (device ",
          buffer.device(), ")"));
    }
    const bool source = buffer.role() == v1::Buffer::ROLE_SOURCE;
    std::string box;
    for (const v1::Interval& i : buffer.box()) {
      absl::StrAppend(&box, "[", i.begin(), ",", i.end(), ")");
    }
    Boxes& boxes = tensors[buffer.tensor()][source];
    const auto [first, fresh] = boxes.emplace(box, it->second);
    if (!fresh && first->second != it->second) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checksum: tensor ", buffer.tensor(), ": the ",
          source ? "source" : "destination", " tiles of box ", box,
          " differ between devices (device ", buffer.device(),
          " disagrees with another)"));
    }
  }
  for (const auto& [tensor, roles] : tensors) {
    const auto sources = roles.find(true);
    const auto destinations = roles.find(false);
    // Computed tensors (no sources) and inputs nobody receives: nothing
    // to compare.
    if (sources == roles.end() || destinations == roles.end()) continue;
    uint64_t sent = 0, received = 0;
    for (const auto& [box, sum] : sources->second) sent += sum;
    for (const auto& [box, sum] : destinations->second) received += sum;
    if (sent != received) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checksum: tensor ", tensor, ": its destinations hold other data "
          "than its sources (checksums ", absl::Hex(received), " and ",
          absl::Hex(sent), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast
