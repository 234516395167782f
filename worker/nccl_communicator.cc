#include "worker/nccl_communicator.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"
#include "worker/cuda/cuda_handles.h"

namespace meshcast::worker {
namespace {

using cuda::ScopedCudaDevice;

constexpr absl::Duration kKvPollSlice = absl::Milliseconds(200);

// Waits for `key` until `deadline`, re-checking `cancelled` every slice.
absl::StatusOr<std::string> GetUntil(KvStore& kv, const std::string& key,
                                     absl::Time deadline,
                                     const std::function<bool()>& cancelled,
                                     const std::string& who) {
  while (true) {
    if (cancelled && cancelled()) {
      return absl::CancelledError("NCCL rendezvous cancelled");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    absl::StatusOr<std::string> value =
        kv.Get(key, std::min(left, kKvPollSlice));
    if (value.ok()) return value;
    if (value.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return value.status();
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("NCCL rendezvous: no value for ", key, " in time (", who,
                   " has not joined the job)"));
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, const std::string& what,
                        ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": NCCL error ", static_cast<int>(result), " (",
                   ncclGetErrorString(result), ")");
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0')
      absl::StrAppend(&message, ": ", last);
  }
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string EncodeNcclWorkerInfo(const NcclWorkerSetup& setup) {
  std::vector<std::string> devices;
  for (const auto& [device, gpu] : setup.devices) {
    devices.push_back(absl::StrCat(device, ":", gpu));
  }
  return absl::StrCat("gpus=", setup.gpus.size(), ";chunk=", setup.chunk_bytes,
                      ";lanes=", setup.lanes,
                      ";devices=", absl::StrJoin(devices, ","));
}

absl::StatusOr<NcclWorkerInfo> DecodeNcclWorkerInfo(const std::string& text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed NCCL rendezvous entry '", text, "': ", why,
                     " (expected gpus=N;chunk=BYTES;lanes=L;devices=D:G,...)"));
  };
  std::vector<absl::string_view> fields = absl::StrSplit(text, ';');
  if (fields.size() != 4) return bad("4 fields");
  NcclWorkerInfo info;
  absl::string_view gpus = fields[0], chunk = fields[1], lanes = fields[2],
                    devices = fields[3];
  if (!absl::ConsumePrefix(&gpus, "gpus=") ||
      !absl::SimpleAtoi(gpus, &info.gpus) || info.gpus < 1) {
    return bad("gpus");
  }
  if (!absl::ConsumePrefix(&chunk, "chunk=") ||
      !absl::SimpleAtoi(chunk, &info.chunk_bytes) || info.chunk_bytes < 1) {
    return bad("chunk");
  }
  if (!absl::ConsumePrefix(&lanes, "lanes=") ||
      !absl::SimpleAtoi(lanes, &info.lanes) || info.lanes < 1) {
    return bad("lanes");
  }
  if (!absl::ConsumePrefix(&devices, "devices=")) return bad("devices");
  if (devices.empty()) return info;
  for (absl::string_view item : absl::StrSplit(devices, ',')) {
    std::vector<absl::string_view> pair = absl::StrSplit(item, ':');
    int device = 0, gpu = 0;
    if (pair.size() != 2 || !absl::SimpleAtoi(pair[0], &device) ||
        !absl::SimpleAtoi(pair[1], &gpu) || device < 0 || gpu < 0 ||
        gpu >= info.gpus) {
      return bad(absl::StrCat("device entry '", item, "'"));
    }
    info.devices.emplace_back(device, gpu);
  }
  return info;
}

std::string HexEncode(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

absl::StatusOr<std::string> HexDecode(const std::string& hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError("hex string has an odd length");
  }
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = digit(hex[2 * i]), low = digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a hex digit at offset ", 2 * i));
    }
    bytes[i] = static_cast<char>(high * 16 + low);
  }
  return bytes;
}

