// RelaySchedule: the order in which one worker issues the operations of a
// relay tree (a chain is the tree whose position p has parent p - 1) that
// crosses workers on GPUs (the scheduling half of device_relay.cc, kept free
// of CUDA and NCCL so that host tests can check it; docs/gpu.md, "How a job
// runs").
//
// The tree is cut into runs (CutIntoRuns): a position joins its parent's run
// when both are on one NCCL rank, else it roots a new run whose parent run
// is its parent's. A run is thus a connected piece of the tree on one rank
// (a maximal stretch of consecutive positions, in a chain); runs are
// numbered by root position, so a parent run precedes its children. Run 0
// holds the sender and has depth 0; a child run is one deeper than its
// parent. The slice moves in `chunks` chunks as a wavefront of rounds, one
// NCCL group per round on each worker:
//   - run 0 packs chunk g (if it is not one tile segment) before the group
//     of round g and sends it to each of its child runs in that group;
//   - a run of depth d >= 1 receives chunk g from its parent run in the
//     group of round ArrivalRound(run, g) = g + d - 1 and forwards it to
//     each of its child runs in the next round's group (while receiving
//     chunk g + 1), so every link of the tree is busy at once and the
//     step takes chunks + (max depth) - 1 rounds;
//   - after the group of the round in which a run got chunk g (run 0: sent
//     it), the run's local receivers take it (kDeliver).
// A chunk lives in its run's "home": the run's root tile when it is one
// contiguous segment there, else staging slot `g % slots`. With two slots a
// slot is written again only two rounds after the chunk in it arrived, by
// which time that chunk has been delivered (same round) and forwarded to
// every child run (next round, all in one group).
//
// Ordering contract with the executor: every operation of a run is issued on
// the one stream of its rank's GPU (runs on one rank share it), in the order
// Round() lists them: before_group, then group (one ncclGroupStart/End per
// worker per round), then after_group. Nothing else orders them: an
// operation waits exactly for what was issued before it on its stream, and
// for its NCCL peer within the group. Within a group, operations run
// concurrently, so a group never writes a slot that a same-group operation
// reads. NCCL matches sends and receives between two ranks by issue order;
// every worker derives the same schedule from the same tree, ranks and
// chunk count, and lists a round's group operations link by link in the
// order of the child run (the parent's send, then the child's receive), so
// the k-th send from rank A to rank B in a round is the k-th receive on B
// from A in that round, also when one run feeds two runs on one rank or two
// runs of A feed runs of B (relay_schedule_test.cc checks this and the slot
// rule for many chains and trees).
//
//   ASSIGN_OR_RETURN(std::vector<RelayRun> runs,
//                    CutIntoRuns(ranks, local, parents));
//   ASSIGN_OR_RETURN(RelaySchedule schedule,
//                    RelaySchedule::Create(std::move(runs), chunks));
//   for (int64_t t = 0; t < schedule.rounds(); ++t) {
//     const RelayRound round = schedule.Round(t);
//     ...  // packs; GroupStart; sends and receives; GroupEnd; deliveries
//   }
//
// Thread safety: immutable after Create; pure functions.
#ifndef MESHCAST_WORKER_CUDA_RELAY_SCHEDULE_H_
#define MESHCAST_WORKER_CUDA_RELAY_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace meshcast::worker::cuda {

// Staging slots per run: chunk g is received while chunk g - 1 is forwarded.
inline constexpr int kRelaySlots = 2;

// A connected piece of the relay tree on one NCCL rank: the sender's, or
// the positions that one link from another rank feeds.
struct RelayRun {
  // Ascending. positions[0] is the root: position 0 in run 0, else the one
  // position whose parent is in the parent run.
  std::vector<int> positions;
  int rank = -1;       // NCCL rank
  bool local = false;  // on this worker
  int parent = -1;     // the run that forwards to this one; -1 for run 0
  int root() const { return positions.front(); }
};

// Cuts a relay tree into runs. By position p: position_rank[p] is its NCCL
// rank, position_local[p] whether it is on this worker, parents[p] the
// position that forwards to it (StepDesc::parents: parents[0] = -1, else
// 0 <= parents[p] < p). InvalidArgument for an empty tree, mismatched
// sizes, a bad parent, a negative rank, or positions of one rank that
// disagree about being local.
absl::StatusOr<std::vector<RelayRun>> CutIntoRuns(
    const std::vector<int>& position_rank,
    const std::vector<bool>& position_local, const std::vector<int>& parents);

enum class RelayOpKind {
  kPack,     // run 0: pack the chunk from its tile into its slot (skipped
             // when the chunk is one tile segment)
  kRecv,     // run j >= 1: receive the chunk from its parent run into its
             // home
  kSend,     // send the chunk from its home to one child run
  kDeliver,  // copy the chunk from its home into the run's local receivers
};

const char* RelayOpKindName(RelayOpKind kind);

struct RelayOp {
  RelayOpKind kind = RelayOpKind::kPack;
  int run = 0;
  int64_t chunk = 0;
  int slot = 0;       // the chunk's staging slot in its run (chunk % slots)
  int peer_run = -1;  // kSend: the child run; kRecv: the parent run; else -1
};

// One worker's operations of one round, in issue order.
struct RelayRound {
  std::vector<RelayOp> before_group;  // kPack
  std::vector<RelayOp> group;         // kRecv, kSend: one NCCL group
  std::vector<RelayOp> after_group;   // kDeliver
  bool empty() const {
    return before_group.empty() && group.empty() && after_group.empty();
  }
};

class RelaySchedule {
 public:
  // `runs` as CutIntoRuns makes them (at least two; run 0 roots at position
  // 0; roots ascending; each parent run earlier and on another rank; every
  // position in exactly one run), `chunks` >= 1. `slots` is kRelaySlots in
  // the executor; other values exist for tests. InvalidArgument otherwise.
  static absl::StatusOr<RelaySchedule> Create(std::vector<RelayRun> runs,
                                              int64_t chunks,
                                              int slots = kRelaySlots);

  const std::vector<RelayRun>& runs() const { return runs_; }
  int64_t chunks() const { return chunks_; }
  int slots() const { return slots_; }
  // Links from run 0 to `run` (0 for run 0).
  int depth(int run) const { return depth_[run]; }
  // The round whose group moves chunk g into `run` (depth >= 1), or in
  // which run 0 sends it.
  int64_t ArrivalRound(int run, int64_t chunk) const {
    return run == 0 ? chunk : chunk + depth_[run] - 1;
  }
  // Whether `run` has local receivers that take chunks from its home: all
  // positions of a run j >= 1 (its root too, unless NCCL received into its
  // tile), run 0's positions other than the sender.
  bool Delivers(int run) const;
  // This worker's operations all lie in rounds [0, rounds()); 0 when it has
  // no local run.
  int64_t rounds() const { return rounds_; }
  // This worker's operations of round t (empty outside [0, rounds()) and
  // in rounds where its runs are idle).
  RelayRound Round(int64_t t) const;

 private:
  RelaySchedule(std::vector<RelayRun> runs, int64_t chunks, int slots);

  std::vector<RelayRun> runs_;
  int64_t chunks_ = 0;
  int slots_ = kRelaySlots;
  std::vector<int> depth_;      // by run
  std::vector<bool> forwards_;  // by run: has a child run
  int64_t rounds_ = 0;
};

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_RELAY_SCHEDULE_H_
