#include "worker/host_memory.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/engine/collectives.h"

namespace meshcast::worker {
namespace {

std::string WorkerText(const ParsedProgram& program) {
  return program.worker.empty() ? absl::StrCat("rank ", program.rank)
                                : program.worker;
}

// "(4 tiles: 4.0 GiB, relay staging: 16.0 MiB)"
std::string NeedDetail(const HostMemoryNeed& need) {
  return absl::StrCat(need.tiles, need.tiles == 1 ? " tile: " : " tiles: ",
                      FormatBytes(need.tile_bytes),
                      ", relay staging: ", FormatBytes(need.staging_bytes));
}

}  // namespace

absl::StatusOr<int64_t> ParseMeminfoField(absl::string_view meminfo,
                                          absl::string_view field) {
  const std::string prefix = absl::StrCat(field, ":");
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t scale = 1;
    if (absl::ConsumeSuffix(&line, "kB")) scale = 1024;
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value) ||
        value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot parse the ", field,
                       " line of /proc/meminfo: '", line, "'"));
    }
    return value * scale;
  }
  return absl::NotFoundError(
      absl::StrCat("/proc/meminfo has no ", field, " line"));
}

absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  return ParseMeminfoField(meminfo, "MemAvailable");
}

namespace {

absl::StatusOr<int64_t> ReadMeminfoField(absl::string_view field) {
  std::ifstream file("/proc/meminfo");
  if (!file) return absl::UnavailableError("cannot read /proc/meminfo");
  std::stringstream text;
  text << file.rdbuf();
  return ParseMeminfoField(text.str(), field);
}

}  // namespace

absl::StatusOr<int64_t> ReadMemAvailable() {
  return ReadMeminfoField("MemAvailable");
}

absl::StatusOr<int64_t> ReadMemTotal() { return ReadMeminfoField("MemTotal"); }

HostMemoryNeed HostMemoryNeedOf(const ParsedProgram& program,
                                const RelayOptions& relay,
                                int max_concurrent_steps) {
  HostMemoryNeed need;
  for (const BufferDesc& buffer : program.buffers) {
    ++need.tiles;
    need.tile_bytes += NumElements(buffer.box) *
                       DTypeSize(program.tensors[buffer.tensor].dtype);
  }
  // Up to max_concurrent_steps steps run at once (all of them when they
  // are independent), each with its staging slots.
  std::vector<int64_t> staging;
  for (const StepDesc& step : program.steps) {
    const bool relay_op =
        step.op == v1::Step::OP_BROADCAST || step.op == v1::Step::OP_SEND_RECV;
    const int64_t bytes = relay_op ? RelayStagingBytes(step, program, relay)
                                   : CollectiveStagingBytes(step, program);
    if (bytes > 0) staging.push_back(bytes);
  }
  const size_t concurrent = std::min(
      staging.size(), static_cast<size_t>(std::max(1, max_concurrent_steps)));
  std::partial_sort(staging.begin(), staging.begin() + concurrent,
                    staging.end(), std::greater<>());
  for (size_t i = 0; i < concurrent; ++i) need.staging_bytes += staging[i];
  return need;
}

absl::Status CheckHostMemory(const ParsedProgram& program,
                             const HostMemoryNeed& need,
                             const AvailableMemoryFn& available) {
  if (!available) return absl::OkStatus();
  const absl::StatusOr<int64_t> bytes = available();
  if (!bytes.ok() || need.total() <= *bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("worker ", WorkerText(program), ": job ", program.job_id,
                   " needs ", FormatBytes(need.total()), " for its tiles, ",
                   FormatBytes(*bytes), " available (", NeedDetail(need), ")"));
}

absl::Status OutOfHostMemoryError(const ParsedProgram& program,
                                  const HostMemoryNeed& need,
                                  const AvailableMemoryFn& available,
                                  absl::string_view what) {
  std::string now = "unknown";
  if (available) {
    const absl::StatusOr<int64_t> bytes = available();
    if (bytes.ok()) now = FormatBytes(*bytes);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("worker ", WorkerText(program), ": job ", program.job_id,
                   " ran out of host memory (", what, "): it needs ",
                   FormatBytes(need.total()), " for its tiles, ", now,
                   " available (", NeedDetail(need), ")"));
}

}  // namespace meshcast::worker
