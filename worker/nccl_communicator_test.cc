// NcclCommunicator: the KV encodings, error mapping and rendezvous failures
// (no GPU needed), and communicator creation, a dead peer and a two-rank
// exchange on GPUs (skipped where there are too few).
#include "worker/nccl_communicator.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_pattern.h"
#include "worker/in_memory_kv_store.h"

namespace meshcast::worker {
namespace {

NcclWorkerSetup WorkerSetup(int rank, int world, std::vector<int> gpus,
                            std::vector<std::pair<int, int>> devices) {
  NcclWorkerSetup setup;
  setup.worker_rank = rank;
  setup.world_size = world;
  setup.gpus = std::move(gpus);
  setup.devices = std::move(devices);
  setup.chunk_bytes = 4096;
  return setup;
}

NcclOptions ShortTimeouts() {
  NcclOptions options;
  options.init_timeout = absl::Milliseconds(600);
  options.op_timeout = absl::Seconds(20);
  options.lanes = 2;
  return options;
}

// For communicators that must come up: a process's first NCCL
// initialization on a real GPU (CUDA context, topology detection) outlasts
// the short timeouts' 600 ms (it did on an H200).
NcclOptions GpuTimeouts() {
  NcclOptions options = ShortTimeouts();
  options.init_timeout = absl::Seconds(60);
  return options;
}

TEST(NcclEncodingTest, WorkerInfoRoundTrips) {
  NcclWorkerSetup setup = WorkerSetup(1, 2, {0, 3}, {{4, 0}, {5, 0}, {6, 1}});
  setup.lanes = 3;
  const std::string text = EncodeNcclWorkerInfo(setup);
  EXPECT_EQ(text, "gpus=2;chunk=4096;lanes=3;devices=4:0,5:0,6:1");
  auto info = DecodeNcclWorkerInfo(text);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->gpus, 2);
  EXPECT_EQ(info->chunk_bytes, 4096);
  EXPECT_EQ(info->lanes, 3);
  EXPECT_EQ(info->devices, setup.devices);
  for (const char* bad :
       {"", "gpus=0;chunk=1;lanes=1;devices=", "gpus=1;chunk=1;lanes=1",
        "gpus=1;chunk=1;devices=", "gpus=1;chunk=x;lanes=1;devices=",
        "gpus=1;chunk=1;lanes=0;devices=", "gpus=1;chunk=1;lanes=y;devices=",
        "gpus=1;chunk=1;lanes=1;devices=3:1",
        "gpus=1;chunk=1;lanes=1;devices=3"}) {
    EXPECT_EQ(DecodeNcclWorkerInfo(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(NcclEncodingTest, HexRoundTripsBinaryIds) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  const std::string hex = HexEncode(bytes);
  EXPECT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 6), "000102");
  EXPECT_EQ(*HexDecode(hex), bytes);
  EXPECT_FALSE(HexDecode("abc").ok());
  EXPECT_FALSE(HexDecode("zz").ok());
}

TEST(NcclStatusTest, MapsResultCodes) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x").ok());
  const absl::Status usage = NcclStatus(ncclInvalidUsage, "ncclSend");
  EXPECT_EQ(usage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(usage.message().find("ncclSend"), std::string::npos);
  EXPECT_NE(usage.message().find(ncclGetErrorString(ncclInvalidUsage)),
            std::string::npos);
  EXPECT_EQ(NcclStatus(ncclRemoteError, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclInternalError, "x").code(),
            absl::StatusCode::kInternal);
}

// Everything below until the GPU fixture fails in the KV phase, before any
// CUDA or NCCL call, so it runs without a GPU.
TEST(NcclRendezvousTest, RejectsBadSetups) {
  InMemoryKvStore kv;
  EXPECT_EQ(NcclCommunicator::Create(kv, "p/", WorkerSetup(2, 2, {0}, {}),
                                     ShortTimeouts())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(kv, "p/", WorkerSetup(0, 1, {}, {}),
                                     ShortTimeouts())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(kv, "p/", WorkerSetup(0, 1, {0, 0}, {}),
                                     ShortTimeouts())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(kv, "p/", WorkerSetup(0, 1, {0}, {{3, 1}}),
                                     ShortTimeouts())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclRendezvousTest, MissingPeerTimesOutNamingItsKey) {
  InMemoryKvStore kv;
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(
      kv, "job/j/nccl/", WorkerSetup(0, 2, {0}, {{0, 0}}), ShortTimeouts());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("job/j/nccl/ranks/1"),
            std::string::npos);
  // It published its own entry for the peers.
  auto own = kv.Get("job/j/nccl/ranks/0", absl::ZeroDuration());
  ASSERT_TRUE(own.ok());
  // Lanes come from the options (ShortTimeouts: 2).
  EXPECT_EQ(*own, "gpus=1;chunk=4096;lanes=2;devices=0:0");
}

TEST(NcclRendezvousTest, CancelledWhileWaitingForPeers) {
  InMemoryKvStore kv;
  NcclOptions options = ShortTimeouts();
  options.init_timeout = absl::Seconds(30);
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cancelled = true;
  });
  const absl::Time start = absl::Now();
  auto comm =
      NcclCommunicator::Create(kv, "p/", WorkerSetup(1, 2, {0}, {}), options,
                               [&] { return cancelled.load(); });
  canceller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kCancelled);
}

