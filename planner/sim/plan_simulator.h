// Plan simulator: times any plan IR (meshcast::v1::Plan, see
// proto/meshcast/v1/plan.proto) on a Topology, and lower bounds for single
// collectives that no algorithm can beat.
//
//   ASSIGN_OR_RETURN(const PlanSimulation sim, SimulatePlan(plan, topology));
//   RETURN_IF_ERROR(PredictPlan(plan, topology).status());  // into the plan
//   const double bound = CollectiveLowerBoundSeconds(
//       v1::Step::OP_ALL_REDUCE, mesh.devices, bytes, topology);
//
// Model. One flow engine (planner/cost_model.h: NetworkResources,
// FlowProblem, RunFlows) runs every step as a task over shared resources:
// the links of the topology (NIC and device port each way, host copy when
// limited) and one compute resource per device. A step starts when every
// step in its deps has finished, then waits its setup, then moves its flows
// concurrently (every flow of every running step shares each resource max-min
// fairly with all others), and finishes a tail after its last flow's last
// byte. So compute and communication overlap wherever the DAG allows, and a
// dependent chain pays each step in turn. Per op (n = group size, B =
// step.bytes as plan.proto defines it):
//  - OP_BROADCAST, OP_SEND_RECV: exactly a ReshardPlan transfer (the relay
//    chain devices[0] -> devices[1] -> ... of cost_model.h): one flow of B
//    bytes over every hop; tail = each hop's latency + one pipeline chunk per
//    hop after the first. So a ReshardPlan and its one-broadcast-per-transfer
//    Plan simulate to the same times.
//  - OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE inside one host, or
//    with one device on each host: a ring in rank order, n flows (rank r to
//    rank r+1 mod n) of (n-1)/n x B each (all-reduce: 2(n-1)/n x B). The
//    ring runs n-1 (all-reduce: 2(n-1)) rounds in lock step, each ending
//    with a hop, so tail = rounds x the largest latency of its hops.
//  - The same over h >= 2 hosts with several devices on some: hierarchical,
//    as both engines run them (worker/engine/collectives.h,
//    worker/cuda/device_collectives.h). Hosts in order of first appearance
//    in the group, k_w devices on host w, the first its leader; three flow
//    tasks in sequence (each starts when the previous ends; the step starts
//    with the first and finishes with the last; setup paid once):
//     1. local combine on every host at once: all-reduce, reduce-scatter:
//        k_w - 1 flows of B into the leader (the local reduction);
//        all-gather: every local input (B/n) to every other local rank;
//     2. a ring between the leaders (every hop crosses hosts): all-reduce
//        2(h-1)/h x B per hop; reduce-scatter: host w sends the other
//        hosts' chunks, (n-k_w)/n x B; all-gather: host w forwards every
//        bundle but its successor's, (n-k_{w+1})/n x B; tail = its rounds
//        (2(h-1), or h-1) x the inter-host latency;
//     3. local distribution from the leader to its k_w - 1 other ranks:
//        all-reduce B each, reduce-scatter B/n each, all-gather the other
//        hosts' (n-k_w)/n x B each.
//    Local phases end one intra-host latency after their last byte. So each
//    NIC carries what the lower bound below requires of it, not the flat
//    ring's 2(n-1)/n x B.
//  - OP_ALL_TO_ALL: one flow r -> s per nonzero counts[r*n+s], r != s, of
//    count x the element size of the output tensor (that of outputs[0]'s
//    buffer, else of step.tensor); all pairs go at once, so tail = the
//    largest latency of those hops. The diagonal (r -> r) is a device-local
//    copy, as below.
//  - OP_LOCAL_COPY: B bytes from inputs[0]'s device to outputs[0]'s device:
//    one hop flow (tail: its latency) between two devices; on one device a
//    memory copy on its compute resource (reads and writes B:
//    2B / device_memory_bandwidth device-seconds, no tail).
//  - OP_COMPUTE: on step.device's compute resource, a flow of
//    max(flops / device_flops, touched / device_memory_bandwidth)
//    device-seconds, where touched = the bytes of every input and output
//    operand (its slice, or its buffer's box when the slice is empty, times
//    its tensor's element size; a GEMM that accumulates reads and writes C,
//    so C counts twice). Steps running on one device share it max-min
//    fairly. No setup, no tail.
// Calibration (Topology.calibration, measured by a `calibrate` job): an
// all-gather, reduce-scatter, all-reduce or all-to-all whose group lies on
// one host (intra_host) or spans hosts (inter_host) and whose op has a fit
// for that class takes setup + alpha - model_alpha (at least 0) instead of
// the setup, and its flows carry beta / model_beta times their bytes: the
// measured fit over the simulator's own fit of the same steps, so the
// model keeps its shape (group size, sharing, overlap) and takes the live
// cluster's rates. Other ops and classes are not changed.
// Setup: every step that goes through a communicator (broadcast, send/recv,
// the collectives, all-to-all) pays topology.transfer_setup_seconds once,
// as a transfer does; local copies and compute pay none. A step whose bytes
// and flops are 0 takes its setup + tail.
//
// Lower bound of one collective (CollectiveLowerBoundSeconds). Over
// algorithms that move elements and partial sums between the group's devices
// (every step of the plan IR does; no coding), each resource must carry at
// least the following bytes (n devices, k_h of them on host h, h_s hosts
// spanned; B as above):
//  - broadcast / send-recv: every receiver's port ingress and the root's
//    egress B; each spanned host but the root's NIC ingress B, the root
//    host's egress B when h_s > 1.
//  - all-gather: every device receives the n-1 chunks it lacks: port ingress
//    (n-1)/n B; host h lacks n-k_h chunks: NIC ingress (n-k_h)/n B.
//  - reduce-scatter: every device's n-1 foreign chunks each influence
//    another device's output: port egress (n-1)/n B; host h egress
//    (n-k_h)/n B.
//  - all-reduce: every element needs at least 2(n-1) one-way messages
//    among n devices (directed gossip), so the devices send (and receive)
//    2(n-1) B in all and the busiest port at least 2(n-1)/n B; with hosts as
//    nodes, 2(h_s-1) B cross NICs, the busiest at least 2(h_s-1)/h_s B.
//  - all-to-all (B = each rank's send buffer, counts uniform: B/n per
//    pair): port egress and ingress (n-1)/n B; host h's NIC each way
//    k_h (n-k_h)/n B. AllToAllLowerBoundSeconds takes any counts.
//  - host copies (when host_copy_bandwidth > 0): every hop into a device of
//    h uses h's copy once and every hop out of h once more, so the receive
//    and pack bytes above (per host, or their total over h_s hosts for
//    all-reduce) over host_copy_bandwidth.
// Each resource's bytes over its capacity, plus the latency of the hops that
// use it (a NIC: the inter-host latency; a port or copy: the cheaper of the
// two kinds the group's hops can be), the largest over resources, plus
// transfer_setup_seconds. 0 when nothing must move (n < 2 or B <= 0), for
// compute steps, and for groups with devices outside the topology.
//
// Errors (SimulatePlan): InvalidArgument naming the step id and the field:
// an invalid topology; a duplicate step, group or buffer id; an unknown dep,
// group, buffer or tensor; a device outside the topology; a group that
// repeats a device or is too small for its op (broadcast >= 2, send/recv
// exactly 2, collectives >= 1); negative bytes, counts or extents; counts not
// n x n; a non-finite or negative flops; an unspecified op or dtype; a
// dependency cycle.
//
// Speed: O(plan size) to build (a hierarchical all-gather: k_w^2 flows per
// host), then the flow engine's O(active flows x path
// length x log) per event.
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_SIM_PLAN_SIMULATOR_H_
#define MESHCAST_PLANNER_SIM_PLAN_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/topology.h"

