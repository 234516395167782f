#include "worker/host_memory.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

absl::StatusOr<std::string> ParseCgroupV2Path(
    absl::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) {
      return std::string(absl::StripAsciiWhitespace(line));
    }
  }
  return absl::NotFoundError("/proc/self/cgroup has no cgroup v2 (0::) line");
}

absl::StatusOr<int64_t> ParseCgroupBytes(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse a cgroup memory figure: '", text.substr(0, 32), "'"));
  }
  return value;
}

absl::StatusOr<std::optional<int64_t>> ParseCgroupMemoryMax(
    absl::string_view text) {
  if (absl::StripAsciiWhitespace(text) == "max") return std::nullopt;
  absl::StatusOr<int64_t> bytes = ParseCgroupBytes(text);
  if (!bytes.ok()) return bytes.status();
  return std::optional<int64_t>(*bytes);
}

std::optional<CgroupMemory> CgroupMemoryOf(absl::string_view proc_self_cgroup,
                                           absl::string_view root,
                                           const ReadFileFn& read_file) {
  absl::StatusOr<std::string> path = ParseCgroupV2Path(proc_self_cgroup);
  if (!path.ok() || !absl::StartsWith(*path, "/")) return std::nullopt;
  std::optional<CgroupMemory> tightest;
  // From the process's own cgroup up to the root: a limit may sit on a
  // parent (a pod around its containers).
  std::string level = *path;
  while (true) {
    const std::string dir =
        absl::StrCat(root, level == "/" ? "" : level, "/");
    absl::StatusOr<std::string> max_text = read_file(dir + "memory.max");
    absl::StatusOr<std::string> current_text =
        read_file(dir + "memory.current");
    if (max_text.ok() && current_text.ok()) {
      absl::StatusOr<std::optional<int64_t>> limit =
          ParseCgroupMemoryMax(*max_text);
      absl::StatusOr<int64_t> current = ParseCgroupBytes(*current_text);
      if (limit.ok() && limit->has_value() && current.ok()) {
        const CgroupMemory here{**limit, *current};
        if (!tightest || here.available() < tightest->available()) {
          tightest = here;
        }
      }
    }
    if (level == "/" || level.empty()) break;
    const size_t slash = level.find_last_of('/');
    level = slash == 0 ? "/" : level.substr(0, slash);
  }
  return tightest;
}

int64_t CombineAvailable(int64_t meminfo_available,
                         const std::optional<CgroupMemory>& cgroup) {
  return cgroup ? std::min(meminfo_available, cgroup->available())
                : meminfo_available;
}

int64_t CombineTotal(int64_t meminfo_total,
                     const std::optional<CgroupMemory>& cgroup) {
  return cgroup ? std::min(meminfo_total, cgroup->limit) : meminfo_total;
}

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::StatusOr<int64_t> ReadMeminfoField(absl::string_view field) {
  absl::StatusOr<std::string> text = ReadWholeFile("/proc/meminfo");
  if (!text.ok()) return absl::UnavailableError("cannot read /proc/meminfo");
  return ParseMeminfoField(*text, field);
}

std::optional<CgroupMemory> ReadCgroupMemory() {
  absl::StatusOr<std::string> text = ReadWholeFile("/proc/self/cgroup");
  if (!text.ok()) return std::nullopt;
  return CgroupMemoryOf(*text, "/sys/fs/cgroup", ReadWholeFile);
}

}  // namespace

absl::StatusOr<int64_t> ReadMemAvailable() {
  absl::StatusOr<int64_t> meminfo = ReadMeminfoField("MemAvailable");
  if (!meminfo.ok()) return meminfo;
  return CombineAvailable(*meminfo, ReadCgroupMemory());
}

absl::StatusOr<int64_t> ReadMemTotal() {
  absl::StatusOr<int64_t> meminfo = ReadMeminfoField("MemTotal");
  if (!meminfo.ok()) return meminfo;
  return CombineTotal(*meminfo, ReadCgroupMemory());
}

namespace {

// Covers the steps' DAG with dependency paths, greedily in dependency order
// (a step continues the path of its first direct dep that no other step
// continued yet, else starts one), and returns the sum over the paths of
// their largest staging: since steps of one path run one after another, no
// set of steps running at once holds more. nullopt when the deps name
// unknown steps or form a cycle.
std::optional<int64_t> StagingOnDependencyPaths(
    const ParsedProgram& program, const std::vector<int64_t>& by_step) {
  const size_t n = program.steps.size();
  absl::flat_hash_map<int, int> position;
  for (size_t i = 0; i < n; ++i) position[program.steps[i].id] = i;
  std::vector<std::vector<int>> dependents(n);
  std::vector<int> waiting(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (int dep : program.steps[i].deps) {
      const auto it = position.find(dep);
      if (it == position.end()) return std::nullopt;
      dependents[it->second].push_back(i);
      ++waiting[i];
    }
  }
  std::vector<int> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  std::vector<int> path_of(n, -1);
  std::vector<bool> continued(n, false);
  std::vector<int64_t> path_max;
  size_t done = 0;
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    ++done;
    for (int dep : program.steps[i].deps) {
      const int d = position.at(dep);
      if (!continued[d]) {
        continued[d] = true;
        path_of[i] = path_of[d];
        break;
      }
    }
    if (path_of[i] < 0) {
      path_of[i] = static_cast<int>(path_max.size());
      path_max.push_back(0);
    }
    path_max[path_of[i]] = std::max(path_max[path_of[i]], by_step[i]);
    for (int next : dependents[i]) {
      if (--waiting[next] == 0) ready.push_back(next);
    }
  }
  if (done != n) return std::nullopt;
  int64_t total = 0;
  for (int64_t bytes : path_max) total += bytes;
  return total;
}

}  // namespace

HostMemoryNeed HostMemoryNeedOf(const ParsedProgram& program,
                                const RelayOptions& relay,
                                int max_concurrent_steps) {
  HostMemoryNeed need;
  for (const BufferDesc& buffer : program.buffers) {
    // A user buffer is memory its owner already holds.
    if (!buffer.user_buffer.empty()) continue;
    ++need.tiles;
    need.tile_bytes += NumElements(buffer.box) *
                       DTypeSize(program.tensors[buffer.tensor].dtype);
  }
  std::vector<int64_t> by_step;
  for (const StepDesc& step : program.steps) {
    const bool relay_op =
        step.op == v1::Step::OP_BROADCAST || step.op == v1::Step::OP_SEND_RECV;
    by_step.push_back(relay_op ? RelayStagingBytes(step, program, relay)
                               : CollectiveStagingBytes(step, program));
  }
  // Two bounds on the staging of the steps running at once; both hold, so
  // the smaller does. (1) Up to max_concurrent_steps steps run at once,
  // each with its staging.
  std::vector<int64_t> staging;
  for (int64_t bytes : by_step) {
    if (bytes > 0) staging.push_back(bytes);
  }
  const size_t concurrent = std::min(
      staging.size(), static_cast<size_t>(std::max(1, max_concurrent_steps)));
  std::partial_sort(staging.begin(), staging.begin() + concurrent,
                    staging.end(), std::greater<>());
  for (size_t i = 0; i < concurrent; ++i) need.staging_bytes += staging[i];
  // (2) Steps on one dependency path never run at once.
  if (std::optional<int64_t> paths =
          StagingOnDependencyPaths(program, by_step)) {
    need.staging_bytes = std::min(need.staging_bytes, *paths);
  }
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
