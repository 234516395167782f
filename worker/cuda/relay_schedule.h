// RelaySchedule: the order in which one worker issues the operations of a
// relay chain that crosses workers on GPUs (the scheduling half of
// device_relay.cc, kept free of CUDA and NCCL so that host tests can check
// it; docs/gpu.md, "How a job runs").
//
// The chain is cut into runs: maximal stretches of consecutive positions on
// one NCCL rank (CutIntoRuns). The slice moves in `chunks` chunks as a
// wavefront of rounds, one NCCL group per round on each worker:
//   - run 0 packs chunk g (if it is not one tile segment) before the group
//     of round g and sends it to run 1 in that group;
//   - run j >= 1 receives chunk g from run j - 1 in the group of round
//     ArrivalRound(j, g) = g + j - 1 and, if another run follows, forwards
//     it to run j + 1 in the next round's group (while receiving chunk
//     g + 1), so every link of the chain is busy at once;
//   - after the group of the round in which a run got chunk g (run 0: sent
//     it), the run's local receivers take it (kDeliver).
// A chunk lives in its run's "home": the run's first tile when it is one
// contiguous segment there, else staging slot `g % slots`. With two slots a
// slot is written again only two rounds after the chunk in it arrived, by
// which time that chunk has been delivered (same round) and forwarded (next
// round).
//
// Ordering contract with the executor: every operation of a run is issued on
// the one stream of its rank's GPU (runs on one rank share it), in the order
// Round() lists them: before_group, then group (one ncclGroupStart/End per
// worker per round), then after_group. Nothing else orders them: an
// operation waits exactly for what was issued before it on its stream, and
// for its NCCL peer within the group. Within a group, operations run
// concurrently, so a group never writes a slot that a same-group operation
// reads. NCCL matches sends and receives between two ranks by issue order;
// every worker derives the same schedule from the same chain and chunk
// count and lists group operations in chain order, so the k-th send from
// rank A to rank B in a round is the k-th receive on B from A in that round
// (relay_schedule_test.cc checks this and the slot rule for many chains).
//
//   ASSIGN_OR_RETURN(std::vector<RelayRun> runs, CutIntoRuns(ranks, local));
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

// A maximal stretch of chain positions on one NCCL rank.
struct RelayRun {
  int first = 0;  // chain positions [first, last]
  int last = 0;
  int rank = -1;       // NCCL rank
  bool local = false;  // on this worker
};

// Cuts a chain into runs; position_rank[p] is the NCCL rank of position p,
// position_local[p] whether it is on this worker. InvalidArgument for an
// empty chain, mismatched sizes, a negative rank, or positions of one rank
// that disagree about being local.
absl::StatusOr<std::vector<RelayRun>> CutIntoRuns(
    const std::vector<int>& position_rank,
    const std::vector<bool>& position_local);

enum class RelayOpKind {
  kPack,     // run 0: pack the chunk from its tile into its slot (skipped
             // when the chunk is one tile segment)
  kRecv,     // run j >= 1: receive the chunk from run j - 1 into its home
  kSend,     // send the chunk from its home to run j + 1
  kDeliver,  // copy the chunk from its home into the run's local receivers
};

const char* RelayOpKindName(RelayOpKind kind);

struct RelayOp {
  RelayOpKind kind = RelayOpKind::kPack;
  int run = 0;
  int64_t chunk = 0;
  int slot = 0;       // the chunk's staging slot in its run (chunk % slots)
  int peer_run = -1;  // kSend: run + 1; kRecv: run - 1; else -1
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
  // `runs` as CutIntoRuns makes them (at least two, consecutive runs on
  // different ranks), `chunks` >= 1. `slots` is kRelaySlots in the
  // executor; other values exist for tests. InvalidArgument otherwise.
  static absl::StatusOr<RelaySchedule> Create(std::vector<RelayRun> runs,
                                              int64_t chunks,
                                              int slots = kRelaySlots);

  // The round whose group moves chunk g into run j (j >= 1), or in which
  // run 0 sends it (j == 0).
  static int64_t ArrivalRound(int run, int64_t chunk) {
    return run == 0 ? chunk : chunk + run - 1;
  }

  const std::vector<RelayRun>& runs() const { return runs_; }
  int64_t chunks() const { return chunks_; }
  int slots() const { return slots_; }
  // Whether run j has local receivers that take chunks from its home: all
  // of run j >= 1's positions (the first one too, unless NCCL received into
  // its tile), run 0's positions after the sender.
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
  int64_t rounds_ = 0;
};

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_RELAY_SCHEDULE_H_
