#include "planner/sim/plan_simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "planner/cost_model.h"
#include "planner/ir/group_parents.h"
#include "planner/ir/step_order.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// Builds the flow problem of a plan, step by step, checking each step's
// fields as it goes.
class PlanModeler {
 public:
  PlanModeler(const v1::Plan& plan, const Topology& topology)
      : plan_(plan),
        topology_(topology),
        resources_(topology),
        problem_(resources_.Capacities(topology)) {}

  absl::StatusOr<PlanSimulation> Run() {
    RETURN_IF_ERROR(IndexPlan());
    RETURN_IF_ERROR(CheckAcyclic());
    // A step is one task, or three in sequence (a hierarchical collective:
    // local combine, ring between hosts, local distribution). Deps may name
    // later steps, so every step's task range is fixed before any is added.
    const int n = plan_.steps_size();
    std::vector<int> first_task(n), last_task(n);
    int tasks = 0;
    for (int i = 0; i < n; ++i) {
      first_task[i] = tasks;
      tasks += TasksOf(plan_.steps(i));
      last_task[i] = tasks - 1;
    }
    std::vector<int> deps;
    for (int i = 0; i < n; ++i) {
      const v1::Step& step = plan_.steps(i);
      deps.clear();
      for (int dep : step.deps()) {
        deps.push_back(last_task[step_index_.at(dep)]);
      }
      RETURN_IF_ERROR(AddStep(step, deps));
      if (problem_.num_tasks() != last_task[i] + 1) {
        return absl::InternalError(absl::StrCat(
            "plan step ", step.id(), ": modeled as ",
            problem_.num_tasks() - first_task[i], " tasks, expected ",
            last_task[i] - first_task[i] + 1));
      }
    }
    ASSIGN_OR_RETURN(FlowSchedule schedule, RunFlows(problem_));
    PlanSimulation simulation;
    simulation.seconds = schedule.seconds;
    simulation.step_start.resize(n);
    simulation.step_finish.resize(n);
    for (int i = 0; i < n; ++i) {
      simulation.step_start[i] = schedule.start[first_task[i]];
      simulation.step_finish[i] = schedule.finish[last_task[i]];
    }
    return simulation;
  }

