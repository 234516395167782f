// MachineIdentity: which machine a worker runs on and how many cores it may
// use, reported at registration (WorkerInfo.machine_id, cpu_cores), so
// that the controller sees when several workers share one machine's cores
// (emulated hosts in network namespaces of one kernel, or several workers
// per node) and plans with it (Topology::cpu_cores_per_device).
//
//   const MachineIdentity machine = ReadMachineIdentity();
//   info.set_machine_id(machine.machine_id);
//   info.set_cpu_cores(machine.cpu_cores);
//
// machine_id is the kernel's boot id (/proc/sys/kernel/random/boot_id):
// one per running kernel, so the same for every network namespace and
// container of a machine and different across machines and reboots.
// cpu_cores counts the CPUs the process may run on (its affinity mask,
// which a container's cpuset limits), not the machine's.
//
// Never fails: a field it cannot read is empty or 0 ("not known"), and the
// controller then treats the worker as a machine of its own.
// Thread safety: a pure read; safe to call from any thread.
#ifndef MESHCAST_WORKER_MACHINE_IDENTITY_H_
#define MESHCAST_WORKER_MACHINE_IDENTITY_H_

#include <string>

#include "absl/strings/string_view.h"

namespace meshcast::worker {

struct MachineIdentity {
  std::string machine_id;  // "" = not known
  int cpu_cores = 0;       // 0 = not known
};

MachineIdentity ReadMachineIdentity();

// The boot id in the file's text: its first line, trimmed; "" when that
// is empty or not printable ASCII.
std::string ParseBootId(absl::string_view text);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_MACHINE_IDENTITY_H_
