#include "worker/machine_identity.h"

#include <sched.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"

namespace meshcast::worker {

std::string ParseBootId(absl::string_view text) {
  const absl::string_view line = text.substr(0, text.find('\n'));
  const absl::string_view id = absl::StripAsciiWhitespace(line);
  for (char c : id) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return "";
  }
  return std::string(id);
}

MachineIdentity ReadMachineIdentity() {
  MachineIdentity machine;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  if (file) {
    std::stringstream text;
    text << file.rdbuf();
    machine.machine_id = ParseBootId(text.str());
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    machine.cpu_cores = CPU_COUNT(&set);
  }
  return machine;
}

}  // namespace meshcast::worker