NcclCommunicator::NcclCommunicator(NcclOptions options,
                                   std::function<bool()> cancelled)
    : options_(options), cancelled_(std::move(cancelled)) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    KvStore& kv, const std::string& key_prefix, NcclWorkerSetup setup,
    const NcclOptions& options, std::function<bool()> cancelled) {
  if (setup.world_size < 1 || setup.worker_rank < 0 ||
      setup.worker_rank >= setup.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL setup: worker rank ", setup.worker_rank,
                     " is not in [0, world size ", setup.world_size, ")"));
  }
  if (setup.gpus.empty()) {
    return absl::InvalidArgumentError("NCCL setup: no local GPU");
  }
  if (absl::flat_hash_set<int>(setup.gpus.begin(), setup.gpus.end()).size() !=
      setup.gpus.size()) {
    return absl::InvalidArgumentError(
        "NCCL setup: a GPU is listed twice (NCCL allows one rank per GPU)");
  }
  if (options.lanes < 1) {
    return absl::InvalidArgumentError("NCCL options: lanes must be >= 1");
  }
  if (setup.chunk_bytes < 1) {
    return absl::InvalidArgumentError("NCCL setup: chunk_bytes must be >= 1");
  }
  setup.lanes = options.lanes;
  for (const auto& [device, gpu] : setup.devices) {
    if (gpu < 0 || gpu >= static_cast<int>(setup.gpus.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL setup: device ", device, " maps to GPU index ",
                       gpu, " of ", setup.gpus.size()));
    }
  }

  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(options, std::move(cancelled)));
  comm->gpus_ = setup.gpus;
  const absl::Time deadline = absl::Now() + options.init_timeout;

  // 1. Who holds which ranks.
  RETURN_IF_ERROR(kv.Set(absl::StrCat(key_prefix, "ranks/", setup.worker_rank),
                         EncodeNcclWorkerInfo(setup)));
  int offset = 0;
  for (int w = 0; w < setup.world_size; ++w) {
    NcclWorkerInfo info;
    if (w == setup.worker_rank) {
      info.gpus = static_cast<int>(setup.gpus.size());
      info.chunk_bytes = setup.chunk_bytes;
      info.lanes = setup.lanes;
      info.devices = setup.devices;
      comm->first_rank_ = offset;
    } else {
      ASSIGN_OR_RETURN(
          const std::string text,
          GetUntil(kv, absl::StrCat(key_prefix, "ranks/", w), deadline,
                   comm->cancelled_, absl::StrCat("worker rank ", w)));
      ASSIGN_OR_RETURN(info, DecodeNcclWorkerInfo(text));
      if (info.chunk_bytes != setup.chunk_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "worker rank ", w, " relays in chunks of ", info.chunk_bytes,
            " bytes but this worker uses ", setup.chunk_bytes,
            "; every worker of a job must use the same --gpu-chunk-bytes"));
      }
      if (info.lanes != setup.lanes) {
        // Each rank creates lanes - 1 splits (collective) and puts step s on
        // lane s % lanes: a mismatch would hang the splits or pair sends
        // and receives of different steps.
        return absl::InvalidArgumentError(absl::StrCat(
            "worker rank ", w, " uses ", info.lanes,
            " NCCL lanes but this worker uses ", setup.lanes,
            "; every worker of a job must use the same --gpu-lanes"));
      }
    }
    for (const auto& [device, gpu] : info.devices) {
      if (!comm->device_rank_.emplace(device, offset + gpu).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NCCL rendezvous: device ", device, " claimed by two workers"));
      }
    }
    offset += info.gpus;
  }
  comm->nranks_ = offset;

  // 2. The unique id, from worker 0.
  ncclUniqueId id;
  const std::string id_key = absl::StrCat(key_prefix, "unique_id");
  if (setup.worker_rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    RETURN_IF_ERROR(kv.Set(
        id_key, HexEncode(std::string(id.internal, sizeof(id.internal)))));
  } else {
    ASSIGN_OR_RETURN(
        const std::string hex,
        GetUntil(kv, id_key, deadline, comm->cancelled_, "worker rank 0"));
    ASSIGN_OR_RETURN(const std::string bytes, HexDecode(hex));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::InvalidArgumentError(
          absl::StrCat(id_key, " holds ", bytes.size(), " bytes, expected ",
                       sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }

  // 3. The world communicators (lane 0), then the lanes as splits of it.
  // ncclCommInitRankConfig sets its output before it returns; a
  // non-blocking ncclCommSplit only when the split has finished, from
  // NCCL's thread, so a split's output is the lane's `split_slots`.
  const size_t local_gpus = setup.gpus.size();
  for (int lane = 0; lane < options.lanes; ++lane) {
    auto state = std::make_unique<Lane>();
    absl::MutexLock lock(&state->mu);
    state->comms.assign(local_gpus, nullptr);
    if (lane > 0) {
      state->split_slots = std::make_unique<ncclComm_t[]>(local_gpus);
      state->split_waiting.assign(local_gpus, false);
    }
    comm->lanes_.push_back(std::move(state));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  for (int lane = 0; lane < options.lanes; ++lane) {
    Lane& state = *comm->lanes_[lane];
    std::vector<ncclComm_t> world(local_gpus, nullptr);
    std::vector<ncclComm_t> created(local_gpus, nullptr);
    if (lane > 0) {
      absl::MutexLock lock(&comm->lanes_[0]->mu);
      world = comm->lanes_[0]->comms;
    }
    absl::Status status =
        NcclStatus(ncclGroupStart(), "ncclGroupStart (communicator init)");
    if (status.ok()) {
      for (size_t i = 0; i < local_gpus && status.ok(); ++i) {
        ScopedCudaDevice on(setup.gpus[i]);
        status = on.status();
        if (!status.ok()) break;
        const int rank = comm->first_rank_ + static_cast<int>(i);
        ncclResult_t result;
        if (lane == 0) {
          result = ncclCommInitRankConfig(&created[i], comm->nranks_, id, rank,
                                          &config);
        } else {
          result = ncclCommSplit(world[i], /*color=*/0, /*key=*/rank,
                                 &state.split_slots[i], &config);
          if (result == ncclInProgress || result == ncclSuccess) {
            absl::MutexLock lock(&state.mu);
            state.split_waiting[i] = true;
          }
        }
        if (result != ncclInProgress) {
          status = NcclStatus(
              result, lane == 0 ? "ncclCommInitRankConfig" : "ncclCommSplit");
        }
      }
      const ncclResult_t end = ncclGroupEnd();
      if (status.ok() && end != ncclInProgress) {
        status = NcclStatus(end, "ncclGroupEnd (communicator init)");
      }
    }
    if (lane == 0) {
      absl::MutexLock lock(&state.mu);
      state.comms = created;
    }
    if (status.ok()) {
      const std::string what = absl::StrCat(
          lane == 0 ? "creating" : "splitting", " the NCCL communicators (",
          comm->nranks_, " ranks, this worker ", comm->first_rank_, "..",
          comm->first_rank_ + local_gpus - 1, ", lane ", lane, ")");
      const absl::Duration left =
          std::max(absl::ZeroDuration(), deadline - absl::Now());
      status = lane == 0 ? comm->WaitAccepted(lane, left, what)
                         : comm->WaitSplit(lane, left, what);
    }
    if (!status.ok()) {
      comm->Abort(std::string(status.message()));
      return status;
    }
  }
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  Abort("the NCCL communicator was destroyed without Finalize");
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    // NCCL may still write a split's slot after we give up on it: keep
    // that memory alive rather than let a late write corrupt the heap.
    if (SplitWaiting(*lane)) (void)lane->split_slots.release();
  }
}

absl::Status NcclCommunicator::AbortedStatus() const {
  absl::MutexLock lock(&abort_mu_);
  return absl::CancelledError(abort_reason_);
}

absl::Status NcclCommunicator::PollUntilDone(
    absl::Duration timeout, const std::string& what,
    absl::FunctionRef<absl::StatusOr<bool>()> done) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    ASSIGN_OR_RETURN(const bool finished, done());
    if (finished) return absl::OkStatus();
    if (cancelled_ && cancelled_()) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, " did not finish within ", absl::FormatDuration(timeout),
          " (a peer worker is missing, slow or dead)"));
    }
    absl::SleepFor(options_.poll_interval);
  }
}

