#include "worker/communicator_cache.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/in_memory_kv_store.h"

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;

// One worker: its own cache, as a worker daemon has.
struct Worker {
  explicit Worker(CommunicatorCacheOptions options = {})
      : cache(std::make_unique<CommunicatorCache>(options, nullptr)) {}
  std::unique_ptr<CommunicatorCache> cache;
};

GlooOptions FastGloo() {
  GlooOptions options;
  options.rendezvous_timeout = absl::Seconds(10);
  options.op_timeout = absl::Seconds(10);
  options.poll_interval = absl::Milliseconds(20);
  return options;
}

CommunicatorRequest RequestFor(const std::string& job_id, int rank,
                               const std::vector<std::string>& workers) {
  CommunicatorRequest request;
  request.job_id = job_id;
  request.rank_workers = workers;
  request.rank = rank;
  request.size = static_cast<int>(workers.size());
  request.gloo = FastGloo();
  return request;
}

// Acquires on every worker at once (ranks in order of `workers`).
std::vector<absl::StatusOr<std::unique_ptr<CommunicatorLease>>> AcquireAll(
    KvStore& kv, std::vector<Worker*> workers, const std::string& job_id,
    const std::vector<std::string>& names) {
  std::vector<absl::StatusOr<std::unique_ptr<CommunicatorLease>>> leases(
      workers.size());
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    threads.emplace_back([&, rank] {
      leases[rank] = workers[rank]->cache->Acquire(
          kv, RequestFor(job_id, static_cast<int>(rank), names));
    });
  }
  for (std::thread& thread : threads) thread.join();
  return leases;
}