 private:
  absl::Status StepError(const v1::Step& step, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("plan step ", step.id(), " (",
                     v1::Step::Op_Name(step.op()), "): ", what));
  }

  bool ValidDevice(int device) const {
    return device >= 0 && device < topology_.num_devices();
  }
  std::string AllowedDevices() const {
    return absl::StrCat("allowed 0..", topology_.num_devices() - 1);
  }

  // Id maps for steps, groups and buffers; checks groups and buffers once.
  absl::Status IndexPlan() {
    for (int i = 0; i < plan_.steps_size(); ++i) {
      if (!step_index_.try_emplace(plan_.steps(i).id(), i).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan step id ", plan_.steps(i).id(), " appears twice"));
      }
    }
    for (const v1::Step& step : plan_.steps()) {
      for (int dep : step.deps()) {
        if (!step_index_.contains(dep)) {
          return StepError(step, absl::StrCat("dep ", dep,
                                              " is not a step id of the plan"));
        }
      }
    }
    std::vector<int> seen_in(topology_.num_devices(), -1);
    for (int g = 0; g < plan_.groups_size(); ++g) {
      const v1::CommGroup& group = plan_.groups(g);
      if (!group_index_.try_emplace(group.id(), g).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan group id ", group.id(), " appears twice"));
      }
      for (int device : group.devices()) {
        if (!ValidDevice(device)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "plan group ", group.id(), ": device ", device,
              " is not a device of the topology (", AllowedDevices(), ")"));
        }
        if (seen_in[device] == g) {
          return absl::InvalidArgumentError(
              absl::StrCat("plan group ", group.id(), ": device ", device,
                           " appears twice"));
        }
        seen_in[device] = g;
      }
    }
    for (int b = 0; b < plan_.buffers_size(); ++b) {
      const v1::Buffer& buffer = plan_.buffers(b);
      if (!buffer_index_.try_emplace(buffer.id(), b).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan buffer id ", buffer.id(), " appears twice"));
      }
      if (!ValidDevice(buffer.device())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan buffer ", buffer.id(), ": device ", buffer.device(),
            " is not a device of the topology (", AllowedDevices(), ")"));
      }
      if (buffer.tensor() < 0 || buffer.tensor() >= plan_.tensors_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan buffer ", buffer.id(), ": tensor ", buffer.tensor(),
            " is not a tensor of the plan (allowed 0..",
            plan_.tensors_size() - 1, ")"));
      }
    }
    return absl::OkStatus();
  }

  // Every step must become ready, or some dependency cycle blocks it.
  absl::Status CheckAcyclic() const {
    return StepsInDependencyOrder(plan_).status();
  }

  absl::StatusOr<const v1::CommGroup*> GroupOf(const v1::Step& step,
                                               int min_size,
                                               int max_size) const {
    const auto it = group_index_.find(step.group());
    if (it == group_index_.end()) {
      return StepError(step, absl::StrCat("group ", step.group(),
                                          " is not a group id of the plan"));
    }
    const v1::CommGroup& group = plan_.groups(it->second);
    if (group.devices_size() < min_size || group.devices_size() > max_size) {
      return StepError(
          step, absl::StrCat("group ", step.group(), " has ",
                             group.devices_size(), " devices; the op needs ",
                             min_size == max_size
                                 ? absl::StrCat(min_size)
                                 : absl::StrCat("at least ", min_size)));
    }
    return &group;
  }

  // A relay group's parents in AppendRelayTree's form (ranks 1..n-1; empty
  // for a chain), checked as the worker checks them.
  absl::StatusOr<absl::Span<const int>> RelayParents(
      const v1::Step& step, const v1::CommGroup& group) const {
    const int n = group.devices_size();
    if (absl::Status status = CheckGroupParents(group); !status.ok()) {
      return StepError(step, status.message());
    }
    if (group.parents_size() == 0) return absl::Span<const int>();
    return absl::Span<const int>(group.parents().data() + 1, n - 1);
  }

  absl::StatusOr<const v1::Buffer*> BufferOf(const v1::Step& step,
                                             const v1::Operand& operand,
                                             absl::string_view field) const {
    const auto it = buffer_index_.find(operand.buffer());
    if (it == buffer_index_.end()) {
      return StepError(step, absl::StrCat(field, " buffer ", operand.buffer(),
                                          " is not a buffer id of the plan"));
    }
    return &plan_.buffers(it->second);
  }

  absl::StatusOr<int> ElementBytesOf(const v1::Step& step, int tensor) const {
    if (tensor < 0 || tensor >= plan_.tensors_size()) {
      return StepError(step, absl::StrCat("tensor ", tensor,
                                          " is not a tensor of the plan "
                                          "(allowed 0..",
                                          plan_.tensors_size() - 1, ")"));
    }
    const int size = DTypeProtoSize(plan_.tensors(tensor).dtype());
    if (size == 0) {
      return StepError(step, absl::StrCat("tensor ", tensor,
                                          " has no dtype (DTYPE_UNSPECIFIED)"));
    }
    return size;
  }

  // Bytes of an operand: its slice (or its buffer's box) times the element
  // size of its tensor.
  absl::StatusOr<double> OperandBytes(const v1::Step& step,
                                      const v1::Operand& operand,
                                      absl::string_view field) const {
    ASSIGN_OR_RETURN(const v1::Buffer* buffer, BufferOf(step, operand, field));
    ASSIGN_OR_RETURN(const int element_bytes,
                     ElementBytesOf(step, buffer->tensor()));
    const auto& box =
        operand.slice().empty() ? buffer->box() : operand.slice();
    double elements = 1;
    for (const v1::Interval& interval : box) {
      if (interval.end() < interval.begin()) {
        return StepError(step, absl::StrCat(field, " buffer ", buffer->id(),
                                            ": interval [", interval.begin(),
                                            ", ", interval.end(),
                                            ") has a negative extent"));
      }
      elements *= static_cast<double>(interval.end() - interval.begin());
    }
    return elements * element_bytes;
  }

  // The group's hosts in order of first appearance in the group (the
  // engines' ring order of workers) and the group's devices on each, in
  // rank order.
  struct HostGroups {
    std::vector<std::vector<int>> devices;
    // Several hosts, several devices on at least one: the engines combine
    // locally first, which a flat ring over all devices would not show.
    bool Hierarchical() const {
      if (devices.size() < 2) return false;
      for (const std::vector<int>& local : devices) {
        if (local.size() > 1) return true;
      }
      return false;
    }
  };

  // The group's devices must be valid (IndexPlan checks them).
  HostGroups GroupByHost(const v1::CommGroup& group) const {
    HostGroups hosts;
    std::vector<int> slot(topology_.num_hosts, -1);
    for (int device : group.devices()) {
      const int host = topology_.HostOf(device);
      if (slot[host] < 0) {
        slot[host] = static_cast<int>(hosts.devices.size());
        hosts.devices.emplace_back();
      }
      hosts.devices[slot[host]].push_back(device);
    }
    return hosts;
  }

  // How many flow tasks AddStep adds for `step` (run after IndexPlan; an
  // unknown group counts 1, AddStep then fails on it).
  int TasksOf(const v1::Step& step) const {
    switch (step.op()) {
      case v1::Step::OP_ALL_GATHER:
      case v1::Step::OP_REDUCE_SCATTER:
      case v1::Step::OP_ALL_REDUCE: {
        const auto it = group_index_.find(step.group());
        if (it == group_index_.end()) return 1;
        return GroupByHost(plan_.groups(it->second)).Hierarchical() ? 3 : 1;
      }
      default:
        return 1;
    }
  }

  // One hop flow of `amount` bytes from `from` to `to` (none when 0); returns
  // the hop's latency.
  double AddHopFlow(int from, int to, double amount) {
    uses_.clear();
    const HopLink link = AppendHop(topology_, resources_, from, to, uses_);
    if (amount > 0) problem_.AddFlow(amount, uses_);
    return link.latency;
  }

  // A collective over several hosts with several devices on some, as both
  // engines run it (worker/engine/collectives.h,
  // worker/cuda/device_collectives.h): three tasks in sequence, the first
  // paying the setup. k_w = the group's devices on host w (its first one is
  // the host's leader), h hosts, n ranks, B = step.bytes.
  //  1. Local combine, on every host at once: all-reduce and reduce-scatter
  //     reduce the k_w inputs into the leader (k_w - 1 flows of B into it);
  //     all-gather copies every local input (B/n) into every other local
  //     output, the leader's bundle included.
  //  2. Ring between the leaders in host order, every hop crossing hosts:
  //     all-reduce 2(h-1)/h B per hop (reduce-scatter then all-gather of h
  //     equal pieces); reduce-scatter: host w sends every piece but its own
  //     (its ranks' chunks), (n - k_w)/n B; all-gather: host w forwards
  //     every bundle but its successor's, (n - k_{w+1})/n B. Tail: its
  //     rounds (2(h-1) or h-1) x the inter-host latency.
  //  3. Local distribution from the leader: all-reduce B to every other
  //     local rank; reduce-scatter its chunk B/n; all-gather the other
  //     hosts' inputs, (n - k_w)/n B.
  // Local phases end one intra-host latency after their last byte.
  void AddHierarchicalCollective(v1::Step::Op op, const HostGroups& hosts,
                                 int n, double bytes, double setup,
                                 absl::Span<const int> deps) {
    const int h = static_cast<int>(hosts.devices.size());
    const double share = bytes / n;  // one rank's chunk
    auto local_count = [&](int w) {
      return static_cast<int>(hosts.devices[w].size());
    };
    // 1. Local combine.
    const int combine = problem_.AddTask(setup, deps);
    double latency = 0;
    for (const std::vector<int>& local : hosts.devices) {
      if (local.size() < 2) continue;
      if (op == v1::Step::OP_ALL_GATHER) {
        for (int from : local) {
          for (int to : local) {
            if (from == to) continue;
            latency = std::max(latency, AddHopFlow(from, to, share));
          }
        }
      } else {
        for (size_t r = 1; r < local.size(); ++r) {
          latency = std::max(latency, AddHopFlow(local[r], local[0], bytes));
        }
      }
    }
    problem_.SetTail(latency);
    // 2. Ring between the hosts' leaders.
    const int ring_task = problem_.AddTask(0, {combine});
    latency = 0;
    for (int w = 0; w < h; ++w) {
      const int next = (w + 1) % h;
      double amount = 0;
      switch (op) {
        case v1::Step::OP_ALL_REDUCE:
          amount = 2 * bytes * (h - 1) / h;
          break;
        case v1::Step::OP_REDUCE_SCATTER:
          amount = share * (n - local_count(w));
          break;
        default:  // OP_ALL_GATHER
          amount = share * (n - local_count(next));
          break;
      }
      latency = std::max(latency, AddHopFlow(hosts.devices[w][0],
                                             hosts.devices[next][0], amount));
    }
    problem_.SetTail((op == v1::Step::OP_ALL_REDUCE ? 2 : 1) * (h - 1) *
                     latency);
    // 3. Local distribution.
    problem_.AddTask(0, {ring_task});
    latency = 0;
    for (int w = 0; w < h; ++w) {
      const std::vector<int>& local = hosts.devices[w];
      const double amount = op == v1::Step::OP_ALL_REDUCE ? bytes
                            : op == v1::Step::OP_REDUCE_SCATTER
                                ? share
                                : share * (n - local_count(w));
      for (size_t r = 1; r < local.size(); ++r) {
        latency = std::max(latency, AddHopFlow(local[0], local[r], amount));
      }
    }
    problem_.SetTail(latency);
  }

  // A flow on one device's compute resource of `seconds` device-seconds.
  void AddDeviceWork(int device, double seconds) {
    if (seconds <= 0) return;
    uses_.clear();
    uses_.push_back(resources_.DeviceCompute(device));
    problem_.AddFlow(seconds, uses_);
  }

  // What the topology's calibration changes of a collective over `group`
  // (see the header): its setup and a factor on the bytes of its flows.
  struct Correction {
    double setup = 0;
    double byte_factor = 1;
  };
  Correction CorrectionFor(v1::Step::Op op,
                           const v1::CommGroup& group) const {
    Correction c{topology_.transfer_setup_seconds, 1};
    if (topology_.calibration.empty() || group.devices_size() == 0) return c;
    const char* name = op == v1::Step::OP_ALL_TO_ALL     ? "all_to_all"
                       : op == v1::Step::OP_ALL_GATHER   ? "all_gather"
                       : op == v1::Step::OP_REDUCE_SCATTER ? "reduce_scatter"
                                                         : "all_reduce";
    bool one_host = true;
    for (int d : group.devices()) {
      one_host = one_host && topology_.SameHost(d, group.devices(0));
    }
    const CollectiveCalibration* fit =
        topology_.CalibrationFor(name, one_host ? kIntraHost : kInterHost);
    if (fit == nullptr || !(fit->beta_seconds_per_byte > 0) ||
        !(fit->model_beta_seconds_per_byte > 0)) {
      return c;
    }
    c.byte_factor = fit->beta_seconds_per_byte / fit->model_beta_seconds_per_byte;
    c.setup = std::max(
        0.0, c.setup + fit->alpha_seconds - fit->model_alpha_seconds);
    return c;
  }

  absl::Status AddStep(const v1::Step& step, absl::Span<const int> deps) {
    if (step.bytes() < 0) {
      return StepError(step,
                       absl::StrCat("bytes must be >= 0, got ", step.bytes()));
    }
    const double bytes = static_cast<double>(step.bytes());
    const double setup = topology_.transfer_setup_seconds;
    switch (step.op()) {
      case v1::Step::OP_BROADCAST:
      case v1::Step::OP_SEND_RECV: {
        ASSIGN_OR_RETURN(
            const v1::CommGroup* group,
            GroupOf(step, 2,
                    step.op() == v1::Step::OP_SEND_RECV ? 2 : (1 << 30)));
        problem_.AddTask(setup, deps);
        uses_.clear();
        const absl::Span<const int> devices(group->devices().data(),
                                            group->devices_size());
        ASSIGN_OR_RETURN(const absl::Span<const int> parents,
                         RelayParents(step, *group));
        const RelayTail tail = AppendRelayTree(
            topology_, resources_, devices[0], devices.subspan(1), parents,
            step.bytes(), uses_, step.chunk_bytes());
        if (step.bytes() > 0) problem_.AddFlow(bytes, uses_);
        problem_.SetTail(tail);
        return absl::OkStatus();
      }
      case v1::Step::OP_ALL_GATHER:
      case v1::Step::OP_REDUCE_SCATTER:
      case v1::Step::OP_ALL_REDUCE: {
        ASSIGN_OR_RETURN(const v1::CommGroup* group,
                         GroupOf(step, 1, 1 << 30));
        const int n = group->devices_size();
        const HostGroups hosts = GroupByHost(*group);
        const Correction fix = CorrectionFor(step.op(), *group);
        if (hosts.Hierarchical()) {
          AddHierarchicalCollective(step.op(), hosts, n,
                                    bytes * fix.byte_factor, fix.setup, deps);
          return absl::OkStatus();
        }
        // Inside one host, or one device per host: a ring in rank order
        // (between hosts, exactly the engines' ring of workers).
        const int rounds =
            (step.op() == v1::Step::OP_ALL_REDUCE ? 2 : 1) * (n - 1);
        const double amount = bytes * fix.byte_factor * rounds / n;
        problem_.AddTask(fix.setup, deps);
        double latency = 0;
        for (int r = 0; r < n && n > 1; ++r) {
          uses_.clear();
          const HopLink link =
              AppendHop(topology_, resources_, group->devices(r),
                        group->devices((r + 1) % n), uses_);
          latency = std::max(latency, link.latency);
          if (amount > 0) problem_.AddFlow(amount, uses_);
        }
        problem_.SetTail(rounds * latency);
        return absl::OkStatus();
      }
      case v1::Step::OP_ALL_TO_ALL: {
        ASSIGN_OR_RETURN(const v1::CommGroup* group,
                         GroupOf(step, 1, 1 << 30));
        const int n = group->devices_size();
        if (step.counts_size() != n * n) {
          return StepError(step, absl::StrCat("counts has ", step.counts_size(),
                                              " entries; the group of ", n,
                                              " devices needs n x n = ",
                                              n * n));
        }
        int tensor = step.tensor();
        if (step.outputs_size() > 0) {
          ASSIGN_OR_RETURN(const v1::Buffer* out,
                           BufferOf(step, step.outputs(0), "outputs[0]"));
          tensor = out->tensor();
        }
        ASSIGN_OR_RETURN(const int element_bytes, ElementBytesOf(step, tensor));
        const Correction fix = CorrectionFor(step.op(), *group);
        problem_.AddTask(fix.setup, deps);
        double latency = 0;
        for (int r = 0; r < n; ++r) {
          for (int s = 0; s < n; ++s) {
            const int64_t count = step.counts(r * n + s);
            if (count < 0) {
              return StepError(step, absl::StrCat("counts[", r * n + s,
                                                  "] must be >= 0, got ",
                                                  count));
            }
            if (count == 0) continue;
            const double pair_bytes = static_cast<double>(count) * element_bytes;
            if (r == s) {
              AddDeviceWork(group->devices(r),
                            2 * pair_bytes / topology_.device_memory_bandwidth);
              continue;
            }
            uses_.clear();
            const HopLink link = AppendHop(topology_, resources_,
                                           group->devices(r),
                                           group->devices(s), uses_);
            latency = std::max(latency, link.latency);
            problem_.AddFlow(pair_bytes * fix.byte_factor, uses_);
          }
        }
        problem_.SetTail(latency);
        return absl::OkStatus();
      }
      case v1::Step::OP_LOCAL_COPY: {
        if (step.inputs_size() < 1 || step.outputs_size() < 1) {
          return StepError(step, "needs inputs[0] and outputs[0]");
        }
        ASSIGN_OR_RETURN(const v1::Buffer* in,
                         BufferOf(step, step.inputs(0), "inputs[0]"));
        ASSIGN_OR_RETURN(const v1::Buffer* out,
                         BufferOf(step, step.outputs(0), "outputs[0]"));
        problem_.AddTask(0, deps);
        if (in->device() == out->device()) {
          AddDeviceWork(in->device(),
                        2 * bytes / topology_.device_memory_bandwidth);
          return absl::OkStatus();
        }
        uses_.clear();
        const HopLink link =
            AppendHop(topology_, resources_, in->device(), out->device(), uses_);
        if (step.bytes() > 0) problem_.AddFlow(bytes, uses_);
        problem_.SetTail(link.latency);
        return absl::OkStatus();
      }
      case v1::Step::OP_COMPUTE: {
        if (!ValidDevice(step.device())) {
          return StepError(step, absl::StrCat("device ", step.device(),
                                              " is not a device of the "
                                              "topology (",
                                              AllowedDevices(), ")"));
        }
        if (!std::isfinite(step.flops()) || step.flops() < 0) {
          return StepError(step, absl::StrCat("flops must be >= 0 and finite, "
                                              "got ",
                                              step.flops()));
        }
        double touched = 0;
        for (int i = 0; i < step.inputs_size(); ++i) {
          ASSIGN_OR_RETURN(const double operand,
                           OperandBytes(step, step.inputs(i),
                                        absl::StrCat("inputs[", i, "]")));
          touched += operand;
        }
        // An accumulating GEMM reads C before it writes it.
        const int output_passes =
            step.compute().has_gemm() && step.compute().gemm().accumulate() ? 2
                                                                            : 1;
        for (int i = 0; i < step.outputs_size(); ++i) {
          ASSIGN_OR_RETURN(const double operand,
                           OperandBytes(step, step.outputs(i),
                                        absl::StrCat("outputs[", i, "]")));
          touched += output_passes * operand;
        }
        problem_.AddTask(0, deps);
        AddDeviceWork(step.device(),
                      std::max(step.flops() / topology_.device_flops,
                               touched / topology_.device_memory_bandwidth));
        return absl::OkStatus();
      }
      default:
        return StepError(step,
                         "op must be one of OP_BROADCAST, OP_SEND_RECV, "
                         "OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, "
                         "OP_ALL_TO_ALL, OP_LOCAL_COPY, OP_COMPUTE");
    }
  }

  const v1::Plan& plan_;
  const Topology& topology_;
  const NetworkResources resources_;
  FlowProblem problem_;
  absl::flat_hash_map<int, int> step_index_;
  absl::flat_hash_map<int, int> group_index_;
  absl::flat_hash_map<int, int> buffer_index_;
  std::vector<int> uses_;  // scratch: one flow's resources
};

