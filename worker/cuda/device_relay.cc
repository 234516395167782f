#include "worker/cuda/device_relay.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"

namespace meshcast::worker::cuda {
namespace {

// Chunks in flight per run: chunk g arrives while chunk g - 1 is forwarded.
constexpr int kSlots = 2;

// A maximal stretch of chain positions on one NCCL rank.
struct Run {
  int first = 0;  // chain positions [first, last]
  int last = 0;
  int rank = -1;  // NCCL rank
  bool local = false;
  int gpu = -1;  // local runs: CUDA ordinal
  cudaStream_t stream = nullptr;
  // Staging chunks (stream-ordered allocations), used when a chunk is not
  // one contiguous segment of the run's first tile.
  void* slots[kSlots] = {};
};

class StepEnqueuer {
 public:
  StepEnqueuer(const StepDesc& step, const DeviceRelayEnvironment& env,
               const DeviceLane& lane)
      : step_(step), env_(env), lane_(lane) {}

  ~StepEnqueuer() {
    // Stream-ordered frees: safe on every path, the memory returns to the
    // pool once the stream has passed its last use.
    for (Run& run : runs_) {
      for (void*& slot : run.slots) {
        if (slot == nullptr) continue;
        ScopedCudaDevice on(run.gpu);
        cudaFreeAsync(slot, run.stream);
        slot = nullptr;
      }
    }
  }

  absl::Status Enqueue(absl::Span<const cudaEvent_t> waits,
                       const StepEvents& events) {
    const ParsedProgram& program = *env_.program;
    events_ = &events;
    const cudaEvent_t start = events.start;
    const cudaEvent_t done = events.done;
    const int length = static_cast<int>(step_.chain.size());
    element_size_ = DTypeSize(program.tensors[step_.tensor].dtype);
    elements_ = NumElements(step_.slice);
    tiles_.assign(length, nullptr);
    bool all_local = true;
    for (int p = 0; p < length; ++p) {
      const int device = step_.chain[p];
      if (!program.IsLocal(device)) {
        all_local = false;
        continue;
      }
      if (p == 0) {
        ASSIGN_OR_RETURN(
            const DeviceTile* sender,
            env_.buffers->SenderTile(device, step_.tensor, step_.slice));
        tiles_[0] = const_cast<DeviceTile*>(sender);  // read only
      } else {
        ASSIGN_OR_RETURN(tiles_[p], env_.buffers->ReceiverTile(
                                        device, step_.tensor, step_.slice));
      }
    }
    ASSIGN_OR_RETURN(primary_gpu_, PrimaryGpu(step_, env_));
    ASSIGN_OR_RETURN(primary_, StreamOf(primary_gpu_));

    if (all_local) {
      RETURN_IF_ERROR(Begin({primary_gpu_}, waits, start));
      if (elements_ > 0) {
        RETURN_IF_ERROR(CopyAlongChain());
      } else {
        for (int p = 1; p < length; ++p) {
          RETURN_IF_ERROR(RecordHop(p, primary_, primary_gpu_));
        }
      }
      return End(done);
    }
    if (env_.nccl == nullptr) {
      return absl::FailedPreconditionError(
          "the chain crosses workers but this job has no NCCL communicator");
    }
    RETURN_IF_ERROR(BuildRuns());
    std::vector<int> gpus;
    for (const Run& run : runs_) {
      if (run.local &&
          std::find(gpus.begin(), gpus.end(), run.gpu) == gpus.end()) {
        gpus.push_back(run.gpu);
      }
    }
    RETURN_IF_ERROR(Begin(gpus, waits, start));
    if (elements_ > 0) {
      RETURN_IF_ERROR(Pipeline());
    } else {
      for (const Run& run : runs_) {
        if (!run.local) continue;
        for (int p = std::max(run.first, 1); p <= run.last; ++p) {
          RETURN_IF_ERROR(RecordHop(p, run.stream, run.gpu));
        }
      }
    }
    return End(done);
  }

 private:
  absl::StatusOr<cudaStream_t> StreamOf(int gpu) const {
    auto it = lane_.streams.find(gpu);
    if (it == lane_.streams.end()) {
      return absl::InternalError(
          absl::StrCat("lane ", lane_.index, " has no stream on GPU ", gpu));
    }
    return it->second;
  }

