// Link probes: this machine's memory-copy bandwidth and its loopback TCP
// bandwidth, measured directly. On a local cluster (every worker on
// 127.0.0.1) these are the two "links" the data plane is made of: copies
// between devices of one worker are memcpy, transfers between workers are
// TCP over loopback. cluster_bench prints them next to the measured
// resharding bandwidth and gives them to `meshctl up` as the topology the
// controller plans with.
//
//   ASSIGN_OR_RETURN(BandwidthSample copy, MeasureMemcpy(256 << 20, 5));
//   ASSIGN_OR_RETURN(BandwidthSample tcp,
//                    MeasureLoopbackTcp({.bytes = 512 << 20, .streams = 1}));
//   std::cout << copy.median_bytes_per_second << "\n";
//
// Units: bytes and bytes per second. Memcpy bandwidth counts the bytes
// copied (not read + written); TCP bandwidth counts payload bytes delivered,
// summed over the streams.
//
// Thread safety: every function is thread-safe; each blocks its caller (the
// TCP probe runs receiver threads of its own) and allocates its buffers per
// call.
#ifndef MESHCAST_BENCH_CLUSTER_LINK_PROBE_H_
#define MESHCAST_BENCH_CLUSTER_LINK_PROBE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace meshcast::bench {

// Repeated measurements of one bandwidth.
struct BandwidthSample {
  std::vector<double> runs;  // bytes per second, in measurement order
  double median_bytes_per_second = 0;
  double best_bytes_per_second = 0;
};

// Copies `bytes` from one buffer to another with memcpy, `repeats` times,
// after one untimed copy that faults every page in. INVALID_ARGUMENT when
// bytes < 1 or repeats < 1 (naming the argument).
absl::StatusOr<BandwidthSample> MeasureMemcpy(int64_t bytes, int repeats);

struct TcpProbeOptions {
  int64_t bytes = int64_t{512} << 20;     // payload per stream per repeat
  int64_t send_bytes = int64_t{4} << 20;  // size of each send() call
  int streams = 1;  // concurrent connections, one sender thread each
  int repeats = 3;
};

// Opens `streams` TCP connections over 127.0.0.1 (a listener on a free port,
// closed before returning) and, per repeat, sends options.bytes over each at
// once; a repeat's time runs from the first send to the last byte received.
// INVALID_ARGUMENT for non-positive options (naming the field); INTERNAL
// with errno's text when a socket call fails.
absl::StatusOr<BandwidthSample> MeasureLoopbackTcp(
    const TcpProbeOptions& options);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_LINK_PROBE_H_
