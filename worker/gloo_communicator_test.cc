#include "worker/gloo_communicator.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/controller_kv_store.h"
#include "worker/in_memory_kv_store.h"
#include "worker/task.h"
#include "worker/testing/fake_controller.h"
#include "worker/testing/test_job.h"

extern char** environ;

namespace meshcast::worker {
namespace {

using ::testing::HasSubstr;

GlooOptions FastOptions() {
  GlooOptions options;
  options.rendezvous_timeout = absl::Seconds(10);
  options.op_timeout = absl::Seconds(10);
  options.poll_interval = absl::Milliseconds(20);
  return options;
}

// Connects `size` communicators in threads over 127.0.0.1.
std::vector<std::unique_ptr<GlooCommunicator>> ConnectAll(
    KvStore& kv, int size, const GlooOptions& options) {
  std::vector<std::unique_ptr<GlooCommunicator>> comms(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm =
          GlooCommunicator::Create(kv, "job/t/gloo/", rank, size, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      comms[rank] = *std::move(comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

std::vector<uint8_t> Message(int from, int to, size_t bytes) {
  std::vector<uint8_t> data;
  data.reserve(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data.push_back(static_cast<uint8_t>(from * 31 + to * 7 + i));
  }
  return data;
}

TEST(GlooCommunicatorTest, ThreeRanksExchangeWithEveryPeer) {
  InMemoryKvStore kv;
  auto comms = ConnectAll(kv, 3, FastOptions());
  for (auto& comm : comms) ASSERT_NE(comm, nullptr);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      GlooCommunicator& comm = *comms[rank];
      EXPECT_EQ(comm.rank(), rank);
      EXPECT_EQ(comm.size(), 3);
      std::vector<std::vector<uint8_t>> outgoing, incoming;
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int peer = 0; peer < 3; ++peer) {
        if (peer == rank) continue;
        outgoing.push_back(Message(rank, peer, 300000 + peer));
        incoming.emplace_back(300000 + rank);
      }
      int k = 0;
      for (int peer = 0; peer < 3; ++peer) {
        if (peer == rank) continue;
        auto recv = comm.StartRecv(absl::MakeSpan(incoming[k]), peer, 7);
        ASSERT_TRUE(recv.ok()) << recv.status();
        requests.push_back(*std::move(recv));
        auto send = comm.StartSend(outgoing[k], peer, 7);
        ASSERT_TRUE(send.ok()) << send.status();
        requests.push_back(*std::move(send));
        ++k;
      }
      for (auto& request : requests) {
        absl::Status status = request->Wait();
        EXPECT_TRUE(status.ok()) << status;
      }
      k = 0;
      for (int peer = 0; peer < 3; ++peer) {
        if (peer == rank) continue;
        EXPECT_EQ(incoming[k], Message(peer, rank, 300000 + rank));
        ++k;
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// Receives are matched by tag, not by posting order.
TEST(GlooCommunicatorTest, TagsMatchOutOfOrder) {
  InMemoryKvStore kv;
  auto comms = ConnectAll(kv, 2, FastOptions());
  ASSERT_NE(comms[0], nullptr);
  ASSERT_NE(comms[1], nullptr);
  constexpr int kMessages = 8;
  std::thread sender([&] {
    std::vector<std::vector<uint8_t>> data;
    std::vector<std::unique_ptr<CommRequest>> sends;
    for (int tag = kMessages - 1; tag >= 0; --tag) {
      data.push_back(Message(tag, 0, 1000 + tag));
    }
    for (int k = 0; k < kMessages; ++k) {
      sends.push_back(*comms[0]->StartSend(data[k], 1, kMessages - 1 - k));
    }
    for (auto& send : sends) EXPECT_TRUE(send->Wait().ok());
  });
  for (int tag = 0; tag < kMessages; ++tag) {
    std::vector<uint8_t> data(1000 + tag);
    ASSERT_TRUE(comms[1]->Recv(absl::MakeSpan(data), 0, tag).ok());
    EXPECT_EQ(data, Message(tag, 0, 1000 + tag));
  }
  sender.join();
}

// With several connections per pair, consecutive tags go over different
// connections and every message still lands intact where its tag says.
TEST(GlooCommunicatorTest, SeveralConnectionsCarryEveryTag) {
  InMemoryKvStore kv;
  GlooOptions options = FastOptions();
  options.connections = 3;
  auto comms = ConnectAll(kv, 2, options);
  ASSERT_NE(comms[0], nullptr);
  ASSERT_NE(comms[1], nullptr);
  EXPECT_EQ(comms[0]->connections(), 3);
  constexpr int kMessages = 16;
  std::vector<std::vector<uint8_t>> data;
  for (int tag = 0; tag < kMessages; ++tag) {
    data.push_back(Message(tag, 1, 200000 + 1000 * tag));
  }
  std::thread sender([&] {
    std::vector<std::unique_ptr<CommRequest>> sends;
    for (int tag = 0; tag < kMessages; ++tag) {
      sends.push_back(*comms[0]->StartSend(data[tag], 1, tag));
    }
    for (auto& send : sends) EXPECT_TRUE(send->Wait().ok());
  });
  std::vector<std::vector<uint8_t>> received(kMessages);
  std::vector<std::unique_ptr<CommRequest>> receives;
  for (int tag = kMessages - 1; tag >= 0; --tag) {
    received[tag].resize(data[tag].size());
    receives.push_back(
        *comms[1]->StartRecv(absl::MakeSpan(received[tag]), 0, tag));
  }
  for (auto& receive : receives) EXPECT_TRUE(receive->Wait().ok());
  sender.join();
  for (int tag = 0; tag < kMessages; ++tag) {
    EXPECT_EQ(received[tag], data[tag]) << "tag " << tag;
  }
  // Abort reaches every connection.
  comms[0]->Abort("test over");
  EXPECT_TRUE(comms[0]->aborted());
  std::vector<uint8_t> one(8);
  EXPECT_FALSE(comms[1]->Recv(absl::MakeSpan(one), 0, 2).ok());
}

TEST(GlooCommunicatorTest, EachDirectionOfAPairHasItsOwnConnections) {
  // One connection: everything on it.
  EXPECT_EQ(GlooCommunicator::LinkOf(1, 7, 0, 1), 0);
  EXPECT_EQ(GlooCommunicator::LinkOf(1, 7, 1, 0), 0);
  // Two: one per direction, whatever the tag.
  for (uint64_t tag : {0, 1, 2, 1001}) {
    EXPECT_EQ(GlooCommunicator::LinkOf(2, tag, 0, 3), 0);
    EXPECT_EQ(GlooCommunicator::LinkOf(2, tag, 3, 0), 1);
  }
  // Four: the tags of one direction spread over its two.
  EXPECT_EQ(GlooCommunicator::LinkOf(4, 0, 1, 2), 0);
  EXPECT_EQ(GlooCommunicator::LinkOf(4, 1, 1, 2), 2);
  EXPECT_EQ(GlooCommunicator::LinkOf(4, 0, 2, 1), 1);
  EXPECT_EQ(GlooCommunicator::LinkOf(4, 1, 2, 1), 3);
  // Three: the last one idle.
  for (uint64_t tag = 0; tag < 6; ++tag) {
    EXPECT_LT(GlooCommunicator::LinkOf(3, tag, 0, 1), 2);
    EXPECT_LT(GlooCommunicator::LinkOf(3, tag, 1, 0), 2);
  }
}

// Both ranks send to each other at once with the same tags, on the
// default connections (one per direction): every message lands intact.
TEST(GlooCommunicatorTest, BothDirectionsAtOnceWithTheSameTags) {
  InMemoryKvStore kv;
  auto comms = ConnectAll(kv, 2, FastOptions());
  ASSERT_NE(comms[0], nullptr);
  ASSERT_NE(comms[1], nullptr);
  EXPECT_EQ(comms[0]->connections(), 2);
  constexpr int kMessages = 8;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      const int peer = 1 - rank;
      std::vector<std::vector<uint8_t>> out, in(kMessages);
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int tag = 0; tag < kMessages; ++tag) {
        out.push_back(Message(tag, rank, 300000 + 100 * tag));
        in[tag].resize(300000 + 100 * tag);
      }
      for (int tag = 0; tag < kMessages; ++tag) {
        requests.push_back(*comms[rank]->StartSend(out[tag], peer, tag));
        requests.push_back(
            *comms[rank]->StartRecv(absl::MakeSpan(in[tag]), peer, tag));
      }
      for (auto& request : requests) EXPECT_TRUE(request->Wait().ok());
      for (int tag = 0; tag < kMessages; ++tag) {
        EXPECT_EQ(in[tag], Message(tag, peer, 300000 + 100 * tag)) << tag;
      }
    });
  }
  for (std::thread& thread : ranks) thread.join();
}

TEST(GlooCommunicatorTest, RejectsBadPeers) {
  InMemoryKvStore kv;
  auto comms = ConnectAll(kv, 2, FastOptions());
  ASSERT_NE(comms[0], nullptr);
  std::vector<uint8_t> data(4);
  EXPECT_EQ(comms[0]->Send(data, 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Send(data, 2, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(GlooCommunicator::Create(kv, "x/", 2, 2, FastOptions()).ok());
}

TEST(GlooCommunicatorTest, RendezvousWithoutPeersTimesOut) {
  InMemoryKvStore kv;
  GlooOptions options = FastOptions();
  options.rendezvous_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto comm = GlooCommunicator::Create(kv, "job/lonely/gloo/", 0, 2, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_NE(comm.status().message().find("job/lonely/gloo/"),
            std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GlooCommunicatorTest, RendezvousCanBeCancelled) {
  InMemoryKvStore kv;
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cancelled = true;
  });
  const absl::Time start = absl::Now();
  auto comm = GlooCommunicator::Create(kv, "job/c/gloo/", 1, 2, FastOptions(),
                                       [&] { return cancelled.load(); });
  canceller.join();
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Entries of a /proc/self directory (threads: "task", descriptors: "fd").
int CountProcEntries(const std::string& dir) {
  std::error_code error;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(
           std::string("/proc/self/") + dir, error);
       !error && it != std::filesystem::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

// Waits up to `bound` for the process's threads and descriptors to come
// back to `threads` / `fds`; true if they did.
bool ResourcesReturnTo(int threads, int fds, absl::Duration bound) {
  const absl::Time deadline = absl::Now() + bound;
  while (absl::Now() < deadline) {
    if (CountProcEntries("task") <= threads && CountProcEntries("fd") <= fds) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A job aborted while one of its peers never shows up leaves nothing
// behind: the task ends at once, and the connect it abandoned (Gloo's
// device: a listening socket and an event-loop thread) is gone within a
// poll interval, long before the rendezvous timeout.
TEST(GlooCommunicatorTest, AbortedTaskWhosePeerNeverComesFreesEverything) {
  InMemoryKvStore kv;
  testing::TestJob job(2, 2, "job-abandoned");
  const int t = job.AddTensor({{64, 64}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 2});
  TaskOptions options;
  options.gloo = FastOptions();
  options.gloo.rendezvous_timeout = absl::Seconds(60);  // far beyond the bound
  options.gloo.poll_interval = absl::Milliseconds(50);
  const int threads = CountProcEntries("task");
  const int fds = CountProcEntries("fd");
  ASSERT_GT(threads, 0);
  ASSERT_GT(fds, 0);
  Task task(job.ProgramFor(0), &kv, options);
  absl::StatusOr<v1::JobResult> result;
  std::thread run([&] { result = task.Run(); });
  // Rank 0 published its address: it is waiting for rank 1, which never
  // comes, with a Gloo device open.
  const absl::Time wait_until = absl::Now() + absl::Seconds(10);
  while (CountProcEntries("fd") <= fds && absl::Now() < wait_until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(CountProcEntries("fd"), fds) << "the connect never opened a socket";
  EXPECT_EQ(task.progress().phase(), "connect");
  const absl::Time start = absl::Now();
  task.Abort("cancelled by user");
  run.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  EXPECT_TRUE(ResourcesReturnTo(threads, fds, absl::Seconds(2)))
      << "threads " << CountProcEntries("task") << " (were " << threads
      << "), descriptors " << CountProcEntries("fd") << " (were " << fds
      << ")";
}

// The harder case: the peer published its address and went away (its own
// task aborted), so this rank is inside Gloo's TCP connect, not waiting for
// a key, when it is cancelled.
TEST(GlooCommunicatorTest, CancelledConnectToAPeerThatLeftFreesEverything) {
  InMemoryKvStore kv;
  GlooOptions options = FastOptions();
  options.rendezvous_timeout = absl::Seconds(60);
  options.poll_interval = absl::Milliseconds(50);
  const int threads = CountProcEntries("task");
  const int fds = CountProcEntries("fd");
  {
    // Rank 1 publishes, then gives up before rank 0 comes.
    std::atomic<bool> cancelled{false};
    std::thread canceller([&] {
      // Rank 1 publishes its address as soon as it starts.
      absl::SleepFor(absl::Milliseconds(200));
      cancelled = true;
    });
    auto comm = GlooCommunicator::Create(kv, "job/left/gloo/", 1, 2, options,
                                         [&] { return cancelled.load(); });
    canceller.join();
    ASSERT_EQ(comm.status().code(), absl::StatusCode::kCancelled);
  }
  ASSERT_TRUE(ResourcesReturnTo(threads, fds, absl::Seconds(2)));
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancelled = true;
  });
  const absl::Time start = absl::Now();
  auto comm = GlooCommunicator::Create(kv, "job/left/gloo/", 0, 2, options,
                                       [&] { return cancelled.load(); });
  canceller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(comm.ok());
  EXPECT_TRUE(ResourcesReturnTo(threads, fds, absl::Seconds(3)))
      << "threads " << CountProcEntries("task") << " (were " << threads
      << "), descriptors " << CountProcEntries("fd") << " (were " << fds
      << ")";
}

TEST(GlooCommunicatorTest, AbortWakesAPendingReceive) {
  InMemoryKvStore kv;
  auto comms = ConnectAll(kv, 2, FastOptions());
  ASSERT_NE(comms[0], nullptr);
  std::vector<uint8_t> data(100);
  auto recv = comms[0]->StartRecv(absl::MakeSpan(data), 1, 3);
  ASSERT_TRUE(recv.ok());
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    comms[0]->Abort("job cancelled by test");
  });
  const absl::Time start = absl::Now();
  absl::Status status = (*recv)->Wait();
  aborter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_NE(status.message().find("job cancelled by test"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Later operations fail at once.
  EXPECT_EQ(comms[0]->Send(data, 1, 4).code(), absl::StatusCode::kCancelled);
}

TEST(GlooCommunicatorTest, PeerGoingAwayFailsPendingReceive) {
  InMemoryKvStore kv;
  GlooOptions options = FastOptions();
  options.peer_names = {"worker-a", "worker-b"};
  auto comms = ConnectAll(kv, 2, options);
  ASSERT_NE(comms[1], nullptr);
  std::vector<uint8_t> data(100);
  auto recv = comms[0]->StartRecv(absl::MakeSpan(data), 1, 3);
  ASSERT_TRUE(recv.ok());
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    comms[1]->Abort("peer dies");
    comms[1].reset();
  });
  const absl::Time start = absl::Now();
  absl::Status status = (*recv)->Wait();
  killer.join();
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << status;
  // The error names the peer's worker, not just its rank.
  EXPECT_THAT(status.message(), HasSubstr("receive from rank 1 (worker-b)"));
}

TEST(GlooCommunicatorTest, WaitIsBoundedByTheOperationTimeout) {
  InMemoryKvStore kv;
  GlooOptions options = FastOptions();
  options.op_timeout = absl::Milliseconds(200);
  auto comms = ConnectAll(kv, 2, options);
  ASSERT_NE(comms[0], nullptr);
  std::vector<uint8_t> data(100);
  const absl::Time start = absl::Now();
  absl::Status status = comms[0]->Recv(absl::MakeSpan(data), 1, 9);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Rank 1 runs in a separate process (gloo_peer_for_test) and both
// rendezvous through a controller's KvSet/KvGet.
TEST(GlooCommunicatorTest, TwoProcessesThroughTheControllerStore) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  const std::string binary = MESHCAST_GLOO_PEER_BINARY;
  std::vector<std::string> args = {binary, controller.address(),
                                   "job/procs/gloo/", "1", "2"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t child;
  ASSERT_EQ(posix_spawn(&child, binary.c_str(), nullptr, nullptr, argv.data(),
                        environ),
            0);

  ControllerKvStore kv(grpc::CreateChannel(controller.address(),
                                           grpc::InsecureChannelCredentials()));
  auto comm =
      GlooCommunicator::Create(kv, "job/procs/gloo/", 0, 2, FastOptions());
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<uint8_t> incoming(1 << 20);
  auto recv = (*comm)->StartRecv(absl::MakeSpan(incoming), 1, 5);
  ASSERT_TRUE(recv.ok());
  ASSERT_TRUE((*comm)->Send(Message(0, 1, 1 << 20), 1, 5).ok());
  ASSERT_TRUE((*recv)->Wait().ok());
  EXPECT_EQ(incoming, Message(1, 0, 1 << 20));

  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  EXPECT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
}


pid_t SpawnPeer(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t child = -1;
  if (posix_spawn(&child, args[0].c_str(), nullptr, nullptr, argv.data(),
                  environ) != 0) {
    return -1;
  }
  return child;
}

// Regression test: a worker whose peer was SIGKILLed mid-job died with it,
// silently, from SIGPIPE, when Gloo wrote to the reset connection. Here a
// thread keeps sending to a peer process while it is killed; the sends
// must fail and this process must live on. A few rounds, as the write that
// hits the reset connection races with Gloo noticing the closed socket.
TEST(GlooCommunicatorTest, SendingToAKilledPeerProcessFailsWithoutSigpipe) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ControllerKvStore kv(grpc::CreateChannel(controller.address(),
                                           grpc::InsecureChannelCredentials()));
  for (int round = 0; round < 3; ++round) {
    const std::string prefix = absl::StrCat("job/killed", round, "/gloo/");
    const pid_t child = SpawnPeer(
        {MESHCAST_GLOO_PEER_BINARY, controller.address(), prefix, "1", "2",
         "hang"});
    ASSERT_GT(child, 0);
    GlooOptions options = FastOptions();
    options.peer_names = {"this-worker", "killed-worker"};
    auto comm = GlooCommunicator::Create(kv, prefix, 0, 2, options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    // Gloo's sockets do not use MSG_NOSIGNAL: the process must ignore it.
    struct sigaction action;
    ASSERT_EQ(sigaction(SIGPIPE, nullptr, &action), 0);
    EXPECT_EQ(action.sa_handler, SIG_IGN);

    std::atomic<bool> killed{false};
    absl::Status last;
    std::thread sender([&] {
      const std::vector<uint8_t> data(64, 7);
      std::vector<std::unique_ptr<CommRequest>> sends;
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      for (uint64_t tag = 0; absl::Now() < deadline; ++tag) {
        auto send = (*comm)->StartSend(data, 1, tag);
        if (!send.ok()) {
          last = send.status();
          if (killed.load()) break;
          continue;
        }
        // The peer never receives: nothing completes; keep them posted.
        if (sends.size() < 100000) sends.push_back(*std::move(send));
      }
      (*comm)->Abort("test over");
    });
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int wait_status = 0;
    ASSERT_EQ(waitpid(child, &wait_status, 0), child);
    killed.store(true);
    sender.join();
    EXPECT_TRUE(WIFSIGNALED(wait_status));
    EXPECT_FALSE(last.ok()) << "sends to a killed peer kept succeeding";
    // A send refused when posted names the peer's worker too.
    EXPECT_THAT(last.message(), HasSubstr("send to rank 1 (killed-worker)"))
        << last;
  }
}

}  // namespace
}  // namespace meshcast::worker
