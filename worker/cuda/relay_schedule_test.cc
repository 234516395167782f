// Host-only checks of RelaySchedule (no GPU needed): every worker of a relay
// chain or tree builds its own schedule, and a simulation of the streams and
// NCCL groups checks that, together, they move every chunk over every link
// exactly once and in order, never overwrite a staging slot that still has
// a pending reader, and issue matching sends and receives in the same round
// and the same per-peer order. Chains must keep the schedule they had
// before trees.
#include "worker/cuda/relay_schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::worker::cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A relay as the executor sees it: the NCCL rank and the parent of each
// position, and the worker of each rank.
struct Layout {
  std::vector<int> position_rank;
  std::vector<int> rank_worker;  // by rank
  std::vector<int> parents;      // by position; parents[0] = -1
};

Layout Chain(std::vector<int> position_rank, std::vector<int> rank_worker) {
  std::vector<int> parents;
  for (int p = 0; p < static_cast<int>(position_rank.size()); ++p) {
    parents.push_back(p - 1);
  }
  return Layout{std::move(position_rank), std::move(rank_worker),
                std::move(parents)};
}

Layout Tree(std::vector<int> position_rank, std::vector<int> rank_worker,
            std::vector<int> parents) {
  return Layout{std::move(position_rank), std::move(rank_worker),
                std::move(parents)};
}

std::string Describe(const Layout& layout, int64_t chunks) {
  std::vector<std::string> positions;
  for (size_t p = 0; p < layout.position_rank.size(); ++p) {
    const int rank = layout.position_rank[p];
    positions.push_back(absl::StrCat(
        p, ":r", rank, "@w", layout.rank_worker[rank], "<", layout.parents[p]));
  }
  return absl::StrCat("relay ", absl::StrJoin(positions, " "), " (p:rank@",
                      "worker<parent), ", chunks, " chunks");
}

int Workers(const Layout& layout) {
  return *std::max_element(layout.rank_worker.begin(),
                           layout.rank_worker.end()) +
         1;
}

std::vector<RelayRun> RunsOn(const Layout& layout, int worker) {
  std::vector<bool> local;
  for (int rank : layout.position_rank) {
    local.push_back(layout.rank_worker[rank] == worker);
  }
  absl::StatusOr<std::vector<RelayRun>> runs =
      CutIntoRuns(layout.position_rank, local, layout.parents);
  EXPECT_TRUE(runs.ok()) << runs.status();
  return runs.ok() ? *runs : std::vector<RelayRun>{};
}

// Checks CutIntoRuns's rule on its output, independently of how it cuts: a
// position is in its parent's run when both are on one rank, else it roots
// a run whose parent run holds its parent; runs are ordered by root.
std::string CheckRuns(const Layout& layout, const std::vector<RelayRun>& runs) {
  const int n = static_cast<int>(layout.position_rank.size());
  std::vector<int> run_of(n, -1);
  for (int j = 0; j < static_cast<int>(runs.size()); ++j) {
    const RelayRun& run = runs[j];
    if (run.positions.empty()) return absl::StrCat("run ", j, " is empty");
    if (j > 0 && run.root() <= runs[j - 1].root()) {
      return absl::StrCat("run ", j, " is out of root order");
    }
    for (size_t i = 0; i < run.positions.size(); ++i) {
      const int p = run.positions[i];
      if (p < 0 || p >= n || run_of[p] >= 0 ||
          (i > 0 && p <= run.positions[i - 1])) {
        return absl::StrCat("run ", j, " lists position ", p, " wrongly");
      }
      if (layout.position_rank[p] != run.rank) {
        return absl::StrCat("run ", j, " (rank ", run.rank, ") holds position ",
                            p, " of another rank");
      }
      run_of[p] = j;
    }
  }
  for (int p = 0; p < n; ++p) {
    if (run_of[p] < 0) return absl::StrCat("position ", p, " has no run");
  }
  if (run_of[0] != 0 || runs[0].parent != -1) return "run 0 is not the root";
  for (int p = 1; p < n; ++p) {
    const int j = run_of[p];
    const int parent = layout.parents[p];
    const bool same_rank =
        layout.position_rank[parent] == layout.position_rank[p];
    const bool root = runs[j].root() == p;
    if (same_rank == root || (same_rank && run_of[parent] != j) ||
        (root && runs[j].parent != run_of[parent])) {
      return absl::StrCat("position ", p, " (parent ", parent,
                          ") is cut into run ", j, " wrongly");
    }
  }
  return "";
}

// Lets a test damage one worker's schedule to see that the checker notices.
using Corruption = std::function<void(int worker, int64_t round, RelayRound*)>;

// A send or a receive, as (parent run, child run, chunk) of its link.
using Link = std::tuple<int, int, int64_t>;

std::string Text(const std::vector<Link>& links) {
  std::vector<std::string> parts;
  for (const auto& [from, to, chunk] : links) {
    parts.push_back(absl::StrCat("run", from, "->run", to, ":", chunk));
  }
  return absl::StrJoin(parts, ",");
}