absl::Status NcclCommunicator::WaitAccepted(int lane, absl::Duration timeout,
                                            const std::string& what) {
  Lane& state = *lanes_[lane];
  return PollUntilDone(timeout, what, [&]() -> absl::StatusOr<bool> {
    absl::MutexLock lock(&state.mu);
    if (aborted_.load()) return AbortedStatus();
    bool pending = false;
    for (ncclComm_t comm : state.comms) {
      if (comm == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &async),
                                 "ncclCommGetAsyncError", comm));
      if (async == ncclInProgress) {
        pending = true;
      } else if (async != ncclSuccess) {
        return NcclStatus(async, what, comm);
      }
    }
    return !pending;
  });
}

absl::Status NcclCommunicator::WaitSplit(int lane, absl::Duration timeout,
                                         const std::string& what) {
  Lane& world = *lanes_[0];
  Lane& state = *lanes_[lane];
  return PollUntilDone(timeout, what, [&]() -> absl::StatusOr<bool> {
    absl::MutexLock world_lock(&world.mu);
    absl::MutexLock lock(&state.mu);
    if (aborted_.load()) return AbortedStatus();
    bool pending = false;
    for (size_t i = 0; i < state.comms.size(); ++i) {
      ncclComm_t child =
          __atomic_load_n(&state.split_slots[i], __ATOMIC_ACQUIRE);
      // Until NCCL writes the slot, the split's progress and errors show
      // on the communicator it splits.
      ncclComm_t polled = child != nullptr ? child : world.comms[i];
      if (polled == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(polled, &async),
                                 "ncclCommGetAsyncError", polled));
      if (async != ncclSuccess && async != ncclInProgress) {
        return NcclStatus(async, what, polled);
      }
      if (child == nullptr || async == ncclInProgress) pending = true;
    }
    if (pending) return false;
    for (size_t i = 0; i < state.comms.size(); ++i) {
      state.comms[i] = __atomic_load_n(&state.split_slots[i], __ATOMIC_ACQUIRE);
      state.split_waiting[i] = false;
    }
    return true;
  });
}

