#include "controller/result_check.h"

#include <algorithm>

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
        step.bytes() < kMinRateCheckBytes) {
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
                topology.host_copy_bandwidth, kMemoryCopyBytesPerSecond});
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

}  // namespace meshcast