// The busiest resource of each kind, in bytes, for one collective.
struct GroupLoads {
  double port = 0;  // a device port, either direction
  double nic = 0;   // a host NIC, either direction
  double copy = 0;  // a host's copy capacity
};

// Hosts a group spans and how many of its devices each holds.
struct GroupHosts {
  absl::flat_hash_map<int, int> devices_on;  // host -> group devices on it
  int spanned() const { return static_cast<int>(devices_on.size()); }
};

bool GroupFits(const std::vector<int>& devices, const Topology& topology) {
  if (!topology.Validate().ok()) return false;
  for (int device : devices) {
    if (device < 0 || device >= topology.num_devices()) return false;
  }
  return true;
}

GroupHosts HostsOf(const std::vector<int>& devices, const Topology& topology) {
  GroupHosts hosts;
  for (int device : devices) ++hosts.devices_on[topology.HostOf(device)];
  return hosts;
}

// The bound from the loads: each resource kind's bytes over its capacity
// plus the latency of the hops that can use it, the largest, plus setup.
double BoundFromLoads(const GroupLoads& loads, bool spans_hosts,
                      const Topology& topology) {
  const double cheapest_latency =
      spans_hosts
          ? std::min(topology.intra_host_latency, topology.inter_host_latency)
          : topology.intra_host_latency;
  double bound =
      loads.port / topology.intra_host_bandwidth + cheapest_latency;
  if (loads.nic > 0) {
    bound = std::max(bound, loads.nic / topology.inter_host_bandwidth +
                                topology.inter_host_latency);
  }
  if (topology.host_copy_bandwidth > 0 && loads.copy > 0) {
    bound = std::max(bound, loads.copy / topology.host_copy_bandwidth +
                                cheapest_latency);
  }
  return topology.transfer_setup_seconds + bound;
}

