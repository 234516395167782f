#include "worker/buffer_set.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/parallel_for.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/host_memory.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"
#include "worker/pattern.h"
#include "worker/tile_checksum.h"

namespace meshcast::worker {
namespace {

bool IsPattern(const v1::Initializer& init) {
  return init.kind() == v1::Initializer::KIND_PATTERN ||
         init.kind() == v1::Initializer::KIND_UNSPECIFIED;
}

uint64_t ElementBits(const uint8_t* element, int size) {
  uint64_t bits = 0;
  std::memcpy(&bits, element, size);  // little endian: the low bytes
  return bits;
}

// The global row-major index of element `offset` of `box` (row-major).
int64_t GlobalIndexOf(int64_t offset, const Box& box,
                      const std::vector<int64_t>& shape) {
  std::vector<int64_t> coord(box.size());
  for (size_t d = box.size(); d-- > 0;) {
    const int64_t extent = box[d].size();
    coord[d] = box[d].begin + offset % extent;
    offset /= extent;
  }
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coord[d];
  return index;
}

// Moved data, bit for bit against the initializer: every element of `box`
// (FULL) or a fixed pseudo-random sample of at most kSampledElements
// (SAMPLE: one element in each of kSampledElements equal strides, at an
// offset hashed from the stride, so that every worker and every run checks
// the same elements).
absl::StatusOr<VerifyResult> VerifyMoved(absl::Span<const uint8_t> bytes,
                                         const Box& box, const TensorSpec& spec,
                                         int tensor,
                                         const v1::Initializer& init,
                                         v1::VerifyMode mode) {
  const int64_t n = NumElements(box);
  if (mode == v1::VERIFY_MODE_FULL && IsPattern(init)) {
    return VerifyBox(bytes, box, spec, tensor);
  }
  const int size = DTypeSize(spec.dtype);
  VerifyResult result;
  auto check = [&](int64_t offset, int64_t global) {
    ++result.elements;
    const uint64_t expected = InitialBits(spec.dtype, tensor, init, global);
    const uint64_t found = ElementBits(bytes.data() + offset * size, size);
    const uint64_t mask =
        size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
    if ((expected & mask) == found) return;
    if (result.mismatches++ == 0) {
      result.first_mismatch_index = global;
      result.first_mismatch = MismatchBitsText(expected & mask, found);
    }
  };
  if (mode == v1::VERIFY_MODE_FULL || n <= kSampledElements) {
    ForEachRun(box, box, spec.full_box(), 0, n,
               [&](int64_t in_tile, int64_t global, int64_t length) {
                 for (int64_t k = 0; k < length; ++k) {
                   check(in_tile + k, global + k);
                 }
               });
    return result;
  }
  for (int64_t k = 0; k < kSampledElements; ++k) {
    const int64_t begin = n * k / kSampledElements;
    const int64_t end = n * (k + 1) / kSampledElements;
    const uint64_t h =
        PatternHash(static_cast<uint64_t>(k), static_cast<uint32_t>(tensor));
    const int64_t offset = begin + static_cast<int64_t>(h % (end - begin));
    check(offset, GlobalIndexOf(offset, box, spec.shape));
  }
  return result;
}

// The tile of `buffer` over the user buffer it names.
absl::StatusOr<TileBuffer> UserTile(const BufferDesc& buffer, DType dtype,
                                    const BufferSetOptions& options) {
  if (options.user_buffers == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan names user buffer '", buffer.user_buffer, "' for device ",
        buffer.device, ", but this worker takes no user buffers"));
  }
  const int local = options.devices_per_worker > 0
                        ? buffer.device % options.devices_per_worker
                        : buffer.device;
  const int64_t bytes = NumElements(buffer.box) * DTypeSize(dtype);
  ASSIGN_OR_RETURN(std::shared_ptr<UserBuffers::Mapping> mapping,
                   options.user_buffers->Acquire(buffer.user_buffer, local,
                                                 bytes));
  uint8_t* const data = mapping->data();
  return TileBuffer::Wrap(dtype, buffer.box, data, bytes, std::move(mapping));
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
      ASSIGN_OR_RETURN(TileBuffer tile,
                       buffer.user_buffer.empty()
                           ? TileBuffer::Create(dtype, buffer.box)
                           : UserTile(buffer, dtype, options));
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
    if (buffer.role != BufferRole::kScratch) {
      set.tiles_[{buffer.device, buffer.tensor, buffer.role}] = owned.get();
    }
    set.by_id_[buffer.id] = owned.get();
    set.owned_.push_back(std::move(owned));
  }

  // 1. The initializer into sources, poison into the destinations of moved
  // tensors, zeros into the rest, slice by slice (the slices of all tiles
  // share the threads).
  struct FillSlice {
    const BufferDesc* buffer;
    TileBuffer* tile;
    BoxPiece piece;
  };
  std::vector<FillSlice> fills;
  for (const auto& [buffer, tile] : order) {
    // A user's source holds its data; its destination is written whole.
    if (!buffer->user_buffer.empty()) continue;
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
    const int tensor = fill.buffer->tensor;
    if (fill.buffer->role == BufferRole::kSource) {
      const v1::Initializer& init = program.InitOf(tensor);
      if (IsPattern(init)) {
        return FillBox(bytes, fill.piece.box, program.tensors[tensor], tensor);
      }
      return FillInitializer(bytes, fill.piece.box, program.tensors[tensor],
                             tensor, init);
    }
    const bool poison = fill.buffer->role == BufferRole::kDestination &&
                        !program.IsComputed(tensor);
    std::memset(bytes.data(), poison ? kPoisonByte : 0, bytes.size());
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
  return it == tiles_.end() ? nullptr : it->second;
}