// Simulates all workers' schedules of `layout` and returns the first
// violation, or "" when every invariant holds. The model of the executor:
// each rank has one stream; a worker issues, per round, its packs, then one
// group (on each rank it touches, one kernel whose operations run
// concurrently and complete together with their matched peers), then its
// deliveries. An operation is ordered after exactly those issued before it
// on its rank's stream.
std::string CheckRelay(const Layout& layout, int64_t chunks, int slots,
                       const Corruption& corrupt = nullptr) {
  const int workers = Workers(layout);
  const int nranks = static_cast<int>(layout.rank_worker.size());
  std::vector<RelaySchedule> schedules;
  for (int w = 0; w < workers; ++w) {
    absl::StatusOr<RelaySchedule> schedule =
        RelaySchedule::Create(RunsOn(layout, w), chunks, slots);
    if (!schedule.ok()) return schedule.status().ToString();
    schedules.push_back(*std::move(schedule));
  }
  const std::vector<RelayRun>& runs = schedules[0].runs();
  if (std::string e = CheckRuns(layout, runs); !e.empty()) return e;
  const int count = static_cast<int>(runs.size());
  for (int w = 1; w < workers; ++w) {
    const std::vector<RelayRun>& other = schedules[w].runs();
    for (int j = 0; j < count; ++j) {
      if (other[j].positions != runs[j].positions ||
          other[j].rank != runs[j].rank || other[j].parent != runs[j].parent) {
        return absl::StrCat("worker ", w, " cuts run ", j, " differently");
      }
    }
  }
  auto rank_of = [&](int run) { return runs[run].rank; };
  auto worker_of = [&](int run) { return layout.rank_worker[rank_of(run)]; };
  const RelaySchedule& any = schedules[0];
  // The tree of runs, derived here rather than taken from the schedule.
  std::vector<std::vector<int>> children(count);
  std::vector<int> depth(count, 0);
  for (int c = 1; c < count; ++c) {
    children[runs[c].parent].push_back(c);
    depth[c] = depth[runs[c].parent] + 1;
  }

  // Stream position of the next operation on each rank.
  std::vector<int64_t> position(nranks, 0);
  constexpr int64_t kNever = -1;
  // Per run: what each slot holds, and per chunk when it arrived in the
  // run's home, when it was delivered, and when the link into the run (by
  // child run) carried it.
  std::vector<std::vector<int64_t>> slot_chunk(count,
                                               std::vector<int64_t>(slots, -1));
  auto per_chunk = [&] {
    return std::vector<std::vector<int64_t>>(
        count, std::vector<int64_t>(chunks, kNever));
  };
  auto arrived = per_chunk(), sent_into = per_chunk(), delivered = per_chunk(),
       arrival_round = per_chunk();
  std::vector<int64_t> next_pack(count, 0), next_recv(count, 0),
      next_send_into(count, 0), next_deliver(count, 0);

  // A write of chunk g into slot `slot` of run j at stream position p: the
  // chunk it replaces must have been forwarded to every child run and
  // delivered strictly before p on the same stream.
  auto write_slot = [&](int j, int slot, int64_t g, int64_t p) -> std::string {
    const int64_t old = slot_chunk[j][slot];
    if (old >= 0) {
      for (int c : children[j]) {
        if (sent_into[c][old] == kNever || sent_into[c][old] >= p) {
          return absl::StrCat("run ", j, " overwrites slot ", slot,
                              " with chunk ", g, " before chunk ", old,
                              " in it was sent on to run ", c);
        }
      }
      if (any.Delivers(j) &&
          (delivered[j][old] == kNever || delivered[j][old] >= p)) {
        return absl::StrCat("run ", j, " overwrites slot ", slot,
                            " with chunk ", g, " before chunk ", old,
                            " in it was delivered to its local receivers");
      }
    }
    slot_chunk[j][slot] = g;
    return "";
  };
  auto holds = [&](int j, const RelayOp& op, int64_t p) -> std::string {
    if (op.slot != op.chunk % slots) {
      return absl::StrCat("run ", j, " files chunk ", op.chunk, " in slot ",
                          op.slot);
    }
    if (arrived[j][op.chunk] == kNever || arrived[j][op.chunk] >= p) {
      return absl::StrCat("run ", j, " uses chunk ", op.chunk, " (",
                          RelayOpKindName(op.kind), ") before it has arrived");
    }
    if (slot_chunk[j][op.slot] != op.chunk) {
      return absl::StrCat("run ", j, " ", RelayOpKindName(op.kind), "s chunk ",
                          op.chunk, " from slot ", op.slot,
                          ", which holds chunk ", slot_chunk[j][op.slot]);
    }
    return "";
  };

  int64_t last_round = 0;
  for (const RelaySchedule& schedule : schedules) {
    last_round = std::max(last_round, schedule.rounds());
  }
  // A few rounds past the end, so that operations a corruption moved there
  // are still seen.
  for (int64_t t = 0; t < last_round + 3; ++t) {
    // (sender rank, receiver rank) -> links in the order each side issued
    // them in this round.
    std::map<std::pair<int, int>, std::vector<Link>> sends, recvs;
    for (int w = 0; w < workers; ++w) {
      RelayRound round = schedules[w].Round(t);
      if (corrupt) corrupt(w, t, &round);
      auto check_local = [&](const RelayOp& op) -> std::string {
        if (op.run < 0 || op.run >= count || worker_of(op.run) != w) {
          return absl::StrCat("worker ", w, " issues an operation of run ",
                              op.run, ", which is not on it");
        }
        return "";
      };
      for (const RelayOp& op : round.before_group) {
        if (std::string e = check_local(op); !e.empty()) return e;
        if (op.kind != RelayOpKind::kPack || op.run != 0) {
          return absl::StrCat("before the group of round ", t, ": ",
                              RelayOpKindName(op.kind), " of run ", op.run);
        }
        if (op.chunk != next_pack[0]++) {
          return absl::StrCat("run 0 packs chunk ", op.chunk, " out of order");
        }
        const int64_t p = position[rank_of(0)]++;
        if (std::string e = write_slot(0, op.slot, op.chunk, p); !e.empty()) {
          return e;
        }
        arrived[0][op.chunk] = p;
      }
      // One group kernel per rank the worker's group touches.
      std::map<int, int64_t> group_position;
      for (const RelayOp& op : round.group) {
        if (std::string e = check_local(op); !e.empty()) return e;
        const int rank = rank_of(op.run);
        if (!group_position.contains(rank)) {
          group_position[rank] = position[rank]++;
        }
      }
      for (const RelayOp& op : round.group) {
        const int j = op.run;
        const int64_t gp = group_position[rank_of(j)];
        if (op.chunk < 0 || op.chunk >= chunks) {
          return absl::StrCat("run ", j, " moves chunk ", op.chunk);
        }
        if (op.kind == RelayOpKind::kSend) {
          const int c = op.peer_run;
          if (c < 1 || c >= count || runs[c].parent != j) {
            return absl::StrCat("run ", j, " sends to run ", c);
          }
          if (op.chunk != next_send_into[c]++) {
            return absl::StrCat("run ", j, " sends chunk ", op.chunk,
                                " to run ", c, " out of order or twice");
          }
          if (std::string e = holds(j, op, gp); !e.empty()) return e;
          sent_into[c][op.chunk] = gp;
          sends[{rank_of(j), rank_of(c)}].push_back({j, c, op.chunk});
        } else if (op.kind == RelayOpKind::kRecv) {
          if (j == 0 || op.peer_run != runs[j].parent) {
            return absl::StrCat("run ", j, " receives from run ", op.peer_run);
          }
          if (op.chunk != next_recv[j]++) {
            return absl::StrCat("run ", j, " receives chunk ", op.chunk,
                                " out of order or twice");
          }
          if (op.slot != op.chunk % slots) {
            return absl::StrCat("run ", j, " files chunk ", op.chunk,
                                " in slot ", op.slot);
          }
          if (std::string e = write_slot(j, op.slot, op.chunk, gp);
              !e.empty()) {
            return e;
          }
          arrived[j][op.chunk] = gp;
          arrival_round[j][op.chunk] = t;
          recvs[{rank_of(op.peer_run), rank_of(j)}].push_back(
              {op.peer_run, j, op.chunk});
        } else {
          return absl::StrCat("a ", RelayOpKindName(op.kind),
                              " inside the group of round ", t);
        }
      }
      for (const RelayOp& op : round.after_group) {
        if (std::string e = check_local(op); !e.empty()) return e;
        const int j = op.run;
        if (op.kind != RelayOpKind::kDeliver || !any.Delivers(j)) {
          return absl::StrCat("after the group of round ", t, ": ",
                              RelayOpKindName(op.kind), " of run ", j);
        }
        if (op.chunk < 0 || op.chunk >= chunks ||
            op.chunk != next_deliver[j]++) {
          return absl::StrCat("run ", j, " delivers chunk ", op.chunk,
                              " out of order or twice");
        }
        const int64_t p = position[rank_of(j)]++;
        if (std::string e = holds(j, op, p); !e.empty()) return e;
        delivered[j][op.chunk] = p;
      }
    }
    // NCCL pairs the k-th send A -> B with the k-th receive on B from A;
    // both must be this round's (every worker's group of round t completes
    // only with its peers' groups of round t), and of the same link.
    for (const auto& [ranks, issued] : sends) {
      auto it = recvs.find(ranks);
      const std::vector<Link> none;
      const std::vector<Link>& posted = it == recvs.end() ? none : it->second;
      if (issued != posted) {
        return absl::StrCat("round ", t, ": rank ", ranks.first, " sends [",
                            Text(issued), "] to rank ", ranks.second,
                            ", which receives [", Text(posted), "]");
      }
    }
    for (const auto& [ranks, posted] : recvs) {
      if (!sends.contains(ranks)) {
        return absl::StrCat("round ", t, ": rank ", ranks.second,
                            " receives from rank ", ranks.first,
                            ", which sends nothing");
      }
    }
  }

  // Completeness: every chunk crossed every link and reached every run and
  // every local receiver.
  for (int j = 0; j < count; ++j) {
    if (j == 0 && next_pack[0] != chunks) {
      return absl::StrCat("run 0 packed ", next_pack[0], " chunks");
    }
    if (j > 0 && next_recv[j] != chunks) {
      return absl::StrCat("run ", j, " received ", next_recv[j], " chunks");
    }
    if (j > 0 && next_send_into[j] != chunks) {
      return absl::StrCat("run ", runs[j].parent, " sent ", next_send_into[j],
                          " chunks to run ", j);
    }
    if (any.Delivers(j) && next_deliver[j] != chunks) {
      return absl::StrCat("run ", j, " delivered ", next_deliver[j], " chunks");
    }
  }
  // The wavefront: a chunk moves one link per round.
  int max_depth = 0;
  for (int j = 1; j < count; ++j) {
    max_depth = std::max(max_depth, depth[j]);
    if (any.depth(j) != depth[j]) {
      return absl::StrCat("run ", j, " has depth ", any.depth(j));
    }
    for (int64_t g = 0; g < chunks; ++g) {
      if (arrival_round[j][g] != g + depth[j] - 1 ||
          arrival_round[j][g] != any.ArrivalRound(j, g)) {
        return absl::StrCat("chunk ", g, " reaches run ", j, " in round ",
                            arrival_round[j][g]);
      }
    }
  }
  if (last_round != chunks + max_depth - 1) {
    return absl::StrCat("the relay takes ", last_round, " rounds");
  }
  return "";
}

