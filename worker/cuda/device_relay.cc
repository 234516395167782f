#include "worker/cuda/device_relay.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/relay_schedule.h"

namespace meshcast::worker::cuda {
namespace {

// A run of the relay tree (RelayRun) with what this worker needs to drive
// it.
struct Run {
  RelayRun plan;
  int gpu = -1;  // local runs: CUDA ordinal
  // Local runs: the lane's stream of `gpu`. Every operation of the run goes
  // on it, and runs on one rank share it: RelaySchedule's ordering contract
  // (packs, group, deliveries of each round in issue order on one stream)
  // is what makes two staging slots enough without any event.
  cudaStream_t stream = nullptr;
  // Staging chunks (stream-ordered allocations), used when a chunk is not
  // one contiguous segment of the run's root tile; slot i holds the chunks
  // g with g % kRelaySlots == i.
  void* slots[kRelaySlots] = {};
};

class StepEnqueuer {
 public:
  StepEnqueuer(const StepDesc& step, const DeviceRelayEnvironment& env,
               const DeviceLane& lane)
      : step_(step), env_(env), lane_(lane) {}

  // Frees what an error left allocated (FreeSlots did the rest).
  ~StepEnqueuer() { FreeSlots().IgnoreError(); }

  absl::Status Enqueue(absl::Span<const cudaEvent_t> waits,
                       const StepEvents& events) {
    const ParsedProgram& program = *env_.program;
    events_ = &events;
    const cudaEvent_t start = events.start;
    const cudaEvent_t done = events.done;
    const int length = static_cast<int>(step_.chain.size());
    element_size_ = RelayElementSize(step_, program);
    elements_ = RelayElements(step_);
    tiles_.assign(length, nullptr);
    bool all_local = true;
    for (int p = 0; p < length; ++p) {
      const int device = step_.chain[p];
      if (!program.IsLocal(device)) {
        all_local = false;
        continue;
      }
      if (step_.operand_form) {
        // [sender, receiver]: the input's buffer, the output's buffer.
        ASSIGN_OR_RETURN(tiles_[p],
                         OperandTile(p == 0 ? step_.inputs[0] : step_.outputs[0],
                                     p == 0 ? "inputs[0]" : "outputs[0]"));
      } else if (p == 0) {
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
        RETURN_IF_ERROR(step_.operand_form ? CopyBetweenRegions()
                                           : CopyAlongTree());
      } else {
        for (int p = 1; p < length; ++p) {
          RETURN_IF_ERROR(RecordHop(p, primary_, primary_gpu_));
        }
      }
      return End(done);
    }
    if (env_.nccl == nullptr) {
      return absl::FailedPreconditionError(
          "the relay crosses workers but this job has no NCCL communicator");
    }
    RETURN_IF_ERROR(BuildRuns());
    std::vector<int> gpus;
    for (const Run& run : runs_) {
      if (run.plan.local &&
          std::find(gpus.begin(), gpus.end(), run.gpu) == gpus.end()) {
        gpus.push_back(run.gpu);
      }
    }
    RETURN_IF_ERROR(Begin(gpus, waits, start));
    if (elements_ > 0) {
      RETURN_IF_ERROR(Pipeline());
    } else {
      for (const Run& run : runs_) {
        if (!run.plan.local) continue;
        for (int p : run.plan.positions) {
          if (p > 0) RETURN_IF_ERROR(RecordHop(p, run.stream, run.gpu));
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

  // The region the sender reads and the one every receiver writes: the
  // step's slice of its tensor, or in the operand form the input's and the
  // output's regions (equal element counts, element e to element e in
  // row-major order; ParseProgram checks both).
  const Box& SendRegion() const {
    return step_.operand_form ? step_.inputs[0].box : step_.slice;
  }
  const Box& ReceiveRegion() const {
    return step_.operand_form ? step_.outputs[0].box : step_.slice;
  }

  // The tile of an operand-form step's operand (its buffer on this worker).
  absl::StatusOr<DeviceTile*> OperandTile(const OperandDesc& operand,
                                          const char* what) const {
    DeviceTile* tile = env_.buffers->ById(operand.buffer);
    if (tile == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " buffer ", operand.buffer, " has no tile on this worker"));
    }
    return tile;
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

  // Every hop is a tile-to-tile copy from the position's parent, which the
  // primary stream has already written (parents come first).
  absl::Status CopyAlongTree() {
    RETURN_IF_ERROR(CheckParents());
    for (size_t p = 1; p < step_.chain.size(); ++p) {
      const DeviceTile* parent = tiles_[step_.parents[p]];
      DeviceTile* tile = tiles_[p];
      ASSIGN_OR_RETURN(
          const RegionCopy copy,
          MakeTileCopy(step_.slice, tile->box(), parent->box(), element_size_));
      RETURN_IF_ERROR(EnqueueRegionCopy({tile->data(), tile->gpu()},
                                        {parent->data(), parent->gpu()}, copy,
                                        primary_, primary_gpu_));
      RETURN_IF_ERROR(RecordHop(static_cast<int>(p), primary_, primary_gpu_));
    }
    return absl::OkStatus();
  }

  // ParseProgram fills and checks StepDesc::parents; a step built another
  // way without them must not index past them.
  absl::Status CheckParents() const {
    if (step_.parents.size() != step_.chain.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the relay has ", step_.chain.size(), " positions but ",
                       step_.parents.size(), " parents"));
    }
    return absl::OkStatus();
  }

  // The operand form on one worker: element e of the input's region to
  // element e of the output's, chunk by chunk (the regions may differ in
  // shape). A chunk that is one segment in either tile is packed straight
  // into, or unpacked straight from, that tile; otherwise it goes through a
  // staging chunk on the sender's GPU. Everything is on the primary stream,
  // so one staging chunk serves every chunk in turn.
  absl::Status CopyBetweenRegions() {
    const DeviceTile* from = tiles_[0];
    DeviceTile* to = tiles_[1];
    if (from == to && SendRegion() == ReceiveRegion()) {
      return RecordHop(1, primary_, primary_gpu_);
    }
    const int64_t chunk = std::max<int64_t>(
        1, RelayChunkBytes(step_, env_.chunk_bytes) / element_size_);
    void* staging = nullptr;
    absl::Status status;
    for (int64_t first = 0; first < elements_ && status.ok(); first += chunk) {
      const int64_t last = std::min(elements_, first + chunk);
      ASSIGN_OR_RETURN(const RegionCopy pack,
                       MakePackCopy(SendRegion(), from->box(), first, last,
                                    element_size_));
      ASSIGN_OR_RETURN(const RegionCopy unpack,
                       MakeUnpackCopy(ReceiveRegion(), to->box(), first, last,
                                      element_size_));
      if (IsSingleSegment(unpack)) {
        // Pack straight into the output's contiguous segment.
        int64_t dst = 0, src = 0, length = 0;
        RowSegment(unpack, FirstRow(unpack), &dst, &src, &length);
        status = EnqueueRegionCopy({to->data() + dst * element_size_, to->gpu()},
                                   {from->data(), from->gpu()}, pack, primary_,
                                   primary_gpu_);
        continue;
      }
      if (IsSingleSegment(pack)) {
        // Unpack straight from the input's contiguous segment.
        int64_t dst = 0, src = 0, length = 0;
        RowSegment(pack, FirstRow(pack), &dst, &src, &length);
        status = EnqueueRegionCopy(
            {to->data(), to->gpu()},
            {from->data() + src * element_size_, from->gpu()}, unpack,
            primary_, primary_gpu_);
        continue;
      }
      if (staging == nullptr) {
        RETURN_IF_ERROR(PrepareStagingPool(primary_gpu_));
        ScopedCudaDevice on(primary_gpu_);
        RETURN_IF_ERROR(on.status());
        RETURN_IF_ERROR(CudaStatus(
            cudaMallocAsync(&staging,
                            std::min(chunk, elements_) * element_size_,
                            primary_),
            "allocating a staging chunk"));
      }
      status = EnqueueRegionCopy({staging, primary_gpu_},
                                 {from->data(), from->gpu()}, pack, primary_,
                                 primary_gpu_);
      if (status.ok()) {
        status = EnqueueRegionCopy({to->data(), to->gpu()},
                                   {staging, primary_gpu_}, unpack, primary_,
                                   primary_gpu_);
      }
    }
    if (staging != nullptr) {
      ScopedCudaDevice on(primary_gpu_);
      status.Update(on.status());
      status.Update(CudaStatus(cudaFreeAsync(staging, primary_),
                               "freeing a staging chunk"));
    }
    RETURN_IF_ERROR(status);
    return RecordHop(1, primary_, primary_gpu_);
  }

  absl::Status BuildRuns() {
    const ParsedProgram& program = *env_.program;
    const int length = static_cast<int>(step_.chain.size());
    std::vector<int> ranks(length);
    std::vector<bool> local(length);
    for (int p = 0; p < length; ++p) {
      ASSIGN_OR_RETURN(ranks[p], env_.nccl->RankOfDevice(step_.chain[p]));
      local[p] = program.IsLocal(step_.chain[p]);
    }
    ASSIGN_OR_RETURN(std::vector<RelayRun> plans,
                     CutIntoRuns(ranks, local, step_.parents));
    for (RelayRun& plan : plans) {
      Run run;
      run.plan = std::move(plan);
      if (run.plan.local) {
        run.gpu = env_.buffers->GpuOf(step_.chain[run.plan.root()]);
        ASSIGN_OR_RETURN(run.stream, StreamOf(run.gpu));
      }
      runs_.push_back(std::move(run));
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

  // Where chunk g of run j lies in the run's root tile when it is one
  // contiguous segment there (NCCL then reads or writes the tile itself),
  // else null: it needs a staging slot. Run 0 sends from its sender tile;
  // the others receive into their root's receiver tile.
  absl::StatusOr<uint8_t*> TileSegment(int j, int64_t g) const {
    const DeviceTile* tile = tiles_[runs_[j].plan.root()];
    ASSIGN_OR_RETURN(
        const RegionCopy copy,
        j == 0 ? MakePackCopy(SendRegion(), tile->box(), ChunkBegin(g),
                              ChunkEnd(g), element_size_)
               : MakeUnpackCopy(ReceiveRegion(), tile->box(), ChunkBegin(g),
                                ChunkEnd(g), element_size_));
    if (!IsSingleSegment(copy)) return nullptr;
    int64_t dst = 0, src = 0, length = 0;
    RowSegment(copy, FirstRow(copy), &dst, &src, &length);
    const int64_t in_tile = j == 0 ? src : dst;
    return tile->data() + in_tile * element_size_;
  }

  // Where the chunk of `op` lives on its run's GPU: its tile segment or its
  // staging slot (allocated by AllocateSlots).
  struct ChunkHome {
    uint8_t* data = nullptr;
    bool in_tile = false;
  };
  absl::StatusOr<ChunkHome> HomeOf(const RelayOp& op) const {
    ASSIGN_OR_RETURN(uint8_t* const segment, TileSegment(op.run, op.chunk));
    if (segment != nullptr) return ChunkHome{segment, true};
    void* const slot = runs_[op.run].slots[op.slot];
    if (slot == nullptr) {
      return absl::InternalError(absl::StrCat("run ", op.run,
                                              " has no staging slot ", op.slot,
                                              " for chunk ", op.chunk));
    }
    return ChunkHome{static_cast<uint8_t*>(slot), false};
  }

  // Allocates every staging slot the step will use, before its first NCCL
  // group: a failed allocation then leaves no peer waiting on a relay this
  // worker has half issued.
  absl::Status AllocateSlots(const RelaySchedule& schedule) {
    for (int j = 0; j < static_cast<int>(runs_.size()); ++j) {
      Run& run = runs_[j];
      if (!run.plan.local) continue;
      bool needed[kRelaySlots] = {};
      int64_t missing = std::min<int64_t>(kRelaySlots, schedule.chunks());
      for (int64_t g = 0; g < schedule.chunks() && missing > 0; ++g) {
        const int slot = static_cast<int>(g % kRelaySlots);
        if (needed[slot]) continue;
        ASSIGN_OR_RETURN(uint8_t* const segment, TileSegment(j, g));
        if (segment == nullptr) {
          needed[slot] = true;
          --missing;
        }
      }
      for (int slot = 0; slot < kRelaySlots; ++slot) {
        if (!needed[slot]) continue;
        RETURN_IF_ERROR(PrepareStagingPool(run.gpu));
        ScopedCudaDevice on(run.gpu);
        RETURN_IF_ERROR(on.status());
        RETURN_IF_ERROR(CudaStatus(
            cudaMallocAsync(&run.slots[slot], slot_bytes_, run.stream),
            absl::StrCat("allocating a ", slot_bytes_, "-byte chunk slot")));
      }
    }
    return absl::OkStatus();
  }

  // Stream-ordered frees: the memory returns to the pool once the run's
  // stream has passed its last use (NCCL's peer side of a slot is done when
  // the send or receive completes on this stream). Issued before End, so
  // the step's done event covers them.
  absl::Status FreeSlots() {
    absl::Status status;
    for (Run& run : runs_) {
      for (void*& slot : run.slots) {
        if (slot == nullptr) continue;
        ScopedCudaDevice on(run.gpu);
        status.Update(on.status());
        status.Update(CudaStatus(cudaFreeAsync(slot, run.stream),
                                 "freeing a chunk slot"));
        slot = nullptr;
      }
    }
    return status;
  }

  // Copies packed chunk g from `chunk` into the tiles of the run's
  // positions, its root too unless `skip_root`; after the last chunk,
  // records each one's hop event. All copy from the run's home: the run's
  // shape inside the rank does not matter.
  absl::Status UnpackInto(const Run& run, bool skip_root, int64_t g,
                          const uint8_t* chunk) {
    for (int p : run.plan.positions) {
      if (skip_root && p == run.plan.root()) continue;
      DeviceTile* tile = tiles_[p];
      ASSIGN_OR_RETURN(const RegionCopy copy,
                       MakeUnpackCopy(ReceiveRegion(), tile->box(),
                                      ChunkBegin(g), ChunkEnd(g),
                                      element_size_));
      RETURN_IF_ERROR(EnqueueRegionCopy({tile->data(), run.gpu},
                                        {chunk, run.gpu}, copy, run.stream,
                                        run.gpu));
      if (g == chunks_ - 1) RETURN_IF_ERROR(RecordHop(p, run.stream, run.gpu));
    }
    return absl::OkStatus();
  }

  // kPack: run 0 packs the chunk into its slot, unless it is one tile
  // segment that NCCL sends directly.
  absl::Status Pack(const RelayOp& op) {
    const Run& run = runs_[op.run];
    ASSIGN_OR_RETURN(const ChunkHome home, HomeOf(op));
    if (home.in_tile) return absl::OkStatus();
    const DeviceTile* tile = tiles_[run.plan.root()];
    ASSIGN_OR_RETURN(
        const RegionCopy pack,
        MakePackCopy(SendRegion(), tile->box(), ChunkBegin(op.chunk),
                     ChunkEnd(op.chunk), element_size_));
    return EnqueueRegionCopy({home.data, run.gpu}, {tile->data(), run.gpu},
                             pack, run.stream, run.gpu);
  }

  // kSend, kRecv: one operation of the round's NCCL group, with the chunk
  // at `home` (found before the group, which holds up the other lanes).
  absl::Status Transfer(const RelayOp& op, const ChunkHome& home) {
    const Run& run = runs_[op.run];
    const int peer = runs_[op.peer_run].plan.rank;
    if (op.kind == RelayOpKind::kSend) {
      return env_.nccl->Send(lane_.index, run.gpu, home.data,
                             ChunkBytes(op.chunk), peer, run.stream);
    }
    return env_.nccl->Recv(lane_.index, run.gpu, home.data,
                           ChunkBytes(op.chunk), peer, run.stream);
  }

  // kDeliver: the run's local receivers take the chunk from its home.
  absl::Status Deliver(const RelayOp& op) {
    const Run& run = runs_[op.run];
    ASSIGN_OR_RETURN(const ChunkHome home, HomeOf(op));
    if (op.run == 0) {
      // The root is the sender.
      return UnpackInto(run, /*skip_root=*/true, op.chunk, home.data);
    }
    if (home.in_tile && op.chunk == chunks_ - 1) {
      // NCCL wrote the last chunk into the root's tile itself.
      RETURN_IF_ERROR(RecordHop(run.plan.root(), run.stream, run.gpu));
    }
    return UnpackInto(run, /*skip_root=*/home.in_tile, op.chunk, home.data);
  }

  // The wavefront of RelaySchedule, round by round: packs, then one NCCL
  // group with every local run's receive and sends (one per child run) of
  // the round, in the schedule's link order as on every rank, then the
  // deliveries, all on the runs' streams.
  absl::Status Pipeline() {
    chunk_elements_ = std::max<int64_t>(
        1, RelayChunkBytes(step_, env_.chunk_bytes) / element_size_);
    chunks_ = (elements_ + chunk_elements_ - 1) / chunk_elements_;
    slot_bytes_ = static_cast<size_t>(std::min(chunk_elements_, elements_)) *
                  element_size_;
    std::vector<RelayRun> plans;
    for (const Run& run : runs_) plans.push_back(run.plan);
    ASSIGN_OR_RETURN(const RelaySchedule schedule,
                     RelaySchedule::Create(std::move(plans), chunks_));
    RETURN_IF_ERROR(AllocateSlots(schedule));
    const int lane = lane_.index;
    for (int64_t t = 0; t < schedule.rounds(); ++t) {
      const RelayRound round = schedule.Round(t);
      if (round.empty()) continue;
      for (const RelayOp& op : round.before_group) {
        RETURN_IF_ERROR(Pack(op));
      }
      std::vector<ChunkHome> homes;
      for (const RelayOp& op : round.group) {
        ASSIGN_OR_RETURN(const ChunkHome home, HomeOf(op));
        homes.push_back(home);
      }
      RETURN_IF_ERROR(env_.nccl->GroupStart(lane));
      absl::Status status;
      for (size_t i = 0; i < round.group.size() && status.ok(); ++i) {
        status = Transfer(round.group[i], homes[i]);
      }
      // Always close the group, even after a failed call.
      const absl::Status ended = env_.nccl->GroupEnd(lane);
      RETURN_IF_ERROR(status);
      RETURN_IF_ERROR(ended);
      for (const RelayOp& op : round.after_group) {
        RETURN_IF_ERROR(Deliver(op));
      }
    }
    return FreeSlots();
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

// Once per GPU per process: readies the default stream-ordered pool that
// holds the staging slots. It is shared with the peer GPUs (NCCL's
// direct-pointer path, see ShareDefaultMemPoolWithPeers), and
// cudaMemPoolReuseAllowInternalDependencies is turned off. With that
// attribute on (the default) cudaMallocAsync may hand out a block freed on
// another stream by making the allocating stream wait for that stream: a
// step's slot allocation on lane 1 could wait for whatever lane 0 had
// enqueued up to the free of some other step's slot, NCCL kernels blocked
// on remote peers included. Such an edge can make a step wait for a later
// step of another lane, which the ordering argument of docs/gpu.md rules
// out: that later step may itself be waiting, through a peer, for this one
// (a deadlock), and at best the lanes stop overlapping. Reuse of completed
// frees (opportunistic) and after an explicit event dependency stays on:
// neither adds a wait.
absl::Status PrepareStagingPool(int gpu) {
  RETURN_IF_ERROR(ShareDefaultMemPoolWithPeers(gpu));
  static absl::Mutex* const mu = new absl::Mutex;
  static auto* const prepared = new absl::flat_hash_set<int>;
  absl::MutexLock lock(mu);
  if (prepared->contains(gpu)) return absl::OkStatus();
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  cudaMemPool_t pool = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, gpu),
                             absl::StrCat("default memory pool of GPU ", gpu)));
  int allow = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies,
                              &allow),
      absl::StrCat("keeping GPU ", gpu,
                   "'s memory pool from adding stream dependencies")));
  prepared->insert(gpu);
  return absl::OkStatus();
}

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
    // CopyAlongTree issues every copy on the primary stream.
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
  return absl::Status(status.code(),
                      absl::StrCat(DescribeRelayStep(step, "GPU"), ": ",
                                   status.message()));
}

}  // namespace meshcast::worker::cuda
