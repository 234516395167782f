#include "worker/buffer_set.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/host_memory.h"
#include "worker/pattern.h"

namespace meshcast::worker {
namespace {

// Runs task(i) for i in [0, count) on up to `threads` threads; returns the
// first error. Tasks must be independent.
absl::Status ParallelFor(int count, int threads,
                         const std::function<absl::Status(int)>& task) {
  std::atomic<int> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (int i = next++; i < count; i = next++) {
      absl::Status status = task(i);
      if (!status.ok()) {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = status;
        next = count;
      }
    }
  };
  const int n = std::max(1, std::min(threads, count));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  return first_error;
}

}  // namespace

absl::StatusOr<BufferSet> BufferSet::Create(const ParsedProgram& program,
                                            const Cancellation& cancellation,
                                            int threads) {
  BufferSetOptions options;
  options.threads = threads;
  return Create(program, cancellation, options);
}

absl::StatusOr<BufferSet> BufferSet::Create(const ParsedProgram& program,
                                            const Cancellation& cancellation,
                                            const BufferSetOptions& options) {
  BufferSet set;
  set.program_ = &program;
  set.options_ = options;
  const WorkSlicing& slicing = options.slicing;
  std::vector<std::pair<const BufferDesc*, TileBuffer*>> order;
  int64_t allocated = 0;
  for (const BufferDesc& buffer : program.buffers) {
    RETURN_IF_ERROR(cancellation.status());
    const DType dtype = program.tensors[buffer.tensor].dtype;
    std::unique_ptr<TileBuffer> owned;
    try {
      ASSIGN_OR_RETURN(TileBuffer tile, TileBuffer::Create(dtype, buffer.box));
      owned = std::make_unique<TileBuffer>(std::move(tile));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "std::bad_alloc allocating the ",
          FormatBytes(NumElements(buffer.box) * DTypeSize(dtype)),
          " tile of device ", buffer.device, " tensor ", buffer.tensor,
          " after ", FormatBytes(allocated), " of the job's other tiles"));
    }
    allocated += owned->size_bytes();
    order.emplace_back(&buffer, owned.get());
    set.tiles_[{buffer.device, buffer.tensor, buffer.role}] = std::move(owned);
  }

  // 1. The pattern into sources, poison into destinations, slice by slice
  // (the slices of all tiles share the threads).
  struct FillSlice {
    const BufferDesc* buffer;
    TileBuffer* tile;
    BoxPiece piece;
  };
  std::vector<FillSlice> fills;
  for (const auto& [buffer, tile] : order) {
    for (BoxPiece& piece :
         SplitBox(buffer->box, slicing.elements(tile->element_size()))) {
      fills.push_back({buffer, tile, std::move(piece)});
    }
  }
  RETURN_IF_ERROR(ParallelFor(fills.size(), options.threads, [&](int i) {
    RETURN_IF_ERROR(slicing.Next(cancellation));
    const FillSlice& fill = fills[i];
    const int size = fill.tile->element_size();
    const absl::Span<uint8_t> bytes = fill.tile->bytes().subspan(
        fill.piece.offset * size, NumElements(fill.piece.box) * size);
    if (fill.buffer->role == BufferRole::kSource) {
      return FillBox(bytes, fill.piece.box,
                     program.tensors[fill.buffer->tensor], fill.buffer->tensor);
    }
    std::memset(bytes.data(), kPoisonByte, bytes.size());
    return absl::OkStatus();
  }));

  // 2. Destinations copy what the same device's source already holds;
  // after (1), which wrote both.
  struct CopySlice {
    TileBuffer* to;
    const TileBuffer* from;
    Box region;
  };
  std::vector<CopySlice> copies;
  for (const auto& [buffer, tile] : order) {
    if (buffer->role != BufferRole::kDestination) continue;
    const TileBuffer* source =
        set.Find(buffer->device, buffer->tensor, BufferRole::kSource);
    if (source == nullptr) continue;
    const Box overlap = Intersect(source->box(), tile->box());
    for (BoxPiece& piece :
         SplitBox(overlap, slicing.elements(tile->element_size()))) {
      copies.push_back({tile, source, std::move(piece.box)});
    }
  }
  RETURN_IF_ERROR(ParallelFor(copies.size(), options.threads, [&](int i) {
    RETURN_IF_ERROR(slicing.Next(cancellation));
    return copies[i].to->CopyRegionFrom(*copies[i].from, copies[i].region);
  }));
  return set;
}