  // Makes every used stream wait for the deps, and records `start`.
  absl::Status Begin(const std::vector<int>& gpus,
                     absl::Span<const cudaEvent_t> waits, cudaEvent_t start) {
    used_gpus_ = gpus;
    for (int gpu : gpus) {
      ASSIGN_OR_RETURN(cudaStream_t stream, StreamOf(gpu));
      ScopedCudaDevice on(gpu);
      RETURN_IF_ERROR(on.status());
      for (cudaEvent_t event : waits) {
        RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, event, 0),
                                   "waiting for a dependency"));
      }
      // The reference for hop events on this GPU (see StepEvents).
      auto own_start = events_->gpu_start.find(gpu);
      if (gpu != primary_gpu_ && own_start != events_->gpu_start.end() &&
          own_start->second != nullptr) {
        RETURN_IF_ERROR(CudaStatus(cudaEventRecord(own_start->second, stream),
                                   "recording the step start on a GPU"));
      }
    }
    ScopedCudaDevice on(primary_gpu_);
    RETURN_IF_ERROR(on.status());
    return CudaStatus(cudaEventRecord(start, primary_),
                      "recording the step start");
  }

  // Joins every other used stream into the primary one and records `done`.
  absl::Status End(cudaEvent_t done) {
    for (int gpu : used_gpus_) {
      if (gpu == primary_gpu_) continue;
      ASSIGN_OR_RETURN(cudaStream_t stream, StreamOf(gpu));
      ScopedCudaDevice on(gpu);
      RETURN_IF_ERROR(on.status());
      cudaEvent_t joined = nullptr;
      RETURN_IF_ERROR(
          CudaStatus(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming),
                     "creating a join event"));
      absl::Status status =
          CudaStatus(cudaEventRecord(joined, stream), "recording a join");
      if (status.ok()) {
        status = CudaStatus(cudaStreamWaitEvent(primary_, joined, 0),
                            "joining streams");
      }
      cudaEventDestroy(joined);  // released once it has completed
      RETURN_IF_ERROR(status);
    }
    ScopedCudaDevice on(primary_gpu_);
    RETURN_IF_ERROR(on.status());
    return CudaStatus(cudaEventRecord(done, primary_),
                      "recording the step end");
  }

  // Records the hop event of chain position p, if one was asked for, on
  // `stream` (of `gpu`, where HopEventGpus put it).
  absl::Status RecordHop(int p, cudaStream_t stream, int gpu) {
    if (p >= static_cast<int>(events_->hop.size()) ||
        events_->hop[p] == nullptr) {
      return absl::OkStatus();
    }
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    return CudaStatus(cudaEventRecord(events_->hop[p], stream),
                      absl::StrCat("recording the hop into position ", p));
  }

  // Every hop is a tile-to-tile copy from the previous position.
  absl::Status CopyAlongChain() {
    const DeviceTile* previous = tiles_[0];
    for (size_t p = 1; p < step_.chain.size(); ++p) {
      DeviceTile* tile = tiles_[p];
      ASSIGN_OR_RETURN(const RegionCopy copy,
                       MakeTileCopy(step_.slice, tile->box(), previous->box(),
                                    element_size_));
      RETURN_IF_ERROR(EnqueueRegionCopy({tile->data(), tile->gpu()},
                                        {previous->data(), previous->gpu()},
                                        copy, primary_, primary_gpu_));
      RETURN_IF_ERROR(RecordHop(static_cast<int>(p), primary_, primary_gpu_));
      previous = tile;
    }
    return absl::OkStatus();
  }

  absl::Status BuildRuns() {
    const ParsedProgram& program = *env_.program;
    for (int p = 0; p < static_cast<int>(step_.chain.size()); ++p) {
      ASSIGN_OR_RETURN(const int rank, env_.nccl->RankOfDevice(step_.chain[p]));
      if (!runs_.empty() && runs_.back().rank == rank) {
        runs_.back().last = p;
        continue;
      }
      Run run;
      run.first = run.last = p;
      run.rank = rank;
      run.local = program.IsLocal(step_.chain[p]);
      if (run.local) {
        run.gpu = env_.buffers->GpuOf(step_.chain[p]);
        ASSIGN_OR_RETURN(run.stream, StreamOf(run.gpu));
      }
      runs_.push_back(run);
    }
    return absl::OkStatus();
  }

  int64_t ChunkBegin(int64_t g) const { return g * chunk_elements_; }
  int64_t ChunkEnd(int64_t g) const {
    return std::min(elements_, (g + 1) * chunk_elements_);
  }
  size_t ChunkBytes(int64_t g) const {
    return static_cast<size_t>(ChunkEnd(g) - ChunkBegin(g)) * element_size_;
  }

  // Where chunk g of run j lives on its GPU: inside the run's first tile
  // when it is one contiguous segment there (NCCL then reads or writes the
  // tile itself), else in a staging slot.
  struct ChunkHome {
    uint8_t* data = nullptr;
    bool in_tile = false;
  };
  absl::StatusOr<ChunkHome> HomeOf(int j, int64_t g) {
    Run& run = runs_[j];
    const DeviceTile* tile = tiles_[run.first];
    ASSIGN_OR_RETURN(
        const RegionCopy copy,
        j == 0 ? MakePackCopy(step_.slice, tile->box(), ChunkBegin(g),
                              ChunkEnd(g), element_size_)
               : MakeUnpackCopy(step_.slice, tile->box(), ChunkBegin(g),
                                ChunkEnd(g), element_size_));
    if (IsSingleSegment(copy)) {
      int64_t dst = 0, src = 0, length = 0;
      RowSegment(copy, FirstRow(copy), &dst, &src, &length);
      const int64_t in_tile = j == 0 ? src : dst;
      return ChunkHome{tile->data() + in_tile * element_size_, true};
    }
    void*& slot = run.slots[g % kSlots];
    if (slot == nullptr) {
      RETURN_IF_ERROR(ShareDefaultMemPoolWithPeers(run.gpu));
      ScopedCudaDevice on(run.gpu);
      RETURN_IF_ERROR(on.status());
      RETURN_IF_ERROR(CudaStatus(
          cudaMallocAsync(&slot, slot_bytes_, run.stream),
          absl::StrCat("allocating a ", slot_bytes_, "-byte chunk slot")));
    }
    return ChunkHome{static_cast<uint8_t*>(slot), false};
  }

  // Copies packed chunk g from `chunk` into the tiles of positions
  // [from, run.last]; after the last chunk, records each one's hop event.
  absl::Status UnpackInto(const Run& run, int from, int64_t g,
                          const uint8_t* chunk) {
    for (int p = from; p <= run.last; ++p) {
      DeviceTile* tile = tiles_[p];
      ASSIGN_OR_RETURN(const RegionCopy copy,
                       MakeUnpackCopy(step_.slice, tile->box(), ChunkBegin(g),
                                      ChunkEnd(g), element_size_));
      RETURN_IF_ERROR(EnqueueRegionCopy({tile->data(), run.gpu},
                                        {chunk, run.gpu}, copy, run.stream,
                                        run.gpu));
      if (g == chunks_ - 1) RETURN_IF_ERROR(RecordHop(p, run.stream, run.gpu));
    }
    return absl::OkStatus();
  }

  absl::Status Pipeline() {
    chunk_elements_ = std::max<int64_t>(1, env_.chunk_bytes / element_size_);
    chunks_ = (elements_ + chunk_elements_ - 1) / chunk_elements_;
    slot_bytes_ = static_cast<size_t>(std::min(chunk_elements_, elements_)) *
                  element_size_;
    const int runs = static_cast<int>(runs_.size());
    // Round in which run j handles its group g: g + offset(j).
    auto offset = [](int j) { return j == 0 ? 0 : j - 1; };
    auto has_next = [&](int j) { return j + 1 < runs; };
    int64_t rounds = 0;
    for (int j = 0; j < runs; ++j) {
      if (!runs_[j].local) continue;
      const int64_t groups = j == 0 ? chunks_ : chunks_ + (has_next(j) ? 1 : 0);
      rounds = std::max<int64_t>(rounds, offset(j) + groups);
    }
    const int lane = lane_.index;
    for (int64_t t = 0; t < rounds; ++t) {
      // Before the group: the sender packs chunk t if it must.
      std::vector<ChunkHome> incoming(runs), outgoing(runs);
      bool any = false;
      for (int j = 0; j < runs; ++j) {
        const Run& run = runs_[j];
        if (!run.local) continue;
        const int64_t g = t - offset(j);
        if (j == 0) {
          if (g < 0 || g >= chunks_) continue;
          ASSIGN_OR_RETURN(outgoing[j], HomeOf(0, g));
          if (!outgoing[j].in_tile) {
            ASSIGN_OR_RETURN(
                const RegionCopy pack,
                MakePackCopy(step_.slice, tiles_[0]->box(), ChunkBegin(g),
                             ChunkEnd(g), element_size_));
            RETURN_IF_ERROR(EnqueueRegionCopy({outgoing[j].data, run.gpu},
                                              {tiles_[0]->data(), run.gpu},
                                              pack, run.stream, run.gpu));
          }
          any = true;
        } else {
          if (g >= 0 && g < chunks_) {
            ASSIGN_OR_RETURN(incoming[j], HomeOf(j, g));
            any = true;
          }
          if (has_next(j) && g >= 1 && g <= chunks_) {
            ASSIGN_OR_RETURN(outgoing[j], HomeOf(j, g - 1));
            any = true;
          }
        }
      }
      if (!any) continue;
      // The group: every local run's receive and send of this round, in
      // chain order (the order every rank uses).
      RETURN_IF_ERROR(env_.nccl->GroupStart(lane));
      absl::Status status;
      for (int j = 0; j < runs && status.ok(); ++j) {
        const Run& run = runs_[j];
        if (!run.local) continue;
        const int64_t g = t - offset(j);
        if (j == 0) {
          if (g >= 0 && g < chunks_) {
            status = env_.nccl->Send(lane, run.gpu, outgoing[j].data,
                                     ChunkBytes(g), runs_[1].rank, run.stream);
          }
          continue;
        }
        if (g >= 0 && g < chunks_) {
          status =
              env_.nccl->Recv(lane, run.gpu, incoming[j].data, ChunkBytes(g),
                              runs_[j - 1].rank, run.stream);
        }
        if (status.ok() && has_next(j) && g >= 1 && g <= chunks_) {
          status =
              env_.nccl->Send(lane, run.gpu, outgoing[j].data,
                              ChunkBytes(g - 1), runs_[j + 1].rank, run.stream);
        }
      }
      // Always close the group, even after a failed call.
      const absl::Status ended = env_.nccl->GroupEnd(lane);
      RETURN_IF_ERROR(status);
      RETURN_IF_ERROR(ended);
      // After the group: local receivers take the chunk that arrived.
      for (int j = 0; j < runs; ++j) {
        const Run& run = runs_[j];
        if (!run.local) continue;
        const int64_t g = t - offset(j);
        if (g < 0 || g >= chunks_) continue;
        if (j == 0) {
          if (run.last >= 1) {
            RETURN_IF_ERROR(UnpackInto(run, 1, g, outgoing[j].data));
          }
        } else {
          if (incoming[j].in_tile && g == chunks_ - 1) {
            // NCCL wrote the last chunk into run.first's tile itself.
            RETURN_IF_ERROR(RecordHop(run.first, run.stream, run.gpu));
          }
          RETURN_IF_ERROR(
              UnpackInto(run, incoming[j].in_tile ? run.first + 1 : run.first,
                         g, incoming[j].data));
        }
      }
    }
    return absl::OkStatus();
  }

  const StepDesc& step_;
  const DeviceRelayEnvironment& env_;
  const DeviceLane& lane_;
  const StepEvents* events_ = nullptr;
  int element_size_ = 1;
  int64_t elements_ = 0;
  int64_t chunk_elements_ = 1;
  int64_t chunks_ = 0;
  size_t slot_bytes_ = 0;
  int primary_gpu_ = -1;
  cudaStream_t primary_ = nullptr;
  std::vector<int> used_gpus_;
  std::vector<DeviceTile*> tiles_;  // by chain position; null if remote
  std::vector<Run> runs_;
};

}  // namespace