TileBuffer* BufferSet::ById(int id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
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
  return Verify(never, options, nullptr);
}

absl::StatusOr<VerificationSummary> BufferSet::VerifyDestinations(
    const Cancellation& cancellation, VerificationProgress* counters) const {
  return Verify(cancellation, options_, counters);
}

absl::StatusOr<VerificationSummary> BufferSet::Checksums(
    const Cancellation& cancellation, const BufferSetOptions& options) const {
  std::vector<const BufferDesc*> tiles;
  for (const BufferDesc& buffer : program_->buffers) {
    if (buffer.role != BufferRole::kScratch) tiles.push_back(&buffer);
  }
  VerificationSummary summary;
  summary.checksums.resize(tiles.size());
  RETURN_IF_ERROR(ParallelFor(tiles.size(), options.threads, [&](int i) {
    RETURN_IF_ERROR(cancellation.status());
    const BufferDesc& buffer = *tiles[i];
    summary.checksums[i] = {
        buffer.id, TileChecksum(*by_id_.at(buffer.id),
                                program_->tensors[buffer.tensor].shape)};
    return absl::OkStatus();
  }));
  return summary;
}

absl::StatusOr<VerificationSummary> BufferSet::Verify(
    const Cancellation& cancellation, const BufferSetOptions& options,
    VerificationProgress* counters) const {
  VerificationSummary summary;
  const v1::VerifyMode mode = program_->verify;
  if (mode == v1::VERIFY_MODE_OFF) return summary;
  if (mode == v1::VERIFY_MODE_CHECKSUM) {
    return Checksums(cancellation, options);
  }
  std::vector<const BufferDesc*> destinations;
  bool any_computed = false;
  for (const BufferDesc& buffer : program_->buffers) {
    // A user buffer holds the user's values, which nothing here knows.
    if (buffer.role == BufferRole::kDestination && buffer.user_buffer.empty()) {
      destinations.push_back(&buffer);
      any_computed |= program_->IsComputed(buffer.tensor);
    }
  }
  // The reference of computed tensors, from the whole plan (it may read
  // inputs that live on other workers: it recomputes them).
  std::unique_ptr<Reference> reference;
  if (any_computed) {
    if (program_->plan == nullptr) {
      return absl::FailedPreconditionError(
          "computed destinations but no plan to build their reference from");
    }
    ASSIGN_OR_RETURN(reference, Reference::Create(*program_->plan));
  }
  // Slices of every destination in order: a tile's slices are consecutive,
  // in its row-major order. A sampled or computed tile is one slice: its
  // checker samples (or walks) the whole tile itself.
  struct VerifySlice {
    int destination;
    BoxPiece piece;
  };
  std::vector<VerifySlice> slices;
  for (size_t d = 0; d < destinations.size(); ++d) {
    const BufferDesc& buffer = *destinations[d];
    const DType dtype = program_->tensors[buffer.tensor].dtype;
    if (mode == v1::VERIFY_MODE_SAMPLE ||
        program_->IsComputed(buffer.tensor)) {
      if (!IsEmpty(buffer.box)) {
        slices.push_back({static_cast<int>(d), BoxPiece{buffer.box, 0}});
      }
      continue;
    }
    for (BoxPiece& piece :
         SplitBox(buffer.box, options.slicing.elements(DTypeSize(dtype)))) {
      slices.push_back({static_cast<int>(d), std::move(piece)});
    }
  }
  if (counters != nullptr) {
    // What the checkers will count: a sampled tile checks at most
    // kSampledElements (the computed check samples as many).
    int64_t total = 0;
    for (const VerifySlice& slice : slices) {
      const int64_t n = NumElements(slice.piece.box);
      total += mode == v1::VERIFY_MODE_SAMPLE ? std::min(n, kSampledElements)
                                              : n;
    }
    counters->done.store(0, std::memory_order_relaxed);
    counters->total.store(total, std::memory_order_relaxed);
  }
  std::vector<VerifyResult> results(slices.size());
  std::vector<double> errors(slices.size(), 0);
  // Counts slice i once it is checked, whichever way it was.
  auto count = [&](int i) {
    if (counters != nullptr) {
      counters->done.fetch_add(results[i].elements, std::memory_order_relaxed);
    }
  };
  RETURN_IF_ERROR(ParallelFor(slices.size(), options.threads, [&](int i) {
    RETURN_IF_ERROR(options.slicing.Next(cancellation));
    const BufferDesc& buffer = *destinations[slices[i].destination];
    const BoxPiece& piece = slices[i].piece;
    const TileBuffer* tile = ById(buffer.id);
    const TensorSpec& spec = program_->tensors[buffer.tensor];
    const int size = tile->element_size();
    const absl::Span<const uint8_t> bytes = tile->bytes().subspan(
        piece.offset * size, NumElements(piece.box) * size);
    if (program_->IsComputed(buffer.tensor)) {
      ASSIGN_OR_RETURN(ComputedCheck computed,
                       VerifyComputed(bytes, piece.box, spec, buffer.tensor,
                                      *reference, mode, cancellation));
      results[i].elements = computed.elements;
      results[i].mismatches = computed.mismatches;
      results[i].first_mismatch = computed.first_mismatch;
      errors[i] = computed.max_abs_error;
      count(i);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(results[i],
                     VerifyMoved(bytes, piece.box, spec, buffer.tensor,
                                 program_->InitOf(buffer.tensor), mode));
    count(i);
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
    summary.max_abs_error = std::max(summary.max_abs_error, errors[i]);
  }
  for (size_t i = 0; i < tiles.size(); ++i) {
    summary.elements += tiles[i].elements;
    summary.mismatches += tiles[i].mismatches;
    if (tiles[i].mismatches > 0 && summary.first_mismatch.empty()) {
      // Computed checks name the element themselves.
      const std::string where =
          tiles[i].first_mismatch_index >= 0
              ? absl::StrCat(" global index ", tiles[i].first_mismatch_index)
              : std::string();
      summary.first_mismatch = absl::StrCat(
          "device ", destinations[i]->device, " tensor ",
          destinations[i]->tensor, where, ": ", tiles[i].first_mismatch, " (",
          tiles[i].mismatches, " mismatches in tile ",
          BoxToString(destinations[i]->box), ")");
    }
  }
  return summary;
}

int64_t BufferSet::total_bytes() const {
  int64_t total = 0;
  for (const auto& tile : owned_) total += tile->size_bytes();
  return total;
}

}  // namespace meshcast::worker
