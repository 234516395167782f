// RateProbe: what this host's CPU devices really do, measured when the
// worker starts and reported at registration (WorkerInfo.probed_*), so
// that the controller plans with the host's own figures instead of a
// preset: the memory-copy capacity the devices share (the topology's
// host_copy_bandwidth) and the GEMM rate of one device while every device
// computes (its device_flops).
//
//   ASSIGN_OR_RETURN(ProbedRates rates, ProbeCpuRates(/*devices=*/4, {}));
//   info.set_probed_host_copy_bytes_per_second(rates.host_copy_bytes_per_second);
//
// How: `devices` threads at once, as the devices of a worker share its
// cores and memory, each starting once all have allocated and touched their
// buffers (outside the timing). Copy: each thread copies a buffer of
// copy_bytes (larger than the caches: the copies of a reshard are) back and
// forth for half the budget; the capacity is the bytes copied by all
// threads over the time the slowest took. GEMM: each thread runs the engine's own float32 GEMM
// (worker/kernels/compute.h RunGemm) of gemm_size^3 for the other half;
// the rate is the slowest thread's FLOP/s (a plan waits for its slowest
// device). Each thread runs its work at least once, so a budget shorter
// than one pass still measures.
//
// Errors: INVALID_ARGUMENT for devices < 1, copy_bytes < 4096, gemm_size
// < 16 or a budget <= 0. Thread safety: runs its own threads; any number
// of probes may run at once (they then measure each other too).
#ifndef MESHCAST_WORKER_RATE_PROBE_H_
#define MESHCAST_WORKER_RATE_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshcast::worker {

struct ProbeOptions {
  absl::Duration budget = absl::Milliseconds(300);
  int64_t copy_bytes = int64_t{32} << 20;  // per thread
  int gemm_size = 256;
};

struct ProbedRates {
  double host_copy_bytes_per_second = 0;  // all devices together
  double device_flops = 0;                // one device, all busy
};

absl::StatusOr<ProbedRates> ProbeCpuRates(int devices,
                                          const ProbeOptions& options);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_RATE_PROBE_H_
