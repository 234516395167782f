// Host-only checks of RelaySchedule (no GPU needed): every worker of a chain
// builds its own schedule, and a simulation of the streams and NCCL groups
// checks that, together, they move every chunk through every run exactly
// once and in order, never overwrite a staging slot that still has a
// pending reader, and issue matching sends and receives in the same round
// and the same per-peer order.
#include "worker/cuda/relay_schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::worker::cuda {
namespace {

using ::testing::HasSubstr;

// A chain as the executor sees it: the NCCL rank of each position, and the
// worker of each rank.
struct Layout {
  std::vector<int> position_rank;
  std::vector<int> rank_worker;  // by rank
};

std::string Describe(const Layout& layout, int64_t chunks) {
  std::vector<std::string> positions;
  for (int rank : layout.position_rank) {
    positions.push_back(
        absl::StrCat("r", rank, "@w", layout.rank_worker[rank]));
  }
  return absl::StrCat("chain ", absl::StrJoin(positions, "->"), ", ", chunks,
                      " chunks");
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
      CutIntoRuns(layout.position_rank, local);
  EXPECT_TRUE(runs.ok()) << runs.status();
  return runs.ok() ? *runs : std::vector<RelayRun>{};
}

// Lets a test damage one worker's schedule to see that the checker notices.
using Corruption = std::function<void(int worker, int64_t round, RelayRound*)>;

// Simulates all workers' schedules of `layout` and returns the first
// violation, or "" when every invariant holds. The model of the executor:
// each rank has one stream; a worker issues, per round, its packs, then one
// group (on each rank it touches, one kernel whose operations run
// concurrently and complete together with their matched peers), then its
// deliveries. An operation is ordered after exactly those issued before it
// on its rank's stream.
std::string CheckChain(const Layout& layout, int64_t chunks, int slots,
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
  const int count = static_cast<int>(runs.size());
  for (int w = 1; w < workers; ++w) {
    const std::vector<RelayRun>& other = schedules[w].runs();
    for (int j = 0; j < count; ++j) {
      if (other[j].first != runs[j].first || other[j].last != runs[j].last ||
          other[j].rank != runs[j].rank) {
        return absl::StrCat("worker ", w, " cuts run ", j, " differently");
      }
    }
  }
  auto rank_of = [&](int run) { return runs[run].rank; };
  auto worker_of = [&](int run) { return layout.rank_worker[rank_of(run)]; };
  const RelaySchedule& any = schedules[0];

  // Stream position of the next operation on each rank.
  std::vector<int64_t> position(nranks, 0);
  constexpr int64_t kNever = -1;
  // Per run: what each slot holds, and per chunk when it arrived in the
  // run's home, when it was sent on and when delivered.
  std::vector<std::vector<int64_t>> slot_chunk(count,
                                               std::vector<int64_t>(slots, -1));
  auto per_chunk = [&] {
    return std::vector<std::vector<int64_t>>(
        count, std::vector<int64_t>(chunks, kNever));
  };
  auto arrived = per_chunk(), sent = per_chunk(), delivered = per_chunk(),
       arrival_round = per_chunk();
  std::vector<int64_t> next_pack(count, 0), next_recv(count, 0),
      next_send(count, 0), next_deliver(count, 0);

  // A write of chunk g into slot `slot` of run j at stream position p: the
  // chunk it replaces must have been forwarded and delivered strictly
  // before p on the same stream.
  auto write_slot = [&](int j, int slot, int64_t g, int64_t p) -> std::string {
    const int64_t old = slot_chunk[j][slot];
    if (old >= 0) {
      const bool forwards = j + 1 < count;
      if (forwards && (sent[j][old] == kNever || sent[j][old] >= p)) {
        return absl::StrCat("run ", j, " overwrites slot ", slot,
                            " with chunk ", g, " before chunk ", old,
                            " in it was sent on");
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
    // (sender rank, receiver rank) -> links (sending run, chunk) in the
    // order each side issued them in this round.
    std::map<std::pair<int, int>, std::vector<std::pair<int, int64_t>>> sends,
        recvs;
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
          if (op.peer_run != j + 1 || op.peer_run >= count) {
            return absl::StrCat("run ", j, " sends to run ", op.peer_run);
          }
          if (op.chunk != next_send[j]++) {
            return absl::StrCat("run ", j, " sends chunk ", op.chunk,
                                " out of order or twice");
          }
          if (std::string e = holds(j, op, gp); !e.empty()) return e;
          sent[j][op.chunk] = gp;
          sends[{rank_of(j), rank_of(j + 1)}].push_back({j, op.chunk});
        } else if (op.kind == RelayOpKind::kRecv) {
          if (j == 0 || op.peer_run != j - 1) {
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
          recvs[{rank_of(j - 1), rank_of(j)}].push_back({j - 1, op.chunk});
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
    // only with its peers' groups of round t).
    for (const auto& [link, issued] : sends) {
      auto it = recvs.find(link);
      const std::vector<std::pair<int, int64_t>> none;
      const auto& posted = it == recvs.end() ? none : it->second;
      if (issued != posted) {
        auto text = [](const std::vector<std::pair<int, int64_t>>& ops) {
          std::vector<std::string> parts;
          for (const auto& [run, chunk] : ops) {
            parts.push_back(absl::StrCat("run", run, ":", chunk));
          }
          return absl::StrJoin(parts, ",");
        };
        return absl::StrCat("round ", t, ": rank ", link.first, " sends [",
                            text(issued), "] to rank ", link.second,
                            ", which receives [", text(posted), "]");
      }
    }
    for (const auto& [link, posted] : recvs) {
      if (!sends.contains(link)) {
        return absl::StrCat("round ", t, ": rank ", link.second,
                            " receives from rank ", link.first,
                            ", which sends nothing");
      }
    }
  }

  // Completeness: every chunk reached every run and every local receiver.
  for (int j = 0; j < count; ++j) {
    if (j == 0 && next_pack[0] != chunks) {
      return absl::StrCat("run 0 packed ", next_pack[0], " chunks");
    }
    if (j > 0 && next_recv[j] != chunks) {
      return absl::StrCat("run ", j, " received ", next_recv[j], " chunks");
    }
    if (j + 1 < count && next_send[j] != chunks) {
      return absl::StrCat("run ", j, " sent ", next_send[j], " chunks");
    }
    if (any.Delivers(j) && next_deliver[j] != chunks) {
      return absl::StrCat("run ", j, " delivered ", next_deliver[j], " chunks");
    }
  }
  // The wavefront: a chunk moves one link per round.
  for (int j = 1; j < count; ++j) {
    for (int64_t g = 0; g < chunks; ++g) {
      if (arrival_round[j][g] != RelaySchedule::ArrivalRound(j, g)) {
        return absl::StrCat("chunk ", g, " reaches run ", j, " in round ",
                            arrival_round[j][g]);
      }
    }
  }
  if (last_round != chunks + count - 2) {
    return absl::StrCat("the chain takes ", last_round, " rounds");
  }
  return "";
}

Layout Chain(std::vector<int> position_rank, std::vector<int> rank_worker) {
  return Layout{std::move(position_rank), std::move(rank_worker)};
}

TEST(CutIntoRunsTest, MergesConsecutivePositionsOfOneRank) {
  absl::StatusOr<std::vector<RelayRun>> runs =
      CutIntoRuns({3, 3, 1, 0, 0, 3}, {true, true, false, false, false, true});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_EQ((*runs)[0].first, 0);
  EXPECT_EQ((*runs)[0].last, 1);
  EXPECT_EQ((*runs)[0].rank, 3);
  EXPECT_TRUE((*runs)[0].local);
  EXPECT_EQ((*runs)[1].first, 2);
  EXPECT_EQ((*runs)[1].last, 2);
  EXPECT_EQ((*runs)[2].first, 3);
  EXPECT_EQ((*runs)[2].last, 4);
  EXPECT_FALSE((*runs)[2].local);
  EXPECT_EQ((*runs)[3].first, 5);
  EXPECT_EQ((*runs)[3].rank, 3);  // the chain came back to rank 3
}

TEST(CutIntoRunsTest, RefusesBadInput) {
  EXPECT_FALSE(CutIntoRuns({}, {}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 1}, {true}).ok());
  EXPECT_FALSE(CutIntoRuns({0, -1}, {true, false}).ok());
  EXPECT_FALSE(CutIntoRuns({0, 0}, {true, false}).ok());
}

TEST(RelayScheduleTest, RefusesBadInput) {
  const std::vector<RelayRun> two = {{0, 0, 0, true}, {1, 1, 1, false}};
  EXPECT_TRUE(RelaySchedule::Create(two, 1).ok());
  EXPECT_FALSE(RelaySchedule::Create(two, 0).ok());
  EXPECT_FALSE(RelaySchedule::Create(two, 3, 0).ok());
  EXPECT_FALSE(RelaySchedule::Create({{0, 0, 0, true}}, 3).ok());
  EXPECT_FALSE(
      RelaySchedule::Create({{0, 0, 0, true}, {1, 1, 0, false}}, 3).ok());
  EXPECT_FALSE(
      RelaySchedule::Create({{0, 0, 0, true}, {2, 2, 1, false}}, 3).ok());
}

TEST(RelayScheduleTest, RelayReceivesTheNextChunkWhileForwarding) {
  // w0 (rank 0) -> w1 (rank 1, two positions) -> w2 (rank 2); seen by w1.
  absl::StatusOr<RelaySchedule> schedule = RelaySchedule::Create(
      {{0, 0, 0, false}, {1, 2, 1, true}, {3, 3, 2, false}}, 3);
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
      RelaySchedule::Create({{0, 0, 0, true}, {1, 1, 1, false}}, 2);
  ASSERT_TRUE(schedule.ok());
  EXPECT_FALSE(schedule->Delivers(0));
  EXPECT_TRUE(schedule->Delivers(1));
  EXPECT_EQ(schedule->rounds(), 2);
  EXPECT_TRUE(schedule->Round(0).after_group.empty());
  EXPECT_EQ(schedule->Round(0).before_group.size(), 1u);
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
      EXPECT_EQ(CheckChain(layout, chunks, kRelaySlots), "")
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
      const std::string error = CheckChain(layout, chunks, kRelaySlots);
      ASSERT_EQ(error, "") << Describe(layout, chunks);
    }
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(revisits, 100);  // chains that come back to a rank are covered
}

// The checker itself must catch broken schedules.
TEST(RelayScheduleCheckerTest, OneSlotIsOverwrittenWhileInUse) {
  const Layout relay = Chain({0, 1, 2}, {0, 1, 2});
  EXPECT_EQ(CheckChain(relay, 1, 1), "");  // one chunk needs one slot
  EXPECT_THAT(CheckChain(relay, 2, 1), HasSubstr("overwrites slot 0"));
  // A sender consumes each chunk in the round it packs it, so one slot
  // would do there: the checker is exact, not merely strict.
  EXPECT_EQ(CheckChain(Chain({0, 0, 1}, {0, 1}), 3, 1), "");
  EXPECT_THAT(CheckChain(Chain({0, 0, 1, 1, 2}, {0, 1, 2}), 3, 1),
              HasSubstr("run 1 overwrites slot 0"));
}

TEST(RelayScheduleCheckerTest, CatchesSendsIssuedInAnotherOrder) {
  // 0 -> 1 -> 0 -> 1: rank 0 sends to rank 1 twice in a round.
  const Layout pingpong = Chain({0, 1, 0, 1}, {0, 1});
  auto reverse_group = [](int worker, int64_t, RelayRound* round) {
    if (worker == 0) std::reverse(round->group.begin(), round->group.end());
  };
  EXPECT_THAT(CheckChain(pingpong, 4, kRelaySlots, reverse_group),
              HasSubstr("sends ["));
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
  EXPECT_THAT(CheckChain(relay, 3, kRelaySlots, early),
              HasSubstr("out of order"));
  // The same chunk sent from the other slot.
  auto wrong_slot = [](int worker, int64_t, RelayRound* round) {
    if (worker != 1) return;
    for (RelayOp& op : round->group) {
      if (op.kind == RelayOpKind::kSend) op.slot = 1 - op.slot;
    }
  };
  EXPECT_THAT(CheckChain(relay, 3, kRelaySlots, wrong_slot),
              HasSubstr("in slot"));
}

TEST(RelayScheduleCheckerTest, CatchesSkippedAndLateRounds) {
  const Layout relay = Chain({0, 1, 1, 2}, {0, 1, 2});
  auto skip = [](int worker, int64_t t, RelayRound* round) {
    if (worker == 1 && t == 2) *round = RelayRound{};
  };
  EXPECT_THAT(CheckChain(relay, 4, kRelaySlots, skip), HasSubstr("round 2"));
  auto no_delivery = [](int worker, int64_t t, RelayRound* round) {
    if (worker == 2 && t == 3) round->after_group.clear();
  };
  EXPECT_THAT(CheckChain(relay, 4, kRelaySlots, no_delivery),
              HasSubstr("delivers chunk"));
  // Delivering inside the group would race with the receive.
  auto deliver_in_group = [](int worker, int64_t, RelayRound* round) {
    if (worker != 2) return;
    for (const RelayOp& op : round->after_group) round->group.push_back(op);
    round->after_group.clear();
  };
  EXPECT_THAT(CheckChain(relay, 4, kRelaySlots, deliver_in_group),
              HasSubstr("inside the group"));
}

}  // namespace
}  // namespace meshcast::worker::cuda