TEST(CutIntoRunsTest, MergesConsecutivePositionsOfOneRank) {
  absl::StatusOr<std::vector<RelayRun>> runs =
      CutIntoRuns({3, 3, 1, 0, 0, 3}, {true, true, false, false, false, true},
                  {-1, 0, 1, 2, 3, 4});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_THAT((*runs)[0].positions, ElementsAre(0, 1));
  EXPECT_EQ((*runs)[0].rank, 3);
  EXPECT_TRUE((*runs)[0].local);
  EXPECT_EQ((*runs)[0].parent, -1);
  EXPECT_THAT((*runs)[1].positions, ElementsAre(2));
  EXPECT_EQ((*runs)[1].parent, 0);
  EXPECT_THAT((*runs)[2].positions, ElementsAre(3, 4));
  EXPECT_FALSE((*runs)[2].local);
  EXPECT_EQ((*runs)[2].parent, 1);
  EXPECT_THAT((*runs)[3].positions, ElementsAre(5));
  EXPECT_EQ((*runs)[3].rank, 3);  // the chain came back to rank 3
  EXPECT_EQ((*runs)[3].parent, 2);
}

TEST(CutIntoRunsTest, JoinsAPositionToItsParentsRunOnlyOnItsRank) {
  // Position 3 follows its parent 1 on rank 1 although position 2 (rank 1
  // too) lies between; position 2's parent is on rank 0, so it roots a
  // second run on rank 1; positions 4 and 5 are a run whose root's parent
  // is in that second run.
  absl::StatusOr<std::vector<RelayRun>> runs =
      CutIntoRuns({0, 1, 1, 1, 2, 2}, {true, false, false, false, true, true},
                  {-1, 0, 0, 1, 2, 4});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_THAT((*runs)[0].positions, ElementsAre(0));
  EXPECT_THAT((*runs)[1].positions, ElementsAre(1, 3));
  EXPECT_EQ((*runs)[1].parent, 0);
  EXPECT_THAT((*runs)[2].positions, ElementsAre(2));
  EXPECT_EQ((*runs)[2].parent, 0);
  EXPECT_EQ((*runs)[2].rank, 1);
  EXPECT_THAT((*runs)[3].positions, ElementsAre(4, 5));
  EXPECT_EQ((*runs)[3].parent, 2);
  EXPECT_TRUE((*runs)[3].local);
  EXPECT_EQ((*runs)[3].root(), 4);
}