// All-to-all from a matrix of bytes per (sender rank, receiver rank).
double AllToAllBound(const std::vector<int>& devices,
                     const std::vector<double>& pair_bytes,
                     const Topology& topology) {
  const int n = static_cast<int>(devices.size());
  absl::flat_hash_map<int, double> device_out, device_in, host_out, host_in,
      copy;
  bool moves = false;
  bool crosses = false;
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      const double b = pair_bytes[r * n + s];
      if (r == s || b <= 0) continue;
      moves = true;
      device_out[devices[r]] += b;
      device_in[devices[s]] += b;
      const int from = topology.HostOf(devices[r]);
      const int to = topology.HostOf(devices[s]);
      copy[from] += b;  // the memcpy or the pack at the sender's host
      if (from != to) {
        crosses = true;
        host_out[from] += b;
        host_in[to] += b;
        copy[to] += b;  // the unpack
      }
    }
  }
  if (!moves) return 0;
  GroupLoads loads;
  for (const auto* map : {&device_out, &device_in}) {
    for (const auto& [unit, b] : *map) loads.port = std::max(loads.port, b);
  }
  for (const auto* map : {&host_out, &host_in}) {
    for (const auto& [unit, b] : *map) loads.nic = std::max(loads.nic, b);
  }
  for (const auto& [host, b] : copy) loads.copy = std::max(loads.copy, b);
  return BoundFromLoads(loads, crosses, topology);
}

}  // namespace

