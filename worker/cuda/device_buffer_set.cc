#include "worker/cuda/device_buffer_set.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "util/parallel_for.h"
#include "util/status_macros.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/mismatch_report.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"

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
    if (buffer.role != BufferRole::kScratch) {
      set.tiles_[{buffer.device, buffer.tensor, buffer.role}] = tile.get();
    }
    set.by_id_[buffer.id] = std::move(tile);
  }
  // Sources first: destinations copy from them (stream order on each GPU;
  // a device's tiles all live on one GPU).
  for (const BufferDesc& buffer : program.buffers) {
    RETURN_IF_ERROR(cancellation.status());
    if (buffer.role != BufferRole::kSource) continue;
    const DeviceTile* tile = set.ById(buffer.id);
    if (tile->size_bytes() == 0) continue;
    ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(tile->gpu()));
    ScopedCudaDevice on(tile->gpu());
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(FillInitializerOnDevice(
        tile->data(), buffer.box, program.tensors[buffer.tensor],
        buffer.tensor, program.InitOf(buffer.tensor), stream));
  }
  for (const BufferDesc& buffer : program.buffers) {
    RETURN_IF_ERROR(cancellation.status());
    if (buffer.role == BufferRole::kSource) continue;
    DeviceTile* tile = set.ById(buffer.id);
    if (tile->size_bytes() == 0) continue;
    ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(tile->gpu()));
    // Poison shows an element nobody wrote; computed tensors start at zero
    // (an accumulating GEMM adds to it), as on the CPU.
    const bool poison = buffer.role == BufferRole::kDestination &&
                        !program.IsComputed(buffer.tensor);
    {
      ScopedCudaDevice on(tile->gpu());
      RETURN_IF_ERROR(on.status());
      RETURN_IF_ERROR(CudaStatus(
          cudaMemsetAsync(tile->data(), poison ? kPoisonByte : 0,
                          tile->size_bytes(), stream),
          poison ? "poisoning a destination tile" : "zeroing a tile"));
    }
    if (buffer.role != BufferRole::kDestination) continue;
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
  return it == tiles_.end() ? nullptr : it->second;
}

DeviceTile* DeviceBufferSet::ById(int id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.get();
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

// Every element of a moved tensor with a RANDOM or ZEROS initializer
// against InitialBits (worker/kernels/initializer.h).
ComputedCheck CheckInitialBits(const std::vector<uint8_t>& bytes,
                               const Box& box, const TensorSpec& spec,
                               int tensor, const v1::Initializer& init) {
  ComputedCheck check;
  const int size = DTypeSize(spec.dtype);
  const int64_t n = NumElements(box);
  std::vector<int64_t> coord(box.size());
  for (size_t d = 0; d < box.size(); ++d) coord[d] = box[d].begin;
  for (int64_t e = 0; e < n; ++e) {
    int64_t global = 0;
    for (size_t d = 0; d < box.size(); ++d) {
      global = global * spec.shape[d] + coord[d];
    }
    uint64_t found = 0;
    std::memcpy(&found, bytes.data() + e * size, size);
    const uint64_t expected =
        InitialBits(spec.dtype, tensor, init, global) &
        (size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1);
    ++check.elements;
    if (found != expected) {
      if (check.mismatches++ == 0) {
        check.first_mismatch = absl::StrCat(
            "global index ", global, ": expected bits 0x",
            absl::Hex(expected), ", found 0x", absl::Hex(found));
      }
    }
    for (int d = static_cast<int>(box.size()) - 1; d >= 0; --d) {
      if (++coord[d] < box[d].end) break;
      coord[d] = box[d].begin;
    }
  }
  return check;
}

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

// Threads of the host-side checks: the host is otherwise idle while a GPU
// job verifies.
int HostCheckThreads() {
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
}

}  // namespace

absl::StatusOr<VerificationSummary> DeviceBufferSet::VerifyDestinations()
    const {
  return VerifyDestinations(Cancellation());
}