TEST(CutIntoRunsTest, RefusesBadInput) {
  EXPECT_FALSE(CutIntoRuns({}, {}, {}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true}, {-1, 0}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true, false}, {-1}).ok());
  EXPECT_FALSE(CutIntoRuns({0, -1}, {true, false}, {-1, 0}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 0}, {true, false}, {-1, 0}).ok());
  // One rank is on one worker, whether or not its positions are a run.
  EXPECT_FALSE(CutIntoRuns({0, 1, 0}, {true, false, false}, {-1, 0, 1}).ok());
  // Parents: the sender has none, every other position an earlier one.
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true, false}, {0, 0}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true, false}, {-1, 1}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1, 2}, {true, false, false}, {-1, 2, 0}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true, false}, {-1, -1}).ok());
}

TEST(RelayScheduleTest, RefusesBadInput) {
  const std::vector<RelayRun> two = {{{0}, 0, true, -1}, {{1}, 1, false, 0}};
  EXPECT_TRUE(RelaySchedule::Create(two, 1).ok());
  EXPECT_FALSE(RelaySchedule::Create(two, 0).ok());
  EXPECT_FALSE(RelaySchedule::Create(two, 3, 0).ok());
  EXPECT_FALSE(RelaySchedule::Create({{{0}, 0, true, -1}}, 3).ok());
  // The parent run on the same rank.
  EXPECT_FALSE(
      RelaySchedule::Create({{{0}, 0, true, -1}, {{1}, 0, false, 0}}, 3).ok());
  // A position missing, repeated, or out of order.
  EXPECT_FALSE(
      RelaySchedule::Create({{{0}, 0, true, -1}, {{2}, 1, false, 0}}, 3).ok());
  EXPECT_FALSE(
      RelaySchedule::Create({{{0}, 0, true, -1}, {{1, 1}, 1, false, 0}}, 3)
          .ok());
  EXPECT_FALSE(
      RelaySchedule::Create({{{0}, 0, true, -1}, {{2, 1}, 1, false, 0}}, 3)
          .ok());
  EXPECT_FALSE(
      RelaySchedule::Create({{{0}, 0, true, -1}, {{}, 1, false, 0}}, 3).ok());
  // Run 0 not at the sender; a parent run that is not earlier; roots out
  // of order.
  EXPECT_FALSE(
      RelaySchedule::Create({{{1}, 0, true, -1}, {{0}, 1, false, 0}}, 3).ok());
  EXPECT_FALSE(
      RelaySchedule::Create(
          {{{0}, 0, true, -1}, {{1}, 1, false, 2}, {{2}, 2, false, 0}}, 3)
          .ok());
  EXPECT_FALSE(
      RelaySchedule::Create(
          {{{0}, 0, true, -1}, {{2}, 1, false, 0}, {{1}, 2, false, 0}}, 3)
          .ok());
}

TEST(RelayScheduleTest, RelayReceivesTheNextChunkWhileForwarding) {
  // w0 (rank 0) -> w1 (rank 1, two positions) -> w2 (rank 2); seen by w1.
  absl::StatusOr<RelaySchedule> schedule = RelaySchedule::Create(
      {{{0}, 0, false, -1}, {{1, 2}, 1, true, 0}, {{3}, 2, false, 1}}, 3);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->rounds(), 4);  // receives in 0..2, forwards in 1..3
  const RelayRound round = schedule->Round(1);
  EXPECT_TRUE(round.before_group.empty());
  ASSERT_EQ(round.group.size(), 2u);
  EXPECT_EQ(round.group[0].kind, RelayOpKind::kRecv);
  EXPECT_EQ(round.group[0].chunk, 1);
  EXPECT_EQ(round.group[0].slot, 1);
  EXPECT_EQ(round.group[1].kind, RelayOpKind::kSend);
  EXPECT_EQ(round.group[1].chunk, 0);
  EXPECT_EQ(round.group[1].slot, 0);
  ASSERT_EQ(round.after_group.size(), 1u);
  EXPECT_EQ(round.after_group[0].kind, RelayOpKind::kDeliver);
  EXPECT_EQ(round.after_group[0].chunk, 1);
  EXPECT_TRUE(schedule->Round(4).empty());
  EXPECT_TRUE(schedule->Round(-1).empty());
  // Drain: only the forward of the last chunk.
  const RelayRound last = schedule->Round(3);
  ASSERT_EQ(last.group.size(), 1u);
  EXPECT_EQ(last.group[0].kind, RelayOpKind::kSend);
  EXPECT_EQ(last.group[0].chunk, 2);
  EXPECT_TRUE(last.after_group.empty());
}