absl::StatusOr<int> NcclCommunicator::GpuIndex(int gpu) const {
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (gpus_[i] == gpu) return static_cast<int>(i);
  }
  return absl::NotFoundError(
      absl::StrCat("GPU ", gpu, " has no NCCL rank in this job"));
}

absl::StatusOr<int> NcclCommunicator::RankOfDevice(int device) const {
  auto it = device_rank_.find(device);
  if (it == device_rank_.end()) {
    return absl::NotFoundError(
        absl::StrCat("device ", device, " has no NCCL rank in this job"));
  }
  return it->second;
}

absl::StatusOr<int> NcclCommunicator::RankOfLocalGpu(int gpu) const {
  ASSIGN_OR_RETURN(const int index, GpuIndex(gpu));
  return first_rank_ + index;
}

absl::Status NcclCommunicator::GroupStart(int lane)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (lane < 0 || lane >= lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("no NCCL lane ", lane));
  }
  Lane& state = *lanes_[lane];
  // Held until GroupEnd, so Abort cannot free a communicator that has
  // operations queued in this thread's group.
  state.mu.Lock();
  if (state.in_group) {
    state.mu.Unlock();
    return absl::FailedPreconditionError("nested NCCL group on one lane");
  }
  issue_mu_.Lock();  // held until ncclGroupEnd returns
  const absl::Status status = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  if (!status.ok()) {
    issue_mu_.Unlock();
    state.mu.Unlock();
    return status;
  }
  state.in_group = true;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::GroupEnd(int lane)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (lane < 0 || lane >= lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("no NCCL lane ", lane));
  }
  Lane& state = *lanes_[lane];
  if (!state.in_group) {
    return absl::FailedPreconditionError("GroupEnd without GroupStart");
  }
  const ncclResult_t result = ncclGroupEnd();
  issue_mu_.Unlock();
  state.in_group = false;
  state.mu.Unlock();
  if (result != ncclInProgress) {
    RETURN_IF_ERROR(NcclStatus(result, "ncclGroupEnd"));
  }
  if (aborted_.load()) return AbortedStatus();
  return WaitAccepted(lane, options_.op_timeout, "NCCL send/recv group");
}