namespace meshcast {

struct PlanSimulation {
  double seconds = 0;  // makespan
  // Indexed by position in plan.steps (not by step id).
  std::vector<double> step_start;
  std::vector<double> step_finish;
};

absl::StatusOr<PlanSimulation> SimulatePlan(const v1::Plan& plan,
                                            const Topology& topology);

// Simulates `plan` and writes the prediction into it: predicted_seconds and
// predicted_step_start / predicted_step_finish (parallel to steps). What
// every job kind does with a plan it built.
absl::StatusOr<PlanSimulation> PredictPlan(v1::Plan& plan,
                                           const Topology& topology);

// Lower bound for one collective of `op` over `group_devices` (rank order)
// moving `bytes` as Step.bytes defines them: no algorithm can beat it on
// this topology. See the header comment for the derivation.
double CollectiveLowerBoundSeconds(v1::Step::Op op,
                                   const std::vector<int>& group_devices,
                                   int64_t bytes, const Topology& topology);

// The same for an all-to-all with any counts: pair_bytes[r * n + s] bytes go
// from rank r to rank s (the diagonal stays on its device).
double AllToAllLowerBoundSeconds(const std::vector<int>& group_devices,
                                 const std::vector<int64_t>& pair_bytes,
                                 const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_SIM_PLAN_SIMULATOR_H_