TEST(RelayScheduleTest, SenderWithoutLocalReceiversDeliversNothing) {
  absl::StatusOr<RelaySchedule> schedule =
      RelaySchedule::Create({{{0}, 0, true, -1}, {{1}, 1, false, 0}}, 2);
  ASSERT_TRUE(schedule.ok());
  EXPECT_FALSE(schedule->Delivers(0));
  EXPECT_TRUE(schedule->Delivers(1));
  EXPECT_EQ(schedule->rounds(), 2);
  EXPECT_TRUE(schedule->Round(0).after_group.empty());
  EXPECT_EQ(schedule->Round(0).before_group.size(), 1u);
}

// Text of an operation: "send 2>3 c0 s0" (run 2 sends chunk 0 from slot 0
// to run 3), "recv 3<2 c0 s0", "pack 0 c0 s0", "deliver 3 c0 s0".
std::string Text(const RelayOp& op) {
  std::string runs = absl::StrCat(op.run);
  if (op.kind == RelayOpKind::kSend) absl::StrAppend(&runs, ">", op.peer_run);
  if (op.kind == RelayOpKind::kRecv) absl::StrAppend(&runs, "<", op.peer_run);
  return absl::StrCat(RelayOpKindName(op.kind), " ", runs, " c", op.chunk, " s",
                      op.slot);
}

std::string Text(const RelayRound& round) {
  auto ops = [](const std::vector<RelayOp>& list) {
    std::vector<std::string> parts;
    for (const RelayOp& op : list) parts.push_back(Text(op));
    return absl::StrJoin(parts, ", ");
  };
  return absl::StrCat("before: ", ops(round.before_group),
                      "; group: ", ops(round.group),
                      "; after: ", ops(round.after_group));
}

// The schedule of a chain as it was before trees (the code trees replaced);
// a chain must still get exactly it.
struct ChainReference {
  std::vector<RelayRun> runs;
  int64_t chunks = 0;
  int slots = 0;

  int64_t Rounds() const {
    const int count = static_cast<int>(runs.size());
    int64_t rounds = 0;
    for (int j = 0; j < count; ++j) {
      if (!runs[j].local) continue;
      int64_t last = j == 0 ? chunks - 1 : chunks - 1 + j - 1;
      if (j > 0 && j + 1 < count) ++last;
      rounds = std::max(rounds, last + 1);
    }
    return rounds;
  }

  RelayRound Round(int64_t t) const {
    RelayRound round;
    if (t < 0 || t >= Rounds()) return round;
    const int count = static_cast<int>(runs.size());
    auto in_range = [&](int64_t g) { return g >= 0 && g < chunks; };
    auto slot_of = [&](int64_t g) { return static_cast<int>(g % slots); };
    if (runs[0].local && in_range(t)) {
      round.before_group.push_back(
          RelayOp{RelayOpKind::kPack, 0, t, slot_of(t), -1});
    }
    for (int j = 0; j < count; ++j) {
      if (!runs[j].local) continue;
      if (j == 0) {
        if (in_range(t)) {
          round.group.push_back(
              RelayOp{RelayOpKind::kSend, 0, t, slot_of(t), 1});
        }
        continue;
      }
      const int64_t g = t - (j - 1);
      if (in_range(g)) {
        round.group.push_back(
            RelayOp{RelayOpKind::kRecv, j, g, slot_of(g), j - 1});
      }
      if (j + 1 < count && in_range(g - 1)) {
        round.group.push_back(
            RelayOp{RelayOpKind::kSend, j, g - 1, slot_of(g - 1), j + 1});
      }
    }
    const bool sender_delivers = runs[0].positions.size() > 1;
    for (int j = 0; j < count; ++j) {
      if (!runs[j].local || (j == 0 && !sender_delivers)) continue;
      const int64_t g = j == 0 ? t : t - (j - 1);
      if (in_range(g)) {
        round.after_group.push_back(
            RelayOp{RelayOpKind::kDeliver, j, g, slot_of(g), -1});
      }
    }
    return round;
  }
};

// Compares every worker's schedule of a chain with ChainReference.
std::string CompareWithChainReference(const Layout& layout, int64_t chunks) {
  for (int w = 0; w < Workers(layout); ++w) {
    std::vector<RelayRun> runs = RunsOn(layout, w);
    const ChainReference reference{runs, chunks, kRelaySlots};
    absl::StatusOr<RelaySchedule> schedule =
        RelaySchedule::Create(std::move(runs), chunks);
    if (!schedule.ok()) return schedule.status().ToString();
    if (schedule->rounds() != reference.Rounds()) {
      return absl::StrCat("worker ", w, ": ", schedule->rounds(),
                          " rounds, was ", reference.Rounds());
    }
    for (int64_t t = -1; t <= schedule->rounds(); ++t) {
      const std::string got = Text(schedule->Round(t));
      const std::string want = Text(reference.Round(t));
      if (got != want) {
        return absl::StrCat("worker ", w, " round ", t, ": ", got, "; was ",
                            want);
      }
    }
  }
  return "";
}