// Every rank sends its rank number to every other with `tag`; checks that
// each received exactly what its peer sent.
void ExchangeOrFail(
    std::vector<absl::StatusOr<std::unique_ptr<CommunicatorLease>>>& leases,
    uint64_t tag) {
  const int size = static_cast<int>(leases.size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      Communicator& comm = (*leases[rank])->comm();
      std::vector<uint8_t> out(1000, static_cast<uint8_t>(rank + 1));
      std::vector<std::vector<uint8_t>> in(size, std::vector<uint8_t>(1000));
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        requests.push_back(*comm.StartRecv(absl::MakeSpan(in[peer]), peer, tag));
        requests.push_back(*comm.StartSend(out, peer, tag));
      }
      for (auto& request : requests) EXPECT_TRUE(request->Wait().ok());
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        for (uint8_t byte : in[peer]) {
          ASSERT_EQ(byte, static_cast<uint8_t>(peer + 1))
              << "rank " << rank << " from " << peer;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(CommunicatorCacheTest, SecondJobOnTheSameWorkersReusesTheCommunicator) {
  InMemoryKvStore kv;
  Worker a, b;
  const std::vector<std::string> names = {"a", "b"};
  auto first = AcquireAll(kv, {&a, &b}, "job-1", names);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  ASSERT_TRUE(first[1].ok()) << first[1].status();
  EXPECT_FALSE((*first[0])->reused());
  EXPECT_EQ((*first[0])->id(), (*first[1])->id());
  EXPECT_THAT((*first[0])->id(), HasSubstr("job-1/"));
  ExchangeOrFail(first, 7);
  GlooCommunicator* const comm_a = &(*first[0])->comm();
  a.cache->Release(*std::move(first[0]), true);
  b.cache->Release(*std::move(first[1]), true);
  EXPECT_EQ(a.cache->stats().idle, 1);

  auto second = AcquireAll(kv, {&a, &b}, "job-2", names);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  ASSERT_TRUE(second[1].ok()) << second[1].status();
  EXPECT_TRUE((*second[0])->reused());
  EXPECT_TRUE((*second[1])->reused());
  EXPECT_EQ(&(*second[0])->comm(), comm_a);
  // Same tag as the first job: the first job's messages are all consumed.
  ExchangeOrFail(second, 7);
  a.cache->Release(*std::move(second[0]), true);
  b.cache->Release(*std::move(second[1]), true);
  EXPECT_EQ(a.cache->stats().created, 1);
  EXPECT_EQ(a.cache->stats().reused, 1);
  // No new rendezvous for the second job.
  EXPECT_FALSE(kv.Get("job/job-2/gloo/rank_0", absl::ZeroDuration()).ok());
}

TEST(CommunicatorCacheTest, AFailedJobDropsItAndTheNextJobConnectsAnew) {
  InMemoryKvStore kv;
  Worker a, b;
  const std::vector<std::string> names = {"a", "b"};
  auto first = AcquireAll(kv, {&a, &b}, "job-1", names);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  const std::string first_id = (*first[0])->id();
  // The job fails on worker a only (b finished its part).
  (*first[0])->comm().Abort("step failed");
  a.cache->Release(*std::move(first[0]), false);
  b.cache->Release(*std::move(first[1]), true);
  EXPECT_EQ(a.cache->stats().entries, 0);
  EXPECT_EQ(a.cache->stats().dropped, 1);
  EXPECT_EQ(b.cache->stats().idle, 1);

  auto second = AcquireAll(kv, {&a, &b}, "job-2", names);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  ASSERT_TRUE(second[1].ok()) << second[1].status();
  EXPECT_FALSE((*second[0])->reused());
  EXPECT_FALSE((*second[1])->reused());
  EXPECT_NE((*second[0])->id(), first_id);
  ExchangeOrFail(second, 1);
  // b learned from a's record that the old one is gone there.
  EXPECT_EQ(b.cache->stats().dropped, 1);
  a.cache->Release(*std::move(second[0]), true);
  b.cache->Release(*std::move(second[1]), true);
  EXPECT_EQ(b.cache->stats().entries, 1);
}

TEST(CommunicatorCacheTest, AWorkerThatRestartedGetsANewOne) {
  InMemoryKvStore kv;
  Worker a, b;
  const std::vector<std::string> names = {"a", "b"};
  auto first = AcquireAll(kv, {&a, &b}, "job-1", names);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  a.cache->Release(*std::move(first[0]), true);
  b.cache->Release(*std::move(first[1]), true);
  b.cache = std::make_unique<CommunicatorCache>(CommunicatorCacheOptions{},
                                                nullptr);  // restart
  auto second = AcquireAll(kv, {&a, &b}, "job-2", names);
  ASSERT_TRUE(second[0].ok()) << second[0].status();
  ASSERT_TRUE(second[1].ok()) << second[1].status();
  EXPECT_FALSE((*second[0])->reused());
  ExchangeOrFail(second, 3);
  EXPECT_EQ(a.cache->stats().dropped, 1);
  a.cache->Release(*std::move(second[0]), true);
  b.cache->Release(*std::move(second[1]), true);
}

TEST(CommunicatorCacheTest, ConcurrentJobsOnTheSameWorkersNeverShareOne) {
  InMemoryKvStore kv;
  Worker a, b;
  const std::vector<std::string> names = {"a", "b"};
  // One cached communicator to fight over.
  {
    auto warm = AcquireAll(kv, {&a, &b}, "job-0", names);
    ASSERT_TRUE(warm[0].ok() && warm[1].ok());
    a.cache->Release(*std::move(warm[0]), true);
    b.cache->Release(*std::move(warm[1]), true);
  }
  for (int round = 0; round < 5; ++round) {
    // Two jobs at once; each worker sees them in a different order.
    const std::string j1 = absl::StrCat("job-", round, "-x");
    const std::string j2 = absl::StrCat("job-", round, "-y");
    std::vector<absl::StatusOr<std::unique_ptr<CommunicatorLease>>> x(2), y(2);
    std::thread a1([&] { x[0] = a.cache->Acquire(kv, RequestFor(j1, 0, names)); });
    std::thread b2([&] { y[1] = b.cache->Acquire(kv, RequestFor(j2, 1, names)); });
    absl::SleepFor(absl::Milliseconds(round * 3));
    std::thread a2([&] { y[0] = a.cache->Acquire(kv, RequestFor(j2, 0, names)); });
    std::thread b1([&] { x[1] = b.cache->Acquire(kv, RequestFor(j1, 1, names)); });
    a1.join();
    b2.join();
    a2.join();
    b1.join();
    for (auto* leases : {&x, &y}) {
      ASSERT_TRUE((*leases)[0].ok()) << (*leases)[0].status();
      ASSERT_TRUE((*leases)[1].ok()) << (*leases)[1].status();
      EXPECT_EQ((*(*leases)[0])->id(), (*(*leases)[1])->id());
    }
    EXPECT_NE(&(*x[0])->comm(), &(*y[0])->comm());
    EXPECT_NE(&(*x[1])->comm(), &(*y[1])->comm());
    // Both jobs use the same tags at the same time.
    std::thread tx([&] { ExchangeOrFail(x, 5); });
    std::thread ty([&] { ExchangeOrFail(y, 5); });
    tx.join();
    ty.join();
    for (auto* leases : {&x, &y}) {
      a.cache->Release(std::move(*(*leases)[0]), true);
      b.cache->Release(std::move(*(*leases)[1]), true);
    }
  }
  EXPECT_LE(a.cache->stats().entries, 16);
}

TEST(CommunicatorCacheTest, IdleOnesAreEvictedAndTheCacheIsBounded) {
  CommunicatorCacheOptions options;
  options.max_entries = 2;
  options.idle_timeout = absl::Milliseconds(300);
  InMemoryKvStore kv;
  Worker a(options), b(options), c(options);
  // Three different sets of workers: three keys on worker a.
  const std::vector<std::vector<std::string>> sets = {
      {"a", "b"}, {"a", "c"}, {"a", "b", "c"}};
  int job = 0;
  for (const auto& names : sets) {
    std::vector<Worker*> workers = {&a};
    if (names.size() == 3) {
      workers = {&a, &b, &c};
    } else {
      workers.push_back(names[1] == "b" ? &b : &c);
    }
    auto leases = AcquireAll(kv, workers, absl::StrCat("job-", ++job), names);
    for (auto& lease : leases) ASSERT_TRUE(lease.ok()) << lease.status();
    ExchangeOrFail(leases, 9);
    for (size_t i = 0; i < workers.size(); ++i) {
      workers[i]->cache->Release(std::move(*leases[i]), true);
    }
    EXPECT_LE(a.cache->stats().entries, 2);
  }
  EXPECT_EQ(a.cache->stats().evicted, 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (a.cache->stats().entries > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(a.cache->stats().entries, 0);
  EXPECT_EQ(a.cache->stats().evicted, 3);
}

TEST(CommunicatorCacheTest, AcquireIsCancelledWhileAPeerNeverComes) {
  InMemoryKvStore kv;
  Worker a;
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    cancel = true;
  });
  const absl::Time start = absl::Now();
  auto lease = a.cache->Acquire(kv, RequestFor("job-1", 0, {"a", "b"}),
                                [&] { return cancel.load(); });
  canceller.join();
  EXPECT_EQ(lease.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

// A store through which a rank publishes but never hears back.
class DeafKvStore : public KvStore {
 public:
  explicit DeafKvStore(KvStore& kv) : kv_(kv) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return kv_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    absl::SleepFor(timeout);
    return absl::DeadlineExceededError(key);
  }

 private:
  KvStore& kv_;
};

TEST(CommunicatorCacheTest, CancelWhileConnectingEndsPromptly) {
  // Rank 1 publishes its agreement record and its Gloo addresses but never
  // connects: rank 0 gets past the rendezvous into Gloo's connect, which
  // cannot be interrupted; Acquire must still return at once.
  InMemoryKvStore kv;
  Worker a;
  ASSERT_TRUE(kv.Set("job/job-1/comm/1", "feed\n\n").ok());
  DeafKvStore deaf(kv);
  std::atomic<bool> stop_peer{false};
  std::thread peer([&] {
    GlooOptions options = FastGloo();
    options.peer_names = {"a", "b"};
    auto comm = GlooCommunicator::Create(deaf, "job/job-1/gloo/", 1, 2,
                                         options,
                                         [&] { return stop_peer.load(); });
    EXPECT_FALSE(comm.ok());
  });
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(500));
    cancel = true;
  });
  const absl::Time start = absl::Now();
  auto lease = a.cache->Acquire(kv, RequestFor("job-1", 0, {"a", "b"}),
                                [&] { return cancel.load(); });
  const absl::Duration took = absl::Now() - start;
  canceller.join();
  stop_peer = true;
  peer.join();
  EXPECT_EQ(lease.status().code(), absl::StatusCode::kCancelled)
      << lease.status();
  EXPECT_GE(took, absl::Milliseconds(450));
  // Well under the 10 s connect timeout; the slack is for a loaded 2-core
  // machine (the whole suite runs with -j2), where the cancel was seen to take 2 s.
  EXPECT_LT(took, absl::Milliseconds(3000));
}

TEST(CommunicatorCacheTest, RejectsRequestsWithoutWorkerNames) {
  InMemoryKvStore kv;
  Worker a;
  CommunicatorRequest request = RequestFor("job-1", 0, {"a", "b"});
  request.rank_workers.pop_back();
  EXPECT_EQ(a.cache->Acquire(kv, request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshcast::worker
