#include "worker/buffer_set.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"
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
  BufferSet set;
  set.program_ = &program;
  std::vector<std::pair<const BufferDesc*, TileBuffer*>> order;
  for (const BufferDesc& buffer : program.buffers) {
    ASSIGN_OR_RETURN(
        TileBuffer tile,
        TileBuffer::Create(program.tensors[buffer.tensor].dtype, buffer.box));
    auto owned = std::make_unique<TileBuffer>(std::move(tile));
    order.emplace_back(&buffer, owned.get());
    set.tiles_[{buffer.device, buffer.tensor, buffer.role}] = std::move(owned);
  }
  // Sources first: destinations copy from them.
  RETURN_IF_ERROR(ParallelFor(order.size(), threads, [&](int i) {
    RETURN_IF_ERROR(cancellation.status());
    const auto [buffer, tile] = order[i];
    if (buffer->role != BufferRole::kSource) return absl::OkStatus();
    return FillBox(tile->bytes(), buffer->box, program.tensors[buffer->tensor],
                   buffer->tensor);
  }));
  RETURN_IF_ERROR(ParallelFor(order.size(), threads, [&](int i) {
    RETURN_IF_ERROR(cancellation.status());
    const auto [buffer, tile] = order[i];
    if (buffer->role != BufferRole::kDestination) return absl::OkStatus();
    tile->Fill(kPoisonByte);
    const TileBuffer* source =
        set.Find(buffer->device, buffer->tensor, BufferRole::kSource);
    if (source == nullptr) return absl::OkStatus();
    const Box overlap = Intersect(source->box(), tile->box());
    if (IsEmpty(overlap)) return absl::OkStatus();
    return tile->CopyRegionFrom(*source, overlap);
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
  std::vector<const BufferDesc*> destinations;
  for (const BufferDesc& buffer : program_->buffers) {
    if (buffer.role == BufferRole::kDestination) {
      destinations.push_back(&buffer);
    }
  }
  std::vector<VerifyResult> results(destinations.size());
  RETURN_IF_ERROR(ParallelFor(destinations.size(), threads, [&](int i) {
    const BufferDesc& buffer = *destinations[i];
    const TileBuffer* tile =
        Find(buffer.device, buffer.tensor, BufferRole::kDestination);
    ASSIGN_OR_RETURN(
        results[i], VerifyBox(tile->bytes(), buffer.box,
                              program_->tensors[buffer.tensor], buffer.tensor));
    return absl::OkStatus();
  }));
  VerificationSummary summary;
  for (size_t i = 0; i < results.size(); ++i) {
    summary.elements += results[i].elements;
    summary.mismatches += results[i].mismatches;
    if (results[i].mismatches > 0 && summary.first_mismatch.empty()) {
      summary.first_mismatch = absl::StrCat(
          "device ", destinations[i]->device, " tensor ",
          destinations[i]->tensor, " global index ",
          results[i].first_mismatch_index, ": ", results[i].first_mismatch,
          " (", results[i].mismatches, " mismatches in tile ",
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