TEST(RelayScheduleTest, ChainsKeepTheChainSchedule) {
  std::mt19937 random(20240612);
  int checked = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int workers = std::uniform_int_distribution<int>(2, 4)(random);
    std::vector<int> rank_worker;
    for (int w = 0; w < workers; ++w) {
      const int gpus = std::uniform_int_distribution<int>(1, 2)(random);
      for (int g = 0; g < gpus; ++g) rank_worker.push_back(w);
    }
    const int nranks = static_cast<int>(rank_worker.size());
    std::vector<int> position_rank;
    const int length = std::uniform_int_distribution<int>(2, 10)(random);
    for (int p = 0; p < length; ++p) {
      position_rank.push_back(
          std::uniform_int_distribution<int>(0, nranks - 1)(random));
    }
    const Layout layout = Chain(std::move(position_rank), rank_worker);
    if (RunsOn(layout, 0).size() < 2) continue;
    for (int64_t chunks = 1; chunks <= 8; ++chunks) {
      ++checked;
      ASSERT_EQ(CompareWithChainReference(layout, chunks), "")
          << Describe(layout, chunks);
    }
  }
  EXPECT_GT(checked, 2000);
}

// Runs R0 {0} (rank 0, worker 0); R1 {1, 5} and R2 {2} (rank 1, worker 1),
// both children of R0; R3 {3, 6} (child of R2) and R4 {4} (child of R1) on
// rank 2, worker 2. Rank 0 feeds two runs of rank 1, and the links from
// rank 1 to rank 2 come in child order R3, R4 but parent order R1, R2.
Layout SmallTree() {
  return Tree({0, 1, 1, 2, 2, 1, 2}, {0, 1, 2}, {-1, 0, 0, 2, 1, 1, 3});
}

TEST(RelayScheduleTest, SmallTreeSchedule) {
  const Layout tree = SmallTree();
  const std::vector<RelayRun> runs = RunsOn(tree, 1);
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_THAT(runs[1].positions, ElementsAre(1, 5));
  EXPECT_THAT(runs[3].positions, ElementsAre(3, 6));
  EXPECT_EQ(runs[3].parent, 2);
  EXPECT_EQ(runs[4].parent, 1);
  absl::StatusOr<RelaySchedule> schedule = RelaySchedule::Create(runs, 3);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(schedule->depth(j), std::vector<int>({0, 1, 1, 2, 2})[j]) << j;
  }
  EXPECT_EQ(schedule->ArrivalRound(3, 1), 2);
  // Worker 1: R1 and R2 receive chunk g in round g and forward it in round
  // g + 1, the sends listed by child run (R3 before R4).
  ASSERT_EQ(schedule->rounds(), 4);
  const std::vector<std::string> worker1 = {
      "before: ; group: recv 1<0 c0 s0, recv 2<0 c0 s0; "
      "after: deliver 1 c0 s0, deliver 2 c0 s0",
      "before: ; group: recv 1<0 c1 s1, recv 2<0 c1 s1, send 2>3 c0 s0, "
      "send 1>4 c0 s0; after: deliver 1 c1 s1, deliver 2 c1 s1",
      "before: ; group: recv 1<0 c2 s0, recv 2<0 c2 s0, send 2>3 c1 s1, "
      "send 1>4 c1 s1; after: deliver 1 c2 s0, deliver 2 c2 s0",
      "before: ; group: send 2>3 c2 s0, send 1>4 c2 s0; after: ",
  };
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(Text(schedule->Round(t)), worker1[t]) << "round " << t;
  }
  EXPECT_TRUE(schedule->Round(4).empty());
  // Worker 0: the sender sends each chunk to both runs of rank 1 in the
  // round it packs it, R1 first.
  absl::StatusOr<RelaySchedule> sender =
      RelaySchedule::Create(RunsOn(tree, 0), 3);
  ASSERT_TRUE(sender.ok()) << sender.status();
  EXPECT_EQ(sender->rounds(), 3);
  EXPECT_EQ(Text(sender->Round(1)),
            "before: pack 0 c1 s1; group: send 0>1 c1 s1, send 0>2 c1 s1; "
            "after: ");
  // Worker 2: two leaves of depth 2, receiving in rounds 1..3.
  absl::StatusOr<RelaySchedule> leaves =
      RelaySchedule::Create(RunsOn(tree, 2), 3);
  ASSERT_TRUE(leaves.ok()) << leaves.status();
  EXPECT_EQ(leaves->rounds(), 4);
  EXPECT_TRUE(leaves->Round(0).empty());
  EXPECT_EQ(Text(leaves->Round(3)),
            "before: ; group: recv 3<2 c2 s0, recv 4<1 c2 s0; "
            "after: deliver 3 c2 s0, deliver 4 c2 s0");
  for (int64_t chunks = 1; chunks <= 20; ++chunks) {
    EXPECT_EQ(CheckRelay(tree, chunks, kRelaySlots), "") << chunks;
  }
}

TEST(RelayScheduleTest, NamedTreesKeepEveryInvariant) {
  const std::vector<std::pair<std::string, Layout>> trees = {
      {"star from the sender", Tree({0, 1, 2, 3}, {0, 1, 2, 3}, {-1, 0, 0, 0})},
      {"two child runs on one rank", Tree({0, 1, 1}, {0, 1}, {-1, 0, 0})},
      {"binary tree over two workers",
       Tree({0, 1, 0, 1, 0, 1, 0}, {0, 1}, {-1, 0, 0, 1, 1, 2, 2})},
      {"back to the sender's rank", Tree({0, 1, 0, 1}, {0, 1}, {-1, 0, 1, 1})},
      {"two GPUs per worker",
       Tree({0, 1, 2, 3, 0, 2, 1, 3}, {0, 0, 1, 1}, {-1, 0, 0, 1, 2, 3, 4, 4})},
      {"deep and wide",
       Tree({0, 1, 2, 3, 1, 2, 3, 0}, {0, 1, 2, 3}, {-1, 0, 1, 2, 0, 4, 5, 3})},
      {"the small tree", SmallTree()},
  };
  for (const auto& [name, layout] : trees) {
    for (int64_t chunks = 1; chunks <= 20; ++chunks) {
      EXPECT_EQ(CheckRelay(layout, chunks, kRelaySlots), "")
          << name << ": " << Describe(layout, chunks);
    }
  }
}

