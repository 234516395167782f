// Host-only (no GPU): the GPU collectives' exchanges between workers,
// simulated for every worker of random groups (any number of ranks per
// worker, in any order, uneven sizes, empty pieces): sends meet receives of
// the same length in the same group call, and the data that arrives, after
// the listed reductions, is what the collective defines.
#include "worker/cuda/collective_exchange.h"

#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast::worker::cuda {
namespace {

// A random group: n ranks over m workers, every worker holding one at
// least, ranks shuffled across workers.
std::vector<int> RandomWorkers(std::mt19937& random, int n, int m) {
  std::vector<int> worker(n);
  for (int r = 0; r < n; ++r) worker[r] = r < m ? r : random() % m;
  std::shuffle(worker.begin(), worker.end(), random);
  // Worker ids need not be indices: scramble them.
  for (int& w : worker) w = 10 + 7 * w;
  return worker;
}

// One worker's memory: a vector per region (per peer for the per-peer
// regions).
struct Memory {
  std::vector<double> accumulator, staging, bundle;
  std::map<int, std::vector<double>> outgoing, incoming;
  std::vector<double>& Of(const Transfer& t) {
    switch (t.region) {
      case Region::kAccumulator:
        return accumulator;
      case Region::kStaging:
        return staging;
      case Region::kBundle:
        return bundle;
      case Region::kOutgoing:
        return outgoing[t.peer];
      case Region::kIncoming:
        return incoming[t.peer];
    }
    return accumulator;
  }
};

// Runs every worker's exchange, group call by group call, checking NCCL's
// matching: per ordered pair of workers, the k-th send meets the k-th
// receive, with the same length, in the same group call index.
void Simulate(const std::vector<Exchange>& exchanges,
              std::vector<Memory>& memory) {
  const int m = static_cast<int>(exchanges.size());
  size_t groups = 0;
  for (const Exchange& x : exchanges) groups = std::max(groups, x.groups.size());
  for (const Exchange& x : exchanges) {
    ASSERT_EQ(x.groups.size(), groups) << "workers issue different numbers "
                                          "of group calls";
  }
  for (size_t g = 0; g < groups; ++g) {
    // (from, to) -> the sends of this group call, in order.
    std::map<std::pair<int, int>, std::vector<std::vector<double>>> sent;
    for (int w = 0; w < m; ++w) {
      for (const Transfer& t : exchanges[w].groups[g]) {
        if (!t.send) continue;
        ASSERT_NE(t.peer, w);
        const std::vector<double>& region = memory[w].Of(t);
        ASSERT_LE(t.offset + t.length, static_cast<int64_t>(region.size()));
        sent[{w, t.peer}].emplace_back(region.begin() + t.offset,
                                       region.begin() + t.offset + t.length);
      }
    }
    std::map<std::pair<int, int>, size_t> taken;
    for (int w = 0; w < m; ++w) {
      for (const Transfer& t : exchanges[w].groups[g]) {
        if (t.send) continue;
        auto& queue = sent[{t.peer, w}];
        size_t& k = taken[{t.peer, w}];
        ASSERT_LT(k, queue.size())
            << "worker " << w << " receives from " << t.peer
            << " in group " << g << " more than it sends there";
        const std::vector<double>& data = queue[k++];
        ASSERT_EQ(static_cast<int64_t>(data.size()), t.length)
            << "group " << g << ": " << t.peer << " -> " << w;
        std::vector<double>& region = memory[w].Of(t);
        ASSERT_LE(t.offset + t.length, static_cast<int64_t>(region.size()));
        std::copy(data.begin(), data.end(), region.begin() + t.offset);
      }
    }
    for (const auto& [pair, queue] : sent) {
      EXPECT_EQ(taken[pair], queue.size())
          << "group " << g << ": sends from " << pair.first << " to "
          << pair.second << " nobody receives";
    }
    for (int w = 0; w < m; ++w) {
      for (const Reduction& r : exchanges[w].reductions[g]) {
        for (int64_t i = 0; i < r.length; ++i) {
          memory[w].accumulator[r.accumulator_offset + i] +=
              memory[w].staging[r.staging_offset + i];
        }
      }
    }
  }
}

// Worker w contributes 2^w to every element (plus the index, to catch
// misplaced pieces): after the all-reduce every worker holds 2^m - 1 + m i.
TEST(CollectiveExchangeTest, AllReduceSumsEveryWorkerOnce) {
  std::mt19937 random(1);
  for (int trial = 0; trial < 300; ++trial) {
    const int m = 1 + random() % 6;
    const int n = m + random() % 5;
    const int64_t elements = random() % 40;  // fewer than m included
    auto layout = GroupLayout::Create(RandomWorkers(random, n, m));
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(layout->m(), m);
    std::vector<Exchange> exchanges;
    std::vector<Memory> memory(m);
    for (int w = 0; w < m; ++w) {
      exchanges.push_back(AllReduceExchange(*layout, w, elements));
      memory[w].accumulator.resize(elements);
      for (int64_t i = 0; i < elements; ++i) {
        memory[w].accumulator[i] = (1 << w) + static_cast<double>(i);
      }
      memory[w].staging.assign(exchanges[w].staging_elements, -1e9);
    }
    Simulate(exchanges, memory);
    for (int w = 0; w < m; ++w) {
      for (int64_t i = 0; i < elements; ++i) {
        ASSERT_EQ(memory[w].accumulator[i],
                  (1 << m) - 1 + static_cast<double>(m) * i)
            << "trial " << trial << " worker " << w << " element " << i;
      }
    }
  }
}

// Each rank's chunk holds every worker's contribution once on the worker
// of that rank.
TEST(CollectiveExchangeTest, ReduceScatterSumsEachChunkOnItsRanksWorker) {
  std::mt19937 random(2);
  for (int trial = 0; trial < 300; ++trial) {
    const int m = 1 + random() % 5;
    const int n = m + random() % 6;
    const int64_t rows = 1 + random() % 12;  // fewer rows than ranks too
    const int64_t row = 1 + random() % 3;
    auto layout = GroupLayout::Create(RandomWorkers(random, n, m));
    ASSERT_TRUE(layout.ok());
    std::vector<Exchange> exchanges;
    std::vector<Memory> memory(m);
    for (int w = 0; w < m; ++w) {
      exchanges.push_back(ReduceScatterExchange(*layout, w, rows, row));
      memory[w].accumulator.assign(rows * row, 1 << w);
      memory[w].staging.assign(exchanges[w].staging_elements, -1e9);
    }
    Simulate(exchanges, memory);
    int64_t covered = 0;
    for (int r = 0; r < n; ++r) {
      const int w = layout->WorkerOf(r);
      const ElementRange c = ReduceScatterChunk(rows, row, n, r);
      covered += c.length();
      for (int64_t i = c.begin; i < c.end; ++i) {
        ASSERT_EQ(memory[w].accumulator[i], (1 << m) - 1)
            << "trial " << trial << " rank " << r << " element " << i;
      }
    }
    EXPECT_EQ(covered, rows * row);  // the chunks tile the output
  }
}

TEST(CollectiveExchangeTest, AllGatherDeliversEveryBundleToEveryWorker) {
  std::mt19937 random(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int m = 1 + random() % 6;
    const int n = m + random() % 4;
    auto layout = GroupLayout::Create(RandomWorkers(random, n, m));
    ASSERT_TRUE(layout.ok());
    std::vector<int64_t> bundle(m);
    for (int64_t& b : bundle) b = random() % 9;
    std::vector<Exchange> exchanges;
    std::vector<Memory> memory(m);
    for (int w = 0; w < m; ++w) {
      exchanges.push_back(AllGatherExchange(*layout, w, bundle));
      for (int64_t i = 0; i < bundle[w]; ++i) {
        memory[w].bundle.push_back(100 * w + i);
      }
      for (int p = 0; p < m; ++p) {
        memory[w].incoming[p].assign(exchanges[w].incoming_elements[p], -1);
      }
    }
    Simulate(exchanges, memory);
    for (int w = 0; w < m; ++w) {
      for (int p = 0; p < m; ++p) {
        if (p == w) continue;
        ASSERT_EQ(memory[w].incoming[p], memory[p].bundle)
            << "trial " << trial << ": " << p << " -> " << w;
      }
    }
  }
}

// Every block (r, t) between ranks of different workers arrives at t's
// worker in the position BundleBlocks gives it there.
TEST(CollectiveExchangeTest, AllToAllBundlesCarryEveryBlockInOneOrder) {
  std::mt19937 random(4);
  for (int trial = 0; trial < 200; ++trial) {
    const int m = 1 + random() % 5;
    const int n = m + random() % 4;
    auto layout = GroupLayout::Create(RandomWorkers(random, n, m));
    ASSERT_TRUE(layout.ok());
    std::vector<int64_t> counts(n * n);
    for (int64_t& c : counts) c = random() % 4;
    std::vector<Exchange> exchanges;
    std::vector<Memory> memory(m);
    for (int w = 0; w < m; ++w) {
      exchanges.push_back(AllToAllExchange(*layout, w, counts));
      for (int p = 0; p < m; ++p) {
        if (p == w) continue;
        // Element j of block (r, t) holds a code of (r, t, j).
        std::vector<double>& out = memory[w].outgoing[p];
        for (const auto& [r, t] : BundleBlocks(*layout, w, p)) {
          for (int64_t j = 0; j < counts[r * n + t]; ++j) {
            out.push_back(10000 * r + 100 * t + j);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(out.size()),
                  exchanges[w].outgoing_elements[p]);
        memory[w].incoming[p].assign(exchanges[w].incoming_elements[p], -1);
      }
    }
    Simulate(exchanges, memory);
    for (int w = 0; w < m; ++w) {
      for (int p = 0; p < m; ++p) {
        if (p == w) continue;
        size_t at = 0;
        for (const auto& [r, t] : BundleBlocks(*layout, p, w)) {
          ASSERT_EQ(layout->WorkerOf(r), p);
          ASSERT_EQ(layout->WorkerOf(t), w);
          for (int64_t j = 0; j < counts[r * n + t]; ++j, ++at) {
            ASSERT_EQ(memory[w].incoming[p][at], 10000 * r + 100 * t + j)
                << "trial " << trial;
          }
        }
        EXPECT_EQ(at, memory[w].incoming[p].size());
      }
    }
  }
}

TEST(CollectiveExchangeTest, LayoutIndexesWorkersByFirstAppearance) {
  auto layout = GroupLayout::Create({7, 3, 7, 5, 3});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->m(), 3);
  EXPECT_EQ(layout->IndexOfId(7), 0);
  EXPECT_EQ(layout->IndexOfId(3), 1);
  EXPECT_EQ(layout->IndexOfId(5), 2);
  EXPECT_EQ(layout->IndexOfId(9), -1);
  EXPECT_EQ(layout->RanksOf(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(layout->RanksOf(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(layout->WorkerOf(3), 2);
  EXPECT_FALSE(GroupLayout::Create({}).ok());
  // 10 rows over 4 ranks: 3, 3, 3, 1; 3 rows over 4: 1, 1, 1, 0.
  EXPECT_EQ(ReduceScatterChunk(10, 2, 4, 3).begin, 18);
  EXPECT_EQ(ReduceScatterChunk(10, 2, 4, 3).end, 20);
  EXPECT_EQ(ReduceScatterChunk(3, 1, 4, 3).length(), 0);
  EXPECT_EQ(AllReducePiece(5, 3, 2).length(), 1);
  EXPECT_EQ(AllReducePiece(1, 3, 2).length(), 0);
}

TEST(CollectiveExchangeTest, BufferBoxesRoundTrip) {
  const std::vector<std::pair<int, Box>> boxes = {
      {3, {{0, 4}, {2, 9}}}, {17, {{5, 5}}}, {0, {}}};
  auto decoded = DecodeBufferBoxes(EncodeBufferBoxes(boxes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, boxes);
  EXPECT_TRUE(DecodeBufferBoxes("")->empty());
  for (const char* bad : {"x:0-1", "3:0-1,4", "3:5-2", "3", "3:0-1;;"}) {
    EXPECT_EQ(DecodeBufferBoxes(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace meshcast::worker::cuda
