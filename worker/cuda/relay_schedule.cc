#include "worker/cuda/relay_schedule.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace meshcast::worker::cuda {
namespace {

absl::Status CheckTree(const std::vector<int>& position_rank,
                       const std::vector<bool>& position_local,
                       const std::vector<int>& parents) {
  const size_t n = position_rank.size();
  if (n == 0 || position_local.size() != n || parents.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a relay tree needs one rank, one locality and one parent per "
        "position (got ",
        n, ", ", position_local.size(), " and ", parents.size(), ")"));
  }
  // A rank is one GPU of one worker: all its positions are local or none.
  absl::flat_hash_map<int, int> rank_position;
  for (int p = 0; p < static_cast<int>(n); ++p) {
    const int rank = position_rank[p];
    if (rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("relay position ", p, " has no NCCL rank"));
    }
    const bool root = p == 0;
    if (root ? parents[p] != -1 : parents[p] < 0 || parents[p] >= p) {
      return absl::InvalidArgumentError(absl::StrCat(
          "relay position ", p, " has parent ", parents[p],
          root ? "; the sender has none (-1)" : "; need an earlier position"));
    }
    const auto [it, added] = rank_position.try_emplace(rank, p);
    if (!added && position_local[it->second] != position_local[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("relay positions ", it->second, " and ", p,
                       " share NCCL rank ", rank, " but not their worker"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RelayRun>> CutIntoRuns(
    const std::vector<int>& position_rank,
    const std::vector<bool>& position_local, const std::vector<int>& parents) {
  RETURN_IF_ERROR(CheckTree(position_rank, position_local, parents));
  std::vector<RelayRun> runs;
  std::vector<int> run_of(position_rank.size(), -1);  // by position
  for (int p = 0; p < static_cast<int>(position_rank.size()); ++p) {
    const int parent_run = p == 0 ? -1 : run_of[parents[p]];
    if (parent_run >= 0 && runs[parent_run].rank == position_rank[p]) {
      runs[parent_run].positions.push_back(p);
      run_of[p] = parent_run;
      continue;
    }
    // Positions are visited in order, so runs come out ordered by root.
    run_of[p] = static_cast<int>(runs.size());
    runs.push_back(
        RelayRun{{p}, position_rank[p], position_local[p], parent_run});
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
        "a relay schedule needs a tree of at least two runs");
  }
  if (chunks < 1 || slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a relay schedule needs chunks and slots >= 1 (got ",
                     chunks, " and ", slots, ")"));
  }
  size_t positions = 0;
  for (const RelayRun& run : runs) positions += run.positions.size();
  std::vector<bool> seen(positions, false);
  for (int j = 0; j < static_cast<int>(runs.size()); ++j) {
    const RelayRun& run = runs[j];
    const auto bad = [&](const char* why) {
      return absl::InvalidArgumentError(absl::StrCat("relay run ", j, " (rank ",
                                                     run.rank, ", parent run ",
                                                     run.parent, "): ", why));
    };
    if (run.positions.empty()) return bad("it has no position");
    if (run.rank < 0) return bad("it has no NCCL rank");
    if (j == 0 ? run.root() != 0 || run.parent != -1
               : run.parent < 0 || run.parent >= j ||
                     runs[run.parent].rank == run.rank ||
                     run.root() <= runs[j - 1].root()) {
      return bad(
          "it does not follow its parent run on another rank, in root order");
    }
    for (size_t i = 0; i < run.positions.size(); ++i) {
      const int p = run.positions[i];
      if (p < 0 || p >= static_cast<int>(positions) || seen[p] ||
          (i > 0 && p <= run.positions[i - 1])) {
        return bad("its positions are not ascending, or not the tree's");
      }
      seen[p] = true;
    }
  }
  return RelaySchedule(std::move(runs), chunks, slots);
}

RelaySchedule::RelaySchedule(std::vector<RelayRun> runs, int64_t chunks,
                             int slots)
    : runs_(std::move(runs)),
      chunks_(chunks),
      slots_(slots),
      depth_(runs_.size(), 0),
      forwards_(runs_.size(), false) {
  const int count = static_cast<int>(runs_.size());
  // Parent runs come first (Create checked it).
  for (int j = 1; j < count; ++j) {
    depth_[j] = depth_[runs_[j].parent] + 1;
    forwards_[runs_[j].parent] = true;
  }
  for (int j = 0; j < count; ++j) {
    if (!runs_[j].local) continue;
    // The run's last operation: run 0 sends the last chunk; a run with
    // children forwards it one round after receiving it; a leaf receives
    // it.
    int64_t last = ArrivalRound(j, chunks_ - 1);
    if (j > 0 && forwards_[j]) ++last;
    rounds_ = std::max(rounds_, last + 1);
  }
}

bool RelaySchedule::Delivers(int run) const {
  return run > 0 || runs_[0].positions.size() > 1;
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
  // The group, link by link in child-run order on every worker: that order
  // is what makes NCCL pair the k-th send A -> B with the k-th receive on B
  // from A when several links join two ranks. Both ends of the link into
  // run c move the chunk that reaches c in this round: the parent got it
  // in the previous round's group, which completed before this one on the
  // same stream, so it is in the other slot than the one c's parent
  // receives into now (or run 0 packed it just before).
  for (int c = 1; c < count; ++c) {
    const int parent = runs_[c].parent;
    const int64_t g = t - (depth_[c] - 1);
    if (!in_range(g)) continue;
    if (runs_[parent].local) {
      round.group.push_back(
          RelayOp{RelayOpKind::kSend, parent, g, slot_of(g), c});
    }
    if (runs_[c].local) {
      round.group.push_back(
          RelayOp{RelayOpKind::kRecv, c, g, slot_of(g), parent});
    }
  }
  // After the group: local receivers take the chunk that arrived (run 0:
  // the one it packed), before anything later on the stream may overwrite
  // its slot.
  for (int j = 0; j < count; ++j) {
    if (!runs_[j].local || !Delivers(j)) continue;
    const int64_t g = t - std::max(depth_[j] - 1, 0);
    if (in_range(g)) {
      round.after_group.push_back(
          RelayOp{RelayOpKind::kDeliver, j, g, slot_of(g), -1});
    }
  }
  return round;
}

}  // namespace meshcast::worker::cuda