TEST(RelayScheduleTest, RandomTreesKeepEveryInvariant) {
  std::mt19937 random(20240613);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(random);
  };
  int checked = 0, split_runs = 0, siblings_on_one_rank = 0, forks = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    Layout layout;
    const int workers = uniform(2, 4);
    for (int w = 0; w < workers; ++w) {
      const int gpus = uniform(1, 3);
      for (int g = 0; g < gpus; ++g) layout.rank_worker.push_back(w);
    }
    const int nranks = static_cast<int>(layout.rank_worker.size());
    const int length = uniform(2, 12);
    // Bushy (any earlier parent), deep (mostly the previous position) or
    // wide (mostly the sender).
    const int shape = uniform(0, 2);
    for (int p = 0; p < length; ++p) {
      layout.position_rank.push_back(uniform(0, nranks - 1));
      int parent = p == 0 ? -1 : uniform(0, p - 1);
      if (p > 0 && shape == 1 && uniform(0, 9) < 7) parent = p - 1;
      if (p > 0 && shape == 2 && uniform(0, 9) < 6) parent = 0;
      layout.parents.push_back(parent);
    }
    const std::vector<RelayRun> runs = RunsOn(layout, 0);
    if (runs.size() < 2) continue;
    // Count what the trees cover: runs whose positions are not
    // consecutive, runs with two child runs on one rank, runs with two
    // child runs at all.
    std::map<int, std::vector<int>> children;  // run -> children's ranks
    for (size_t j = 0; j < runs.size(); ++j) {
      const RelayRun& run = runs[j];
      if (run.positions.back() - run.root() + 1 !=
          static_cast<int>(run.positions.size())) {
        ++split_runs;
      }
      if (j > 0) children[run.parent].push_back(run.rank);
    }
    for (auto& [run, ranks] : children) {
      if (ranks.size() > 1) ++forks;
      std::sort(ranks.begin(), ranks.end());
      if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
        ++siblings_on_one_rank;
      }
    }
    for (int64_t chunks = 1; chunks <= 12; ++chunks) {
      ++checked;
      const std::string error = CheckRelay(layout, chunks, kRelaySlots);
      ASSERT_EQ(error, "") << Describe(layout, chunks);
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_GT(split_runs, 200);
  EXPECT_GT(siblings_on_one_rank, 200);
  EXPECT_GT(forks, 500);
}

TEST(RelayScheduleTest, NamedChainsKeepEveryInvariant) {
  const std::vector<std::pair<std::string, Layout>> chains = {
      {"two workers, length 2", Chain({0, 1}, {0, 1})},
      {"runs of length 1", Chain({0, 1, 2, 3}, {0, 1, 2, 3})},
      {"long runs", Chain({0, 0, 0, 1, 1, 2, 2, 2}, {0, 1, 2})},
      {"leaves and comes back", Chain({0, 1, 0}, {0, 1})},
      {"ping-pong", Chain({0, 1, 0, 1, 0, 1}, {0, 1})},
      {"back to the sender's rank with receivers",
       Chain({0, 0, 1, 1, 0, 0}, {0, 1})},
      {"two GPUs of one worker in a row", Chain({0, 1, 2, 0}, {0, 0, 1})},
      {"every rank twice", Chain({0, 1, 2, 3, 0, 1, 2, 3}, {0, 0, 1, 1})},
      {"one worker, two ranks", Chain({0, 1, 0}, {0, 0})},
  };
  for (const auto& [name, layout] : chains) {
    for (int64_t chunks = 1; chunks <= 20; ++chunks) {
      EXPECT_EQ(CheckRelay(layout, chunks, kRelaySlots), "")
          << name << ": " << Describe(layout, chunks);
    }
  }
}

TEST(RelayScheduleTest, RandomChainsKeepEveryInvariant) {
  std::mt19937 random(20240611);
  int revisits = 0, checked = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const int workers = std::uniform_int_distribution<int>(2, 4)(random);
    Layout layout;
    for (int w = 0; w < workers; ++w) {
      const int gpus = std::uniform_int_distribution<int>(1, 2)(random);
      for (int g = 0; g < gpus; ++g) layout.rank_worker.push_back(w);
    }
    const int nranks = static_cast<int>(layout.rank_worker.size());
    const int length = std::uniform_int_distribution<int>(2, 10)(random);
    for (int p = 0; p < length; ++p) {
      layout.position_rank.push_back(
          std::uniform_int_distribution<int>(0, nranks - 1)(random));
      layout.parents.push_back(p - 1);
    }
    // Only chains of at least two runs go through the schedule.
    const std::vector<RelayRun> runs = RunsOn(layout, 0);
    if (runs.size() < 2) continue;
    std::vector<int> seen;
    for (const RelayRun& run : runs) {
      if (std::find(seen.begin(), seen.end(), run.rank) != seen.end()) {
        ++revisits;
        break;
      }
      seen.push_back(run.rank);
    }
    for (int64_t chunks = 1; chunks <= 20; ++chunks) {
      ++checked;
      const std::string error = CheckRelay(layout, chunks, kRelaySlots);
      ASSERT_EQ(error, "") << Describe(layout, chunks);
    }
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(revisits, 100);  // chains that come back to a rank are covered
}