TileBuffer* BufferSet::Find(int device, int tensor, BufferRole role) const {
  auto it = tiles_.find(Key{device, tensor, role});
  return it == tiles_.end() ? nullptr : it->second.get();
}

absl::StatusOr<const TileBuffer*> BufferSet::SenderTile(
    int device, int tensor, const Box& slice) const {
  for (BufferRole role : {BufferRole::kSource, BufferRole::kDestination}) {
    const TileBuffer* tile = Find(device, tensor, role);
    if (tile != nullptr && Contains(tile->box(), slice)) return tile;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("sender device ", device, " holds no tile of tensor ",
                   tensor, " that contains the slice ", BoxToString(slice)));
}

absl::StatusOr<TileBuffer*> BufferSet::ReceiverTile(int device, int tensor,
                                                    const Box& slice) const {
  TileBuffer* tile = Find(device, tensor, BufferRole::kDestination);
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

absl::StatusOr<VerificationSummary> BufferSet::VerifyDestinations(
    int threads) const {
  const Cancellation never;
  BufferSetOptions options = options_;
  options.threads = threads;
  return Verify(never, options);
}

absl::StatusOr<VerificationSummary> BufferSet::VerifyDestinations(
    const Cancellation& cancellation) const {
  return Verify(cancellation, options_);
}

absl::StatusOr<VerificationSummary> BufferSet::Verify(
    const Cancellation& cancellation, const BufferSetOptions& options) const {
  std::vector<const BufferDesc*> destinations;
  for (const BufferDesc& buffer : program_->buffers) {
    if (buffer.role == BufferRole::kDestination) {
      destinations.push_back(&buffer);
    }
  }
  // Slices of every destination in order: a tile's slices are consecutive,
  // in its row-major order.
  struct VerifySlice {
    int destination;
    BoxPiece piece;
  };
  std::vector<VerifySlice> slices;
  for (size_t d = 0; d < destinations.size(); ++d) {
    const DType dtype = program_->tensors[destinations[d]->tensor].dtype;
    for (BoxPiece& piece :
         SplitBox(destinations[d]->box,
                  options.slicing.elements(DTypeSize(dtype)))) {
      slices.push_back({static_cast<int>(d), std::move(piece)});
    }
  }
  std::vector<VerifyResult> results(slices.size());
  RETURN_IF_ERROR(ParallelFor(slices.size(), options.threads, [&](int i) {
    RETURN_IF_ERROR(options.slicing.Next(cancellation));
    const BufferDesc& buffer = *destinations[slices[i].destination];
    const BoxPiece& piece = slices[i].piece;
    const TileBuffer* tile =
        Find(buffer.device, buffer.tensor, BufferRole::kDestination);
    const int size = tile->element_size();
    ASSIGN_OR_RETURN(
        results[i],
        VerifyBox(tile->bytes().subspan(piece.offset * size,
                                        NumElements(piece.box) * size),
                  piece.box, program_->tensors[buffer.tensor], buffer.tensor));
    return absl::OkStatus();
  }));
  // Per tile: the sums of its slices, the first mismatch of its first
  // slice that has one.
  std::vector<VerifyResult> tiles(destinations.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    VerifyResult& tile = tiles[slices[i].destination];
    tile.elements += results[i].elements;
    if (results[i].mismatches > 0 && tile.mismatches == 0) {
      tile.first_mismatch_index = results[i].first_mismatch_index;
      tile.first_mismatch = results[i].first_mismatch;
    }
    tile.mismatches += results[i].mismatches;
  }
  VerificationSummary summary;
  for (size_t i = 0; i < tiles.size(); ++i) {
    summary.elements += tiles[i].elements;
    summary.mismatches += tiles[i].mismatches;
    if (tiles[i].mismatches > 0 && summary.first_mismatch.empty()) {
      summary.first_mismatch = absl::StrCat(
          "device ", destinations[i]->device, " tensor ",
          destinations[i]->tensor, " global index ",
          tiles[i].first_mismatch_index, ": ", tiles[i].first_mismatch, " (",
          tiles[i].mismatches, " mismatches in tile ",
          BoxToString(destinations[i]->box), ")");
    }
  }
  return summary;
}

int64_t BufferSet::total_bytes() const {
  int64_t total = 0;
  for (const auto& [key, tile] : tiles_) total += tile->size_bytes();
  return total;
}

}  // namespace meshcast::worker
