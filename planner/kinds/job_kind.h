// JobKind: one job kind (reshard, collective, ...) as a plug-in. Each kind
// implements this small interface; the controller's job manager, the Plan
// RPC and `meshctl plan` (offline) reach every kind through it and know
// nothing of any kind's spec.
//
//   ASSIGN_OR_RETURN(const JobKind* kind, FindJobKind(spec));
//   RETURN_IF_ERROR(kind->Validate(spec));                  // at submit
//   ASSIGN_OR_RETURN(PlacementRequest meshes, kind->Meshes(spec));
//   ... Placement placement = allocator.Acquire(meshes, topology, ...);
//   ASSIGN_OR_RETURN(PlannedJob planned,
//                    kind->Plan(spec, placement.meshes, topology, {}));
//   ... run planned.plan on the workers, gather v1::JobResult result ...
//   kind->Summarize(spec, planned.plan, result);  // fills result.metrics
//
// Adding a kind: a `JobSpec` oneof field in proto/meshcast/v1/job.proto, a
// folder planner/kinds/<kind>/ with a JobKind implementation, one line in
// job_kinds.cc, and kernels for any new op on the workers
// (docs/architecture.md walks through `collective`).
//
// Contract:
//  - Validate needs no cluster: field syntax, names, ranks. Errors are
//    INVALID_ARGUMENT and name the field and the allowed values.
//  - Meshes returns the meshes the job needs, in the kind's order, as
//    placement requests (planner/placement.h places them).
//  - Plan builds the complete Plan IR (proto/meshcast/v1/plan.proto) for
//    meshes placed on `topology`: tensors, initializers, buffers, groups and
//    the step DAG, plan.kind set, predicted and lower-bound seconds filled by
//    the simulator; with alternatives (a kind's strategies or schedules), one
//    row per alternative, the chosen one marked.
//  - Summarize derives the kind's named figures (JobResult.metrics, base
//    units) from the workers' merged result; it never fails (a figure it
//    cannot compute is left out).
//
// Thread safety: kinds are stateless; every method may be called
// concurrently.
#ifndef MESHCAST_PLANNER_KINDS_JOB_KIND_H_
#define MESHCAST_PLANNER_KINDS_JOB_KIND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/controller.pb.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/mesh.h"
#include "planner/placement.h"
#include "planner/topology.h"

namespace meshcast {

// One alternative a kind considered (a resharding strategy, a collective
// algorithm, a schedule), as `meshctl plan` and the Plan RPC list them.
struct PlanAlternative {
  std::string name;
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  int steps = 0;      // steps of that alternative's plan
  int64_t bytes = 0;  // sum of its steps' bytes
  bool chosen = false;
  // The most bytes it keeps on one device, where the kind predicts it (a
  // pipeline schedule's activations); 0 = not predicted.
  int64_t peak_memory_bytes = 0;
  // Why the kind would not choose it on its own ("" when it may).
  std::string note;
};

struct PlannedJob {
  v1::Plan plan;  // the chosen plan
  // Empty unless PlanOptions::compare_all or the kind chose among several.
  std::vector<PlanAlternative> alternatives;
};

struct PlanOptions {
  // Plan and simulate every alternative into PlannedJob::alternatives even
  // when the spec forces one (`meshctl plan` tables, the Plan RPC).
  bool compare_all = false;
};

class JobKind {
 public:
  virtual ~JobKind() = default;

  // "reshard", "collective": the JobSpec oneof field name.
  virtual std::string name() const = 0;

  virtual absl::Status Validate(const v1::JobSpec& spec) const = 0;

  virtual absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const = 0;

  // `meshes` parallel to Meshes(spec).meshes, as placed.
  virtual absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                          const std::vector<DeviceMesh>& meshes,
                                          const Topology& topology,
                                          const PlanOptions& options) const = 0;

  virtual void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                         v1::JobResult& result) const = 0;

  // The measured seconds that the plan's predicted_seconds stands for, from
  // a summarized result (the measured/predicted metrics compare the two):
  // the whole job by default. A kind whose plan runs more than its
  // prediction covers (tp_overlap measures the GEMM and the collective
  // alone before the mode) returns the span the prediction is for.
  virtual double PredictedSpanSeconds(const v1::JobResult& result) const {
    return result.seconds();
  }

  // What a successful job measured of the cluster's links, from its
  // summarized result (the calibrate kind's fit); empty for the other
  // kinds. The controller attaches the latest to the topology it plans on.
  virtual std::vector<CollectiveCalibration> Calibration(
      const v1::JobSpec& spec, const v1::JobResult& result) const {
    return {};
  }
};

// Shared by the kinds' Validate and Plan:
// OK when low <= value <= high, else INVALID_ARGUMENT "FIELD is VALUE;
// allowed: LOW..HIGH" (`field` in full, e.g. "moe.tokens").
absl::Status CheckSpecRange(absl::string_view field, int64_t value,
                            int64_t low, int64_t high);
// One alternative as the Plan RPC and `meshctl plan` carry it.
v1::StrategyRow AlternativeToRow(const PlanAlternative& alternative);
// The sum of a plan's Step.bytes (the bytes column of `meshctl plan`).
int64_t PlanStepBytes(const v1::Plan& plan);

// The kind of `spec` (by its oneof field); INVALID_ARGUMENT naming the
// known kinds when the spec sets none.
absl::StatusOr<const JobKind*> FindJobKind(const v1::JobSpec& spec);
// By name ("reshard"); NOT_FOUND listing the known names.
absl::StatusOr<const JobKind*> FindJobKindByName(absl::string_view name);
// Every registered kind, in registration order.
std::vector<const JobKind*> AllJobKinds();

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_JOB_KIND_H_