absl::StatusOr<PlanSimulation> SimulatePlan(const v1::Plan& plan,
                                            const Topology& topology) {
  RETURN_IF_ERROR(topology.Validate());
  return PlanModeler(plan, topology).Run();
}

double AllToAllLowerBoundSeconds(const std::vector<int>& group_devices,
                                 const std::vector<int64_t>& pair_bytes,
                                 const Topology& topology) {
  const size_t n = group_devices.size();
  if (!GroupFits(group_devices, topology) || pair_bytes.size() != n * n) {
    return 0;
  }
  return AllToAllBound(
      group_devices, std::vector<double>(pair_bytes.begin(), pair_bytes.end()),
      topology);
}

double CollectiveLowerBoundSeconds(v1::Step::Op op,
                                   const std::vector<int>& group_devices,
                                   int64_t bytes, const Topology& topology) {
  const int n = static_cast<int>(group_devices.size());
  if (n < 2 || bytes <= 0 || !GroupFits(group_devices, topology)) return 0;
  const double b = static_cast<double>(bytes);
  const GroupHosts hosts = HostsOf(group_devices, topology);
  const int h = hosts.spanned();
  const bool spans = h > 1;
  GroupLoads loads;
  switch (op) {
    case v1::Step::OP_BROADCAST:
    case v1::Step::OP_SEND_RECV:
    case v1::Step::OP_LOCAL_COPY: {
      // Every receiver takes in B; the root sends B at least once. Each
      // host other than the root's takes B in; the root's host sends it
      // out. Every hop into a device of h uses h's copy once (a memcpy or
      // an unpack), and the root's host packs B once more when other hosts
      // need it.
      loads.port = b;
      loads.nic = spans ? b : 0;
      const int root_host = topology.HostOf(group_devices[0]);
      for (const auto& [host, k] : hosts.devices_on) {
        const double passes =
            host == root_host ? (k - 1) + (spans ? 1 : 0) : k;
        loads.copy = std::max(loads.copy, passes * b);
      }
      break;
    }
    case v1::Step::OP_ALL_GATHER:
    case v1::Step::OP_REDUCE_SCATTER: {
      // All-gather: device ingress (n-1)/n B, host h ingress (n-k_h)/n B;
      // every hop into a device of h uses h's copy, and h's own k_h chunks
      // leave it at least once (a pack) when other hosts need them.
      // Reduce-scatter mirrors it: device egress (n-1)/n B, host egress
      // (n-k_h)/n B; every hop out of a device of h uses h's copy, and the
      // k_h chunks h ends with take in k_h/n B from other hosts (unpacks).
      loads.port = b * (n - 1) / n;
      for (const auto& [host, k] : hosts.devices_on) {
        if (spans) loads.nic = std::max(loads.nic, b * (n - k) / n);
        const double crossing = spans ? b * k / n : 0;
        loads.copy = std::max(loads.copy, b * k * (n - 1) / n + crossing);
      }
      break;
    }
    case v1::Step::OP_ALL_REDUCE: {
      // 2(n-1) one-way messages per element among the devices, 2(h-1)
      // among the hosts: the busiest port and NIC carry at least the
      // average. Every hop uses its sender host's copy once, and every hop
      // between hosts the receiver's once more: spread over the h hosts.
      loads.port = 2 * b * (n - 1) / n;
      if (spans) loads.nic = 2 * b * (h - 1) / h;
      loads.copy = (2 * b * (n - 1) + 2 * b * (h - 1)) / h;
      break;
    }
    case v1::Step::OP_ALL_TO_ALL: {
      // B is each rank's send buffer, B/n to every rank.
      return AllToAllBound(group_devices,
                           std::vector<double>(n * n, b / n), topology);
    }
    default:
      return 0;
  }
  return BoundFromLoads(loads, spans, topology);
}

absl::StatusOr<PlanSimulation> PredictPlan(v1::Plan& plan,
                                           const Topology& topology) {
  ASSIGN_OR_RETURN(PlanSimulation simulation, SimulatePlan(plan, topology));
  plan.set_predicted_seconds(simulation.seconds);
  plan.clear_predicted_step_start();
  plan.clear_predicted_step_finish();
  for (double t : simulation.step_start) plan.add_predicted_step_start(t);
  for (double t : simulation.step_finish) plan.add_predicted_step_finish(t);
  return simulation;
}

}  // namespace meshcast