absl::StatusOr<VerificationSummary> DeviceBufferSet::VerifyDestinations(
    const Cancellation& cancellation) const {
  VerificationSummary summary;
  const v1::VerifyMode mode = program_->verify;
  if (mode == v1::VERIFY_MODE_OFF) return summary;
  if (mode == v1::VERIFY_MODE_CHECKSUM) {
    return absl::UnimplementedError(
        "verify: checksum is computed on CPU workers only; use full, sample "
        "or off on GPUs");
  }
  // The reference of computed tensors, from the whole plan, as the CPU
  // verifier builds it.
  std::unique_ptr<Reference> reference;
  for (const BufferDesc& buffer : program_->buffers) {
    if (buffer.role != BufferRole::kDestination ||
        !program_->IsComputed(buffer.tensor) || reference != nullptr) {
      continue;
    }
    if (program_->plan == nullptr) {
      return absl::FailedPreconditionError(
          "computed destinations but no plan to build their reference from");
    }
    ASSIGN_OR_RETURN(reference, Reference::Create(*program_->plan));
  }
  absl::flat_hash_map<int, CudaStream> streams;
  // Destinations checked on the host, in program order.
  struct HostCheck {
    const BufferDesc* buffer;
    const DeviceTile* tile;
    bool computed;
  };
  std::vector<HostCheck> host_checks;
  for (const BufferDesc& buffer : program_->buffers) {
    RETURN_IF_ERROR(cancellation.status());
    if (buffer.role != BufferRole::kDestination) continue;
    const DeviceTile* tile = ById(buffer.id);
    const TensorSpec& spec = program_->tensors[buffer.tensor];
    if (tile->num_elements() == 0) continue;
    auto it = streams.find(tile->gpu());
    if (it == streams.end()) {
      ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(tile->gpu()));
      it = streams.emplace(tile->gpu(), std::move(stream)).first;
    }
    ScopedCudaDevice on(tile->gpu());
    RETURN_IF_ERROR(on.status());
    const v1::Initializer& init = program_->InitOf(buffer.tensor);
    const bool computed = program_->IsComputed(buffer.tensor);
    if (!computed && IsPatternInitializer(init)) {
      summary.elements += tile->num_elements();
      ASSIGN_OR_RETURN(const DeviceVerifyResult verified,
                       VerifyBoxOnDevice(tile->data(), buffer.box, spec,
                                         buffer.tensor, it->second.get()));
      summary.mismatches += verified.mismatches;
      if (verified.mismatches == 0 || !summary.first_mismatch.empty()) {
        continue;
      }
      absl::StatusOr<std::string> first = DescribeFirstMismatch(
          *tile, buffer, spec, verified, it->second.get());
      summary.first_mismatch =
          first.ok() ? *std::move(first)
                     // Mismatches stay the job's verdict even when the first
                     // cannot be described; an error here would hide them.
                     : absl::StrCat(verified.mismatches, " mismatches in tile ",
                                    BoxToString(buffer.box), " on device ",
                                    buffer.device, " (GPU ", tile->gpu(),
                                    "); the first could not be described: ",
                                    first.status().message());
      continue;
    }
    host_checks.push_back({&buffer, tile, computed});
  }
  // On the host, with the CPU path's checks, a batch of tiles at a time:
  // copied serially (the copies are fast), checked in parallel (the
  // float64 reference is not), with host memory bounded by the batch.
  const int threads = HostCheckThreads();
  for (size_t begin = 0; begin < host_checks.size(); begin += threads) {
    RETURN_IF_ERROR(cancellation.status());
    const size_t end = std::min(host_checks.size(), begin + threads);
    std::vector<std::vector<uint8_t>> bytes(end - begin);
    for (size_t i = begin; i < end; ++i) {
      const DeviceTile* tile = host_checks[i].tile;
      cudaStream_t stream = streams.at(tile->gpu()).get();
      ScopedCudaDevice on(tile->gpu());
      RETURN_IF_ERROR(on.status());
      bytes[i - begin].resize(tile->size_bytes());
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(bytes[i - begin].data(), tile->data(),
                          tile->size_bytes(), cudaMemcpyDeviceToHost, stream),
          "copying a destination tile to the host for verification"));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream),
                                 "copying a destination tile to the host"));
    }
    std::vector<ComputedCheck> checks(end - begin);
    RETURN_IF_ERROR(ParallelFor(
        static_cast<int>(end - begin), threads, [&](int j) -> absl::Status {
          const HostCheck& host = host_checks[begin + j];
          const BufferDesc& buffer = *host.buffer;
          const TensorSpec& spec = program_->tensors[buffer.tensor];
          if (host.computed) {
            ASSIGN_OR_RETURN(checks[j], VerifyComputed(bytes[j], buffer.box,
                                                       spec, buffer.tensor,
                                                       *reference, mode,
                                                       cancellation));
          } else {
            checks[j] = CheckInitialBits(bytes[j], buffer.box, spec,
                                         buffer.tensor,
                                         program_->InitOf(buffer.tensor));
          }
          return absl::OkStatus();
        }));
    for (size_t i = begin; i < end; ++i) {
      const ComputedCheck& check = checks[i - begin];
      const BufferDesc& buffer = *host_checks[i].buffer;
      summary.elements += check.elements;
      summary.mismatches += check.mismatches;
      summary.max_abs_error =
          std::max(summary.max_abs_error, check.max_abs_error);
      if (check.mismatches > 0 && summary.first_mismatch.empty()) {
        summary.first_mismatch = absl::StrCat(
            "device ", buffer.device, " tensor ", buffer.tensor, ": ",
            check.first_mismatch, " (", check.mismatches,
            " mismatches in tile ", BoxToString(buffer.box), ")");
      }
    }
  }
  return summary;
}

int64_t DeviceBufferSet::total_bytes() const {
  int64_t total = 0;
  for (const auto& [id, tile] : by_id_) total += tile->size_bytes();
  return total;
}

}  // namespace meshcast::worker::cuda