absl::Status NcclCommunicator::Send(
    int lane, int gpu, const void* data, size_t bytes, int peer_rank,
    cudaStream_t stream) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The caller holds the lane's mutex since GroupStart.
  if (lane < 0 || lane >= lanes() || !lanes_[lane]->in_group) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL send/recv on lane ", lane, " outside a group"));
  }
  if (aborted_.load()) return AbortedStatus();
  ASSIGN_OR_RETURN(const int index, GpuIndex(gpu));
  ncclComm_t comm = lanes_[lane]->comms[index];
  if (comm == nullptr) return absl::FailedPreconditionError("no communicator");
  const ncclResult_t result =
      ncclSend(data, bytes, ncclUint8, peer_rank, comm, stream);
  if (result == ncclInProgress) return absl::OkStatus();
  return NcclStatus(
      result, absl::StrCat("ncclSend of ", bytes, " bytes to rank ", peer_rank),
      comm);
}

absl::Status NcclCommunicator::Recv(int lane, int gpu, void* data, size_t bytes,
                                    int peer_rank, cudaStream_t stream)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (lane < 0 || lane >= lanes() || !lanes_[lane]->in_group) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL send/recv on lane ", lane, " outside a group"));
  }
  if (aborted_.load()) return AbortedStatus();
  ASSIGN_OR_RETURN(const int index, GpuIndex(gpu));
  ncclComm_t comm = lanes_[lane]->comms[index];
  if (comm == nullptr) return absl::FailedPreconditionError("no communicator");
  const ncclResult_t result =
      ncclRecv(data, bytes, ncclUint8, peer_rank, comm, stream);
  if (result == ncclInProgress) return absl::OkStatus();
  return NcclStatus(
      result,
      absl::StrCat("ncclRecv of ", bytes, " bytes from rank ", peer_rank),
      comm);
}

absl::Status NcclCommunicator::CheckAsyncErrors() {
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    if (aborted_.load()) return AbortedStatus();
    for (ncclComm_t comm : lane->comms) {
      if (comm == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &async),
                                 "ncclCommGetAsyncError", comm));
      if (async != ncclSuccess && async != ncclInProgress) {
        return NcclStatus(async, "NCCL communicator failed", comm);
      }
    }
  }
  return absl::OkStatus();
}

void NcclCommunicator::Abort(const std::string& reason) {
  {
    absl::MutexLock lock(&abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true);
  }
  // Splits before the world communicators they came from. A split still
  // in flight has no communicator yet: aborting its world communicator
  // ends it, and NCCL then writes the slot, so the slots are polled for a
  // while after and what appears is aborted too.
  for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) {
    absl::MutexLock lock(&(*it)->mu);
    (void)AbortLane(**it);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  for (auto& lane : lanes_) {
    while (true) {
      {
        absl::MutexLock lock(&lane->mu);
        if (AbortLane(*lane)) break;
      }
      if (absl::Now() >= give_up) break;  // the destructor leaks the slots
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

bool NcclCommunicator::SplitWaiting(const Lane& lane) {
  for (bool waiting : lane.split_waiting) {
    if (waiting) return true;
  }
  return false;
}

bool NcclCommunicator::AbortLane(Lane& lane) {
  for (ncclComm_t& comm : lane.comms) {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
  for (size_t i = 0; i < lane.split_waiting.size(); ++i) {
    if (!lane.split_waiting[i]) continue;
    ncclComm_t child = __atomic_load_n(&lane.split_slots[i], __ATOMIC_ACQUIRE);
    if (child == nullptr) continue;  // NCCL has not written it yet
    ncclCommAbort(child);
    lane.split_waiting[i] = false;
  }
  return !SplitWaiting(lane);
}

absl::Status NcclCommunicator::Finalize() {
  if (aborted_.load()) return AbortedStatus();
  absl::Status status;
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    for (ncclComm_t comm : lane->comms) {
      if (comm == nullptr || !status.ok()) continue;
      const ncclResult_t result = ncclCommFinalize(comm);
      if (result != ncclInProgress) {
        status = NcclStatus(result, "ncclCommFinalize", comm);
      }
    }
  }
  for (int lane = 0; lane < lanes() && status.ok(); ++lane) {
    status = WaitAccepted(lane, options_.op_timeout,
                          "finalizing the NCCL communicators");
  }
  if (!status.ok()) {
    Abort(std::string(status.message()));
    return status;
  }
  for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) {
    absl::MutexLock lock(&(*it)->mu);
    for (ncclComm_t& comm : (*it)->comms) {
      if (comm != nullptr) ncclCommDestroy(comm);
      comm = nullptr;
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast::worker
