// Lowering of a `moe` job (one MoE layer under MP + EP + ESP) to the plan
// IR, in one of three schedules, and the routing every schedule shares.
//
//   MoeShape shape;  shape.tokens = 1024; shape.hidden = 512; ...
//   const MoeRouting routing = RouteTokens(shape);
//   ASSIGN_OR_RETURN(v1::Plan plan,
//                    LowerMoe(shape, routing, MoeSchedule::kS1, 1, devices));
//
// Layout. The mesh is ep x n (n = mp = esp): device (g, j) = devices[g n +
// j]; row g is one host (an MP group, which is also the ESP group), column
// j one EP group. Expert e lives on EP rank e / El (El = E / ep experts per
// rank), sharded over its MP group: device (g, j) holds the j-th n-th of the
// FFN width of each of its El experts.
//
// Data (seeded random, uniform in [-1, 1)): X [T, M] (T = ep B tokens; MP
// group g holds rows [g B, (g+1) B), replicated on its n devices), the gate
// Wg [M, E], W1 [E, M, H], W2 [E, H, M].
//
// Routing (RouteTokens; fixed when planning, so every schedule routes the
// same tokens and every all-to-all has static sizes): token t picks the k
// experts with the highest seeded scores s(t, e) = log(u(t, e)) / w_e, u a
// hash of (seed, t, e) in (0, 1) and w_e = (e + 1)^-expert_skew: a weighted
// draw of k distinct experts with probabilities proportional to w_e
// (uniform without skew).
// MP group g's tokens are split into n slices of B / n ("MP split": slice
// j is rows [g B + j B/n, g B + (j+1) B/n)); each (slice, expert) has C =
// ceil(capacity_factor k (B/n) / E) slots, filled in priority order: every
// token's first choice (in token order), then every second choice, ...;
// choices beyond C are dropped. Schedules differ in where work runs, never
// in which slot a choice takes.
//
// The layer (what every schedule computes and the reference checks):
//   L = X Wg / sqrt(M)                       gate logits
//   w(t, i) = sigmoid(L[t, e(t, i)])         gate weight of choice i
//   Y[t] = sum over kept choices i of w(t, i) FFN_e(t,i)(X[t])
//   FFN_e(x) = relu(x W1[e] / sqrt(M)) W2[e] / sqrt(H)
// Y [T, M] is the job's DESTINATION, on every device of each MP group.
//
// Backward (shape.backward): from a seeded output gradient dY [T, M]
// (tensor 8), with z = x W1[e] / sqrt(M) and h = relu(z) of each kept
// choice (t, i) of expert e, o = h W2[e] / sqrt(H) its FFN output:
//   dw(t, i) = dY[t] . o                  dL[t, e] = dw w (1 - w)
//   dh = w dY[t] W2[e]^T / sqrt(H)        dz = dh where z > 0, else 0
//   dW2[e] += h^T w dY[t] / sqrt(H)       dW1[e] += X[t]^T dz / sqrt(M)
//   dX[t] += dz W1[e]^T / sqrt(M) + dL[t] Wg^T / sqrt(M)
//   dWg += X[t]^T dL[t] / sqrt(M)
// The DESTINATIONs dX [T, M] (tensor 9, every device of each MP group),
// dWg [M, E] (10, every device), dW1 [E, M, H] (11) and dW2 [E, H, M] (12),
// each device holding its experts' FFN shard. The backward mirrors the
// forward schedule: dYE takes the dispatch's path (in `chunks` pieces for
// s2, each followed by its ESP all-gather), the dXE partials are reduced
// as the expert outputs were (reduce-scatter, or all-reduce for the
// baseline) and return on the combine's path; the row dots and dL run where
// the combine ran, and the partial dWg of each device's gate rows is
// all-reduced over the whole mesh (over each EP group for the baseline,
// whose MP ranks hold the same rows).
//
// Schedules (stages: MoePhase; the all-to-alls run over every device of the
// mesh with zero counts between different EP groups, i.e. the ep-sized EP
// groups side by side):
//  - kBaseline: every device of MP group g repeats the gate and dispatch on
//    all B tokens, so each EP group moves the same n-fold data: dispatch
//    blocks of n C slots per (sender, expert); each device computes its FFN
//    shard on all rows it received, partial outputs are all-reduced in the
//    MP group, sent back, and every device combines all B tokens.
//  - kS1: MP paused. Device (g, j) gates, dispatches and combines slice j
//    only; blocks of C slots; the ESP group all-gathers the received rows
//    before the FFN shards and reduce-scatters the partial outputs after
//    them (each device gets back the rows it received); after the combine,
//    an MP all-gather of the n slices restores Y on every device.
//  - kS2: kS1 with the capacity split into `chunks` pieces, each piece's
//    all-to-all followed by its own ESP all-gather, so the intra-host
//    gather of one piece overlaps the inter-host all-to-all of the next;
//    on the combine side the MP all-gather moves to right after each
//    piece's all-to-all, and every device combines all B tokens (no final
//    all-gather of Y; the gate weights are all-gathered instead).
// Tensors per MP group g ("per group"): the expert input XE_g [J, ep, El,
// Cs, M] (J = n for s1/s2, 1 for the baseline; Cs = C, or n C for the
// baseline), hidden H1_g [n, El, J, ep, Cs, H/n], partial outputs P_g [n, J,
// ep, El, Cs, M] and expert outputs YE_g [J, ep, El, Cs, M]. All-to-all
// tensors are 1-D, in the IR's sender-major / receiver-major order.
//
// Errors: INVALID_ARGUMENT when the shape does not fit the mesh (the
// kind validates first; these guard direct callers).
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_MOE_MOE_LOWERING_H_
#define MESHCAST_PLANNER_KINDS_MOE_MOE_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast {

struct MoeShape {
  int64_t tokens = 0;  // B, per MP group
  int64_t hidden = 0;  // M
  int64_t ffn = 0;     // H
  int experts = 0;     // E
  int top_k = 2;
  double capacity_factor = 1.0;
  int mp = 1;  // n (= esp)
  int ep = 1;
  DType dtype = DType::kFloat32;
  uint64_t seed = 1;
  double expert_skew = 0;  // expert e's weight is (e + 1)^-skew
  // Also the backward pass: the gradients of X and of every weight from a
  // seeded output gradient dY (see the top of the file).
  bool backward = false;

  int64_t slice() const { return tokens / mp; }
  int local_experts() const { return experts / ep; }
  int64_t total_tokens() const { return tokens * ep; }
  // Slots per (MP slice, expert).
  int64_t capacity() const;
};

enum class MoeSchedule { kBaseline, kS1, kS2, kAuto };

std::string MoeScheduleName(MoeSchedule schedule);
// "baseline", "s1", "s2", "auto" (empty: auto).
absl::StatusOr<MoeSchedule> MoeScheduleFromName(absl::string_view name);

// Step.stage of each step, so results can be summed by phase.
enum MoePhase : int {
  kPhaseGate = 0,       // gate GEMM, choice logits, sigmoid (s2: gathered)
  kPhaseDispatch = 1,   // the order (gather into slots) and the all-to-all
  kPhaseEspGather = 2,  // ESP all-gather, expert-input layout
  kPhaseExperts = 3,    // FFN GEMMs and ReLU
  kPhaseEspReduce = 4,  // ESP reduce-scatter / all-reduce
  kPhaseCombine = 5,    // all-to-all back, all-gathers, weighted combine
  // The backward pass, phase by phase in the reverse order; each is the
  // adjoint of the forward phase it names.
  kPhaseCombineBackward = 6,    // dw (row dots), dYE, the all-to-all of dYE
  kPhaseEspReduceBackward = 7,  // the ESP all-gather of dYE (s1, s2)
  kPhaseExpertsBackward = 8,    // dH, dW2, dW1, dXE partials
  kPhaseEspGatherBackward = 9,  // ESP reduce-scatter / all-reduce of dXE
  kPhaseDispatchBackward = 10,  // the all-to-all of dXE back, dX rows
  kPhaseGateBackward = 11,      // dL, dX += dL Wg^T, dWg and its all-reduce
};
inline constexpr int kMoePhases = 12;
// "gate", "dispatch", "esp_gather", "experts", "esp_reduce", "combine", then
// the same with "_backward" in the order above.
const char* MoePhaseName(int phase);

struct MoeRouting {
  int64_t capacity = 0;  // C
  // Per choice (t * k + i, t global): the expert and its slot in its
  // (slice, expert) bucket, or -1 when dropped.
  std::vector<int32_t> expert;
  std::vector<int64_t> slot;
  int64_t dropped = 0;
  std::vector<int64_t> load;  // choices per expert, before dropping
};

// The routing of `shape` (see the top of the file). O(T E log k).
MoeRouting RouteTokens(const MoeShape& shape);

// The plan of `schedule` (not kAuto) with `chunks` pieces (kS2 only; 1
// otherwise, clamped to [1, C]) on `devices` (ep * mp global ids,
// row-major). Not simulated.
absl::StatusOr<v1::Plan> LowerMoe(const MoeShape& shape,
                                  const MoeRouting& routing,
                                  MoeSchedule schedule, int chunks,
                                  const std::vector<int>& devices);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_MOE_MOE_LOWERING_H_
