#include "worker/cuda/device_buffer_set.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "util/status_macros.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/mismatch_report.h"

namespace meshcast::worker::cuda {

absl::StatusOr<std::unique_ptr<DeviceTile>> DeviceTile::Create(int gpu,
                                                               DType dtype,
                                                               Box box) {
  for (size_t d = 0; d < box.size(); ++d) {
    if (box[d].begin > box[d].end || box[d].begin < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tile box ", BoxToString(box),
          " has a negative begin or begin > end in dimension ", d));
    }
  }
  const size_t bytes = NumElements(box) * DTypeSize(dtype);
  ASSIGN_OR_RETURN(DeviceMemory memory, DeviceMemory::Allocate(gpu, bytes));
  return std::unique_ptr<DeviceTile>(
      new DeviceTile(dtype, std::move(box), std::move(memory)));
}

absl::StatusOr<DeviceBufferSet> DeviceBufferSet::Create(
    const ParsedProgram& program,
    const absl::flat_hash_map<int, int>& device_gpu,
    const Cancellation& cancellation) {
  DeviceBufferSet set;
  set.program_ = &program;
  set.device_gpu_ = device_gpu;
  // One set-up stream per GPU: fills of different GPUs overlap.
  absl::flat_hash_map<int, CudaStream> streams;
  auto stream_of = [&](int gpu) -> absl::StatusOr<cudaStream_t> {
    auto it = streams.find(gpu);
    if (it == streams.end()) {
      ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(gpu));
      it = streams.emplace(gpu, std::move(stream)).first;
    }
    return it->second.get();
  };
  auto sync_all = [&]() -> absl::Status {
    for (auto& [gpu, stream] : streams) {
      ScopedCudaDevice on(gpu);
      RETURN_IF_ERROR(on.status());
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream.get()),
                                 absl::StrCat("tile set-up on GPU ", gpu)));
    }
    return absl::OkStatus();
  };

  for (const BufferDesc& buffer : program.buffers) {
    auto gpu = device_gpu.find(buffer.device);
    if (gpu == device_gpu.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer ", buffer.id, " is on device ", buffer.device,
                       ", which has no GPU on this worker"));
    }
    ASSIGN_OR_RETURN(
        std::unique_ptr<DeviceTile> tile,
        DeviceTile::Create(gpu->second, program.tensors[buffer.tensor].dtype,
                           buffer.box));
    set.tiles_[{buffer.device, buffer.tensor, buffer.role}] = std::move(tile);
  }
  // Sources first: destinations copy from them (stream order on each GPU;
  // a device's tiles all live on one GPU).
  for (const BufferDesc& buffer : program.buffers) {
    RETURN_IF_ERROR(cancellation.status());
    if (buffer.role != BufferRole::kSource) continue;
    const DeviceTile* tile =
        set.Find(buffer.device, buffer.tensor, BufferRole::kSource);
    if (tile->size_bytes() == 0) continue;
    ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(tile->gpu()));
    ScopedCudaDevice on(tile->gpu());
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(FillBoxOnDevice(tile->data(), buffer.box,
                                    program.tensors[buffer.tensor],
                                    buffer.tensor, stream));
  }
  for (const BufferDesc& buffer : program.buffers) {
    RETURN_IF_ERROR(cancellation.status());
    if (buffer.role != BufferRole::kDestination) continue;
    DeviceTile* tile =
        set.Find(buffer.device, buffer.tensor, BufferRole::kDestination);
    if (tile->size_bytes() == 0) continue;
    ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(tile->gpu()));
    {
      ScopedCudaDevice on(tile->gpu());
      RETURN_IF_ERROR(on.status());
      RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(tile->data(), kPoisonByte,
                                                 tile->size_bytes(), stream),
                                 "poisoning a destination tile"));
    }
    const DeviceTile* source =
        set.Find(buffer.device, buffer.tensor, BufferRole::kSource);
    if (source == nullptr) continue;
    const Box overlap = Intersect(source->box(), tile->box());
    if (IsEmpty(overlap)) continue;
    ASSIGN_OR_RETURN(const RegionCopy copy,
                     MakeTileCopy(overlap, tile->box(), source->box(),
                                  tile->element_size()));
    RETURN_IF_ERROR(EnqueueRegionCopy({tile->data(), tile->gpu()},
                                      {source->data(), source->gpu()}, copy,
                                      stream, tile->gpu()));
  }
  RETURN_IF_ERROR(sync_all());
  return set;
}

DeviceTile* DeviceBufferSet::Find(int device, int tensor,
                                  BufferRole role) const {
  auto it = tiles_.find(Key{device, tensor, role});
  return it == tiles_.end() ? nullptr : it->second.get();
}

