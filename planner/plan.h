// ReshardPlan: the planner's output for resharding, a list of transfers.
//
// A Transfer multicasts one slice of one tensor from src_device to every
// device in dst_devices. It is carried out as a pipelined relay chain in the
// order of dst_devices: src -> dst[0] -> dst[1] -> ..., so a strategy lists
// the receivers host by host and each byte crosses each host's NIC at most
// once (a single receiver makes it a point-to-point send). With `parents`
// it is a relay tree instead: number the chain positions 0 = src, k + 1 =
// dst[k]; parents[k] is the position that forwards to dst[k] (0 <= parents[k]
// <= k), and a position forwards each chunk to all its children as soon as
// it has it, so the slice crosses as many hops as the tree is deep. A transfer
// starts when every transfer in `deps` has finished; `stage` is the depth of
// that dependency chain (0 = no deps), so a device may send in a later stage
// what it received in an earlier one. Transfers with no dependency between them
// run concurrently and share links.
//
// Thread safety: plain value types.
#ifndef MESHCAST_PLANNER_PLAN_H_
#define MESHCAST_PLANNER_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/tensor.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

// The most devices one relay chain or tree may span: a worker tags each
// chunk with the position it goes to in 12 bits.
inline constexpr int kMaxRelayGroupDevices = 1 << 12;

struct Transfer {
  int tensor = 0;  // index into ReshardPlan::problems
  Box slice;       // global tensor coordinates
  int src_device = -1;
  DeviceList dst_devices;  // chain order
  int64_t bytes = 0;
  int stage = 0;
  std::vector<int> deps;  // indices of earlier transfers in the plan
  std::vector<int> parents;  // empty: a chain; else one per dst (above)
  // The chunks the relay forwards; 0: Topology::pipeline_chunk_bytes.
  int64_t chunk_bytes = 0;
};

// The chain position that forwards to dst_devices[k] (k for a chain).
inline int ParentPosition(const Transfer& transfer, size_t k) {
  return transfer.parents.empty() ? static_cast<int>(k) : transfer.parents[k];
}

struct ReshardPlan {
  std::string strategy;
  std::vector<ReshardProblem> problems;
  std::vector<Transfer> transfers;

  int64_t total_bytes() const;  // sum of transfer bytes
};

// OK if `transfer.parents` is empty or one valid position per dst device;
// else InvalidArgument saying which entry is wrong (without naming the
// transfer).
absl::Status CheckParents(const Transfer& transfer);

// Checks that the plan is executable and complete: every dep points to an
// earlier transfer, every sender holds the slice when it sends (in the source
// layout, or received by a transfer it depends on, directly or not), and every
// element each destination device needs and does not hold is delivered.
// Errors name the offending transfer. Cost: proportional to the plan size
// times the boxes touched; meant for tests and `meshctl plan --verify`.
absl::Status VerifyPlan(const ReshardPlan& plan, const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_PLAN_H_
