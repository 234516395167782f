#include "worker/cuda/relay_schedule.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace meshcast::worker::cuda {

absl::StatusOr<std::vector<RelayRun>> CutIntoRuns(
    const std::vector<int>& position_rank,
    const std::vector<bool>& position_local) {
  if (position_rank.empty() || position_rank.size() != position_local.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a relay chain needs one rank and one locality per position (got ",
        position_rank.size(), " and ", position_local.size(), ")"));
  }
  std::vector<RelayRun> runs;
  for (int p = 0; p < static_cast<int>(position_rank.size()); ++p) {
    const int rank = position_rank[p];
    if (rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain position ", p, " has no NCCL rank"));
    }
    if (!runs.empty() && runs.back().rank == rank) {
      if (runs.back().local != position_local[p]) {
        return absl::InvalidArgumentError(
            absl::StrCat("chain positions ", runs.back().first, " and ", p,
                         " share NCCL rank ", rank, " but not their worker"));
      }
      runs.back().last = p;
      continue;
    }
    runs.push_back(RelayRun{p, p, rank, position_local[p]});
  }
  return runs;
}

const char* RelayOpKindName(RelayOpKind kind) {
  switch (kind) {
    case RelayOpKind::kPack:
      return "pack";
    case RelayOpKind::kRecv:
      return "recv";
    case RelayOpKind::kSend:
      return "send";
    case RelayOpKind::kDeliver:
      return "deliver";
  }
  return "?";
}

absl::StatusOr<RelaySchedule> RelaySchedule::Create(std::vector<RelayRun> runs,
                                                    int64_t chunks, int slots) {
  if (runs.size() < 2) {
    return absl::InvalidArgumentError(
        "a relay schedule needs a chain of at least two runs");
  }
  if (chunks < 1 || slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a relay schedule needs chunks and slots >= 1 (got ",
                     chunks, " and ", slots, ")"));
  }
  for (size_t j = 0; j < runs.size(); ++j) {
    const RelayRun& run = runs[j];
    const int expected_first = j == 0 ? 0 : runs[j - 1].last + 1;
    if (run.first != expected_first || run.last < run.first || run.rank < 0 ||
        (j > 0 && runs[j - 1].rank == run.rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run ", j, " (positions ", run.first, "..", run.last, ", rank ",
          run.rank, ") does not continue the chain as a new rank"));
    }
  }
  return RelaySchedule(std::move(runs), chunks, slots);
}

RelaySchedule::RelaySchedule(std::vector<RelayRun> runs, int64_t chunks,
                             int slots)
    : runs_(std::move(runs)), chunks_(chunks), slots_(slots) {
  const int count = static_cast<int>(runs_.size());
  for (int j = 0; j < count; ++j) {
    if (!runs_[j].local) continue;
    // The run's last operation: run 0 sends the last chunk; a relay forwards
    // it one round after receiving it; the last run receives it.
    int64_t last = ArrivalRound(j, chunks_ - 1);
    if (j > 0 && j + 1 < count) ++last;
    rounds_ = std::max(rounds_, last + 1);
  }
}

bool RelaySchedule::Delivers(int run) const {
  return run > 0 || runs_[0].last > runs_[0].first;
}

RelayRound RelaySchedule::Round(int64_t t) const {
  RelayRound round;
  if (t < 0 || t >= rounds_) return round;
  const int count = static_cast<int>(runs_.size());
  auto in_range = [&](int64_t g) { return g >= 0 && g < chunks_; };
  auto slot_of = [&](int64_t g) { return static_cast<int>(g % slots_); };
  // Before the group: run 0 packs the chunk it sends in this round, on the
  // stream that then runs the group (so NCCL reads the packed bytes).
  if (runs_[0].local && in_range(t)) {
    round.before_group.push_back(
        RelayOp{RelayOpKind::kPack, 0, t, slot_of(t), -1});
  }
  // The group, in chain order on every worker: that order is what makes
  // NCCL pair the k-th send A -> B with the k-th receive on B from A when a
  // chain passes between two ranks more than once.
  for (int j = 0; j < count; ++j) {
    if (!runs_[j].local) continue;
    if (j == 0) {
      if (in_range(t)) {
        round.group.push_back(RelayOp{RelayOpKind::kSend, 0, t, slot_of(t), 1});
      }
      continue;
    }
    const int64_t g = t - (j - 1);
    if (in_range(g)) {
      round.group.push_back(
          RelayOp{RelayOpKind::kRecv, j, g, slot_of(g), j - 1});
    }
    // Chunk g - 1 arrived in the previous round's group, which completed
    // before this one on the same stream; it is in the other slot than g.
    if (j + 1 < count && in_range(g - 1)) {
      round.group.push_back(
          RelayOp{RelayOpKind::kSend, j, g - 1, slot_of(g - 1), j + 1});
    }
  }
  // After the group: local receivers take the chunk that arrived (run 0:
  // the one it packed), before anything later on the stream may overwrite
  // its slot.
  for (int j = 0; j < count; ++j) {
    if (!runs_[j].local || !Delivers(j)) continue;
    const int64_t g = j == 0 ? t : t - (j - 1);
    if (in_range(g)) {
      round.after_group.push_back(
          RelayOp{RelayOpKind::kDeliver, j, g, slot_of(g), -1});
    }
  }
  return round;
}

}  // namespace meshcast::worker::cuda