TEST(NcclRendezvousTest, RefusesAPeerWithAnotherChunkSize) {
  InMemoryKvStore kv;
  ASSERT_TRUE(
      kv.Set("p/ranks/1", "gpus=1;chunk=999;lanes=2;devices=1:0").ok());
  auto comm = NcclCommunicator::Create(
      kv, "p/", WorkerSetup(0, 2, {0}, {{0, 0}}), ShortTimeouts());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("--gpu-chunk-bytes"),
            std::string::npos);
}

// Lanes are communicator splits (collective) and pick each step's lane, so
// a worker with another --gpu-lanes would hang the splits or mismatch
// transfers; the rendezvous refuses it before any NCCL call.
TEST(NcclRendezvousTest, RefusesAPeerWithAnotherLaneCount) {
  InMemoryKvStore kv;
  ASSERT_TRUE(
      kv.Set("p/ranks/1", "gpus=1;chunk=4096;lanes=4;devices=1:0").ok());
  auto comm = NcclCommunicator::Create(
      kv, "p/", WorkerSetup(0, 2, {0}, {{0, 0}}), ShortTimeouts());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("--gpu-lanes"), std::string::npos)
      << comm.status();
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::GpuCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount reports none); "
                      "NCCL communicators not tested";
    }
  }
};

TEST_F(NcclGpuTest, SingleRankWorldCreatesLanesAndFinalizes) {
  InMemoryKvStore kv;
  auto comm = NcclCommunicator::Create(
      kv, "one/", WorkerSetup(0, 1, {0}, {{7, 0}}), GpuTimeouts());
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->nranks(), 1);
  EXPECT_EQ((*comm)->lanes(), 2);
  EXPECT_EQ(*(*comm)->RankOfDevice(7), 0);
  EXPECT_EQ((*comm)->RankOfDevice(8).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE((*comm)->CheckAsyncErrors().ok());
  EXPECT_TRUE(kv.Get("one/unique_id", absl::ZeroDuration()).ok());
  EXPECT_TRUE((*comm)->Finalize().ok());
}

// The peer publishes its entry but never initializes NCCL: the
// non-blocking init is abandoned at the timeout and aborted, never hung.
TEST_F(NcclGpuTest, DeadPeerCannotHangCommunicatorCreation) {
  InMemoryKvStore kv;
  ASSERT_TRUE(
      kv.Set("dead/ranks/1", "gpus=1;chunk=4096;lanes=2;devices=1:0").ok());
  NcclOptions options = ShortTimeouts();
  options.init_timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(
      kv, "dead/", WorkerSetup(0, 2, {0}, {{0, 0}}), options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
}

// Two workers in threads, one GPU each, exchange a buffer both ways in one
// group per side.
TEST_F(NcclGpuTest, TwoRanksExchangeInOneProcess) {
  if (cuda::GpuCount() < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL allows one rank per GPU); "
                 << cuda::GpuCount() << " visible";
  }
  constexpr size_t kBytes = 3 << 20;
  InMemoryKvStore kv;
  absl::Status statuses[2];
  std::vector<uint8_t> received[2];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto run = [&]() -> absl::Status {
        auto comm = NcclCommunicator::Create(
            kv, "pair/", WorkerSetup(w, 2, {w}, {{w, 0}}), GpuTimeouts());
        if (!comm.ok()) return comm.status();
        cuda::ScopedCudaDevice on(w);
        auto stream = cuda::CudaStream::Create(w);
        auto out = cuda::DeviceMemory::Allocate(w, kBytes);
        auto in = cuda::DeviceMemory::Allocate(w, kBytes);
        if (!stream.ok() || !out.ok() || !in.ok()) {
          return absl::InternalError("CUDA set-up failed");
        }
        cudaMemset(out->data(), 0x10 + w, kBytes);
        cudaMemset(in->data(), 0, kBytes);
        cudaDeviceSynchronize();
        const int peer = *(*comm)->RankOfDevice(1 - w);
        absl::Status status = (*comm)->GroupStart(1);
        if (!status.ok()) return status;
        absl::Status sent =
            (*comm)->Send(1, w, out->data(), kBytes, peer, stream->get());
        absl::Status got =
            (*comm)->Recv(1, w, in->data(), kBytes, peer, stream->get());
        status = (*comm)->GroupEnd(1);
        if (!sent.ok()) return sent;
        if (!got.ok()) return got;
        if (!status.ok()) return status;
        if (cudaStreamSynchronize(stream->get()) != cudaSuccess) {
          return absl::InternalError("stream failed");
        }
        received[w].resize(kBytes);
        cudaMemcpy(received[w].data(), in->data(), kBytes,
                   cudaMemcpyDeviceToHost);
        return (*comm)->Finalize();
      };
      statuses[w] = run();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(statuses[w].ok()) << "worker " << w << ": " << statuses[w];
    ASSERT_EQ(received[w].size(), kBytes);
    EXPECT_EQ(received[w].front(), 0x10 + (1 - w));
    EXPECT_EQ(received[w].back(), 0x10 + (1 - w));
  }
}

}  // namespace
}  // namespace meshcast::worker