absl::StatusOr<int> PrimaryGpu(const StepDesc& step,
                               const DeviceRelayEnvironment& env) {
  for (int device : step.chain) {
    if (env.program->IsLocal(device)) {
      const int gpu = env.buffers->GpuOf(device);
      if (gpu < 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("local device ", device, " has no GPU"));
      }
      return gpu;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("step ", step.id, " has no device on this worker"));
}

absl::StatusOr<std::vector<int>> HopEventGpus(
    const StepDesc& step, const ParsedProgram& program,
    const absl::flat_hash_map<int, int>& device_gpu) {
  const int length = static_cast<int>(step.chain.size());
  std::vector<int> gpus(length, -1);
  bool all_local = true;
  int primary = -1;
  for (int p = 0; p < length; ++p) {
    const int device = step.chain[p];
    if (!program.IsLocal(device)) {
      all_local = false;
      continue;
    }
    auto it = device_gpu.find(device);
    if (it == device_gpu.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("local device ", device, " has no GPU"));
    }
    if (primary < 0) primary = it->second;
    if (p > 0) gpus[p] = it->second;
  }
  if (all_local) {
    // CopyAlongChain issues every copy on the primary stream.
    for (int p = 1; p < length; ++p) gpus[p] = primary;
  }
  return gpus;
}

absl::Status EnqueueRelayStep(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events) {
  absl::Status status = StepEnqueuer(step, env, lane).Enqueue(waits, events);
  if (status.ok()) return status;
  return absl::Status(
      status.code(), absl::StrCat("step ", step.id, " (tensor ", step.tensor,
                                  " slice ", BoxToString(step.slice), " chain ",
                                  absl::StrJoin(step.chain, "->"),
                                  ", GPU): ", status.message()));
}

}  // namespace meshcast::worker::cuda
