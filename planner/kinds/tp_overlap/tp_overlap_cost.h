// The cost model of `tp_overlap` jobs: how long each mode (sequential,
// chunked, fused) takes for a GEMM + collective on a topology, and which
// chunk count and mode are fastest (what `auto` picks and `meshctl plan`
// lists).
//
//   ASSIGN_OR_RETURN(TpPrediction best,
//                    PredictBestTpMode(shape, TpMode::kAuto, 0, devices,
//                                      topology, TpCostModel{}));
//   // best.lowering.plan: the chosen plan, already simulated;
//   // best.alternatives: each mode's best (name, predicted seconds).
//
// Model. Every candidate is lowered to the plan IR (tp_overlap_lowering.h)
// and timed by the plan simulator (planner/sim/plan_simulator.h), which
// already charges OP_COMPUTE flops / Topology.device_flops on the device's
// compute resource (shared max-min fairly with the ring's elementwise adds)
// and every communication step its alpha-beta flow time. What the simulator
// does not know is that a GEMM over few rows runs below the device's peak:
// small chunks and tiles fill the machine badly (fewer blocks per wave on
// a GPU, short panels and per-call dispatch on a CPU). We model that as
//
//   efficiency(rows) = rows / (rows + half_rate_rows)
//
// so a GEMM slab of `rows` output rows runs at efficiency x peak, i.e. it
// costs 2 (rows + half_rate_rows) n k operations at peak: the same as a
// fixed overhead of half_rate_rows rows of work per GEMM step. The lowering
// writes that EFFECTIVE operation count into Step.flops of every GEMM step
// (and nothing else reads Step.flops), so the unchanged simulator times
// each chunk or tile at its reduced rate. No simulator hook is needed.
// half_rate_rows defaults to 16: a CPU BLAS GEMM with n, k in the hundreds
// or more reaches most of its rate from a few dozen rows on; for GPU-class
// device rates (TpCostModel::ForDeviceFlops, what the kind uses) it is 128:
// one block row per SM wave.
//
// The fused ring's elementwise additions are timed as the reductions
// inside a simulated OP_REDUCE_SCATTER / OP_ALL_REDUCE are: not at all (the
// prediction runs on a twin of the plan whose additions touch nothing), so
// chunked and fused are compared on the same terms. Both run their
// reductions on threads beside the GEMM (CPU workers: other cores), not on
// the GEMM's compute. The predicted step times written into the plan are
// the twin's.
//
// The mode phase only is predicted (the plan's measurement stages 0 and 1
// are the same for every candidate): the span from the first start to the
// last finish of the steps of stage >= kStageModeComm.
//
// Candidates: sequential (1 chunk); chunked with 2, 4, 8, 16 chunks where
// the rows allow (TpCandidateChunks); fused with j = 1, 2, 4, 8 chunks per
// rank (tp * j chunks). A forced mode with chunks = 0 searches its own
// candidates; chunks > 0 is taken as given. Ties go to the earlier
// candidate (fewer chunks, sequential before chunked before fused).
//
// Crowded cores. Where CPU devices have less than a core each
// (Topology::cpu_cores_per_device < 1: emulated hosts or several workers
// on one machine), `auto` picks among sequential's candidates only; the
// overlap modes are still predicted and listed, with a note saying why.
// The simulator gives every device a compute resource of its own, and
// an overlap mode needs cores beside the GEMMs for the communicator's
// threads and the ring's additions. Where the GEMMs already share cores
// they have none, and every hand-off of a ring step waits for the
// scheduler: measured on 4 emulated hosts on 2 cores, chunked and fused
// ran 3.2-3.8x over their predictions and took 1.4-1.9x sequential's
// time (docs/benchmarks.md, tp_overlap bench). A forced mode still runs.
//
// Errors: INVALID_ARGUMENT from the lowering (chunks not allowed) or the
// simulator (a topology that lacks the devices).
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_COST_H_
#define MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_COST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/kinds/tp_overlap/tp_overlap_lowering.h"
#include "planner/topology.h"

namespace meshcast {

// rows / (rows + half_rate_rows): 0 for rows <= 0.
double GemmEfficiency(int64_t rows, const TpCostModel& model);

// The operation count the simulator is given for a GEMM slab of
// rows x n x k: 2 rows n k / GemmEfficiency(rows).
double EffectiveGemmFlops(int64_t rows, int64_t n, int64_t k,
                          const TpCostModel& model);

// The mode phase of a simulated plan (steps of stage >= kStageModeComm):
// last finish - first start. 0 when the plan has no such step or was not
// simulated.
double ModePhaseSeconds(const v1::Plan& plan);

// One candidate, lowered and simulated.
struct TpPrediction {
  TpMode mode = TpMode::kSequential;
  int chunks = 1;
  std::string name;     // TpStrategyName(mode, chunks)
  double seconds = 0;   // ModePhaseSeconds
  TpLowering lowering;  // plan.predicted_* filled by the simulator
};

// A row of the comparison: the best of one mode (or, for a forced mode, one
// chunk count).
struct TpAlternative {
  std::string name;
  double seconds = 0;
  int steps = 0;
  int64_t bytes = 0;
  std::string note;  // why `auto` may not pick it; "" when it may
};

struct TpSearch {
  TpPrediction best;
  std::vector<TpAlternative> alternatives;  // in candidate order
};

// Lowers and simulates one candidate.
absl::StatusOr<TpPrediction> PredictTpMode(const TpShape& shape, TpMode mode,
                                           int chunks,
                                           const std::vector<int>& devices,
                                           const Topology& topology,
                                           const TpCostModel& model);

// The fastest candidate for `mode` (kAuto: every mode) and `chunks` (0: the
// cost model's pick). alternatives: kAuto or `all_modes`: each mode's best;
// otherwise each chunk count tried for the mode.
absl::StatusOr<TpSearch> SearchTpModes(const TpShape& shape, TpMode mode,
                                       int chunks,
                                       const std::vector<int>& devices,
                                       const Topology& topology,
                                       const TpCostModel& model,
                                       bool all_modes);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_COST_H_