absl::StatusOr<const DeviceTile*> DeviceBufferSet::SenderTile(
    int device, int tensor, const Box& slice) const {
  for (BufferRole role : {BufferRole::kSource, BufferRole::kDestination}) {
    const DeviceTile* tile = Find(device, tensor, role);
    if (tile != nullptr && Contains(tile->box(), slice)) return tile;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("sender device ", device, " holds no tile of tensor ",
                   tensor, " that contains the slice ", BoxToString(slice)));
}

absl::StatusOr<DeviceTile*> DeviceBufferSet::ReceiverTile(
    int device, int tensor, const Box& slice) const {
  DeviceTile* tile = Find(device, tensor, BufferRole::kDestination);
  if (tile == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("receiver device ", device,
                     " has no ROLE_DESTINATION buffer of tensor ", tensor));
  }
  if (!Contains(tile->box(), slice)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "receiver device ", device, ": slice ", BoxToString(slice),
        " is not inside its destination tile ", BoxToString(tile->box())));
  }
  return tile;
}

int DeviceBufferSet::GpuOf(int device) const {
  auto it = device_gpu_.find(device);
  return it == device_gpu_.end() ? -1 : it->second;
}

namespace {

// Copies the tile's element `element` (a few bytes) to the host and
// describes it. `stream` must be the one the verify kernel ran on.
absl::StatusOr<std::string> DescribeFirstMismatch(
    const DeviceTile& tile, const BufferDesc& buffer, const TensorSpec& spec,
    const DeviceVerifyResult& verified, cudaStream_t stream) {
  const int size = tile.element_size();
  if (size > 8) {
    return absl::InternalError(
        absl::StrCat("elements of ", size, " bytes are not supported"));
  }
  // Pinned, so the copy is a true asynchronous DMA ordered on `stream`.
  ASSIGN_OR_RETURN(PinnedHostMemory pinned, PinnedHostMemory::Allocate(size));
  uint8_t* bytes = pinned.data();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(bytes,
                      tile.data() + verified.first_mismatch_element * size,
                      size, cudaMemcpyDeviceToHost, stream),
      "copying the first mismatching element to the host"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream),
                 "copying the first mismatching element to the host"));
  ASSIGN_OR_RETURN(const TileMismatch first,
                   LocateTileElement(buffer.box, spec, buffer.tensor,
                                     verified.first_mismatch_element,
                                     absl::MakeConstSpan(bytes, size)));
  return FirstMismatchMessage(buffer, first, verified.mismatches);
}

}  // namespace

absl::StatusOr<VerificationSummary> DeviceBufferSet::VerifyDestinations()
    const {
  VerificationSummary summary;
  absl::flat_hash_map<int, CudaStream> streams;
  for (const BufferDesc& buffer : program_->buffers) {
    if (buffer.role != BufferRole::kDestination) continue;
    const DeviceTile* tile =
        Find(buffer.device, buffer.tensor, BufferRole::kDestination);
    const TensorSpec& spec = program_->tensors[buffer.tensor];
    summary.elements += tile->num_elements();
    if (tile->num_elements() == 0) continue;
    auto it = streams.find(tile->gpu());
    if (it == streams.end()) {
      ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(tile->gpu()));
      it = streams.emplace(tile->gpu(), std::move(stream)).first;
    }
    ScopedCudaDevice on(tile->gpu());
    RETURN_IF_ERROR(on.status());
    ASSIGN_OR_RETURN(const DeviceVerifyResult verified,
                     VerifyBoxOnDevice(tile->data(), buffer.box, spec,
                                       buffer.tensor, it->second.get()));
    summary.mismatches += verified.mismatches;
    if (verified.mismatches == 0 || !summary.first_mismatch.empty()) continue;
    absl::StatusOr<std::string> first =
        DescribeFirstMismatch(*tile, buffer, spec, verified, it->second.get());
    summary.first_mismatch =
        first.ok() ? *std::move(first)
                   // Mismatches stay the job's verdict even when the first
                   // cannot be described; an error here would hide them.
                   : absl::StrCat(verified.mismatches, " mismatches in tile ",
                                  BoxToString(buffer.box), " on device ",
                                  buffer.device, " (GPU ", tile->gpu(),
                                  "); the first could not be described: ",
                                  first.status().message());
  }
  return summary;
}

int64_t DeviceBufferSet::total_bytes() const {
  int64_t total = 0;
  for (const auto& [key, tile] : tiles_) total += tile->size_bytes();
  return total;
}

}  // namespace meshcast::worker::cuda