// The checker itself must catch broken schedules.
TEST(RelayScheduleCheckerTest, OneSlotIsOverwrittenWhileInUse) {
  const Layout relay = Chain({0, 1, 2}, {0, 1, 2});
  EXPECT_EQ(CheckRelay(relay, 1, 1), "");  // one chunk needs one slot
  EXPECT_THAT(CheckRelay(relay, 2, 1), HasSubstr("overwrites slot 0"));
  // A sender consumes each chunk in the round it packs it, so one slot
  // would do there: the checker is exact, not merely strict.
  EXPECT_EQ(CheckRelay(Chain({0, 0, 1}, {0, 1}), 3, 1), "");
  EXPECT_THAT(CheckRelay(Chain({0, 0, 1, 1, 2}, {0, 1, 2}), 3, 1),
              HasSubstr("run 1 overwrites slot 0"));
}

TEST(RelayScheduleCheckerTest, CatchesSendsIssuedInAnotherOrder) {
  // 0 -> 1 -> 0 -> 1: rank 0 sends to rank 1 twice in a round.
  const Layout pingpong = Chain({0, 1, 0, 1}, {0, 1});
  auto reverse_group = [](int worker, int64_t, RelayRound* round) {
    if (worker == 0) std::reverse(round->group.begin(), round->group.end());
  };
  EXPECT_THAT(CheckRelay(pingpong, 4, kRelaySlots, reverse_group),
              HasSubstr("sends ["));
}

TEST(RelayScheduleCheckerTest, CatchesTreeGroupsListedByParentRun) {
  // Listing worker 1's sends by parent run (R1 -> R4 before R2 -> R3) pairs
  // them with the wrong receives on rank 2.
  auto by_parent = [](int worker, int64_t, RelayRound* round) {
    if (worker != 1) return;
    std::stable_sort(
        round->group.begin(), round->group.end(),
        [](const RelayOp& a, const RelayOp& b) { return a.run < b.run; });
  };
  EXPECT_THAT(CheckRelay(SmallTree(), 3, kRelaySlots, by_parent),
              HasSubstr("rank 1 sends [run1->run4:0,run2->run3:0]"));
  // Swapping the two links from rank 0 into rank 1 is caught too.
  auto swap_children = [](int worker, int64_t, RelayRound* round) {
    if (worker == 0) std::reverse(round->group.begin(), round->group.end());
  };
  EXPECT_THAT(CheckRelay(SmallTree(), 3, kRelaySlots, swap_children),
              HasSubstr("rank 0 sends [run0->run2:0,run0->run1:0]"));
}

TEST(RelayScheduleCheckerTest, CatchesAChildRunLeftOut) {
  const Layout binary =
      Tree({0, 1, 0, 1, 0, 1, 0}, {0, 1}, {-1, 0, 0, 1, 1, 2, 2});
  auto drop = [](int worker, int64_t, RelayRound* round) {
    if (worker != 0) return;
    std::erase_if(round->group, [](const RelayOp& op) {
      return op.kind == RelayOpKind::kSend && op.peer_run == 3;
    });
  };
  EXPECT_THAT(CheckRelay(binary, 3, kRelaySlots, drop),
              HasSubstr("which receives [run0->run1:0,run0->run3:0]"));
  // A forwarding run with one slot overwrites a chunk before sending it on.
  EXPECT_THAT(CheckRelay(SmallTree(), 2, 1),
              HasSubstr("run 1 overwrites slot 0 with chunk 1 before chunk 0 "
                        "in it was sent on to run 4"));
}

TEST(RelayScheduleCheckerTest, CatchesForwardingBeforeArrival) {
  const Layout relay = Chain({0, 1, 2}, {0, 1, 2});
  auto early = [](int worker, int64_t, RelayRound* round) {
    if (worker != 1) return;
    for (RelayOp& op : round->group) {
      if (op.kind == RelayOpKind::kSend) {
        op.chunk += 1;
        op.slot = static_cast<int>(op.chunk % kRelaySlots);
      }
    }
  };
  EXPECT_THAT(CheckRelay(relay, 3, kRelaySlots, early),
              HasSubstr("out of order"));
  // The same chunk sent from the other slot.
  auto wrong_slot = [](int worker, int64_t, RelayRound* round) {
    if (worker != 1) return;
    for (RelayOp& op : round->group) {
      if (op.kind == RelayOpKind::kSend) op.slot = 1 - op.slot;
    }
  };
  EXPECT_THAT(CheckRelay(relay, 3, kRelaySlots, wrong_slot),
              HasSubstr("in slot"));
}

TEST(RelayScheduleCheckerTest, CatchesSkippedAndLateRounds) {
  const Layout relay = Chain({0, 1, 1, 2}, {0, 1, 2});
  auto skip = [](int worker, int64_t t, RelayRound* round) {
    if (worker == 1 && t == 2) *round = RelayRound{};
  };
  EXPECT_THAT(CheckRelay(relay, 4, kRelaySlots, skip), HasSubstr("round 2"));
  auto no_delivery = [](int worker, int64_t t, RelayRound* round) {
    if (worker == 2 && t == 3) round->after_group.clear();
  };
  EXPECT_THAT(CheckRelay(relay, 4, kRelaySlots, no_delivery),
              HasSubstr("delivers chunk"));
  // Delivering inside the group would race with the receive.
  auto deliver_in_group = [](int worker, int64_t, RelayRound* round) {
    if (worker != 2) return;
    for (const RelayOp& op : round->after_group) round->group.push_back(op);
    round->after_group.clear();
  };
  EXPECT_THAT(CheckRelay(relay, 4, kRelaySlots, deliver_in_group),
              HasSubstr("inside the group"));
}

}  // namespace
}  // namespace meshcast::worker::cuda
