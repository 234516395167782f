// BufferSet: the tiles of one job on this worker's (virtual CPU) devices.
//
// Create() allocates a TileBuffer per local buffer of the program, fills
// SOURCE tiles with their tensor's initializer (pattern, random, zeros),
// poisons the DESTINATION tiles of tensors that are only moved, zeroes the
// DESTINATION tiles of computed tensors and every SCRATCH tile, and
// pre-copies into each destination the part that the same device's source
// tile of the same tensor already holds (docs/dataplane.md). A buffer that
// names a user buffer (user_buffers.h) is that memory instead of a new
// tile: a source is not filled (it holds the user's data) and a
// destination is not verified (nothing knows its expected values). Relays look
// tiles up by (device, tensor, role): a sender reads from its source tile
// when that holds the slice, else from its destination tile (received in an
// earlier step); receivers write into their destination tile. Other ops
// name their operands' buffers by id (ById). VerifyDestinations checks the
// destinations at the end, as the program's verify mode says: moved tensors
// bit for bit against the initializer, computed ones against the reference
// (worker/kernels/reference.h) within the dtype's tolerance.
//
//   ASSIGN_OR_RETURN(BufferSet buffers, BufferSet::Create(program, cancel));
//   ASSIGN_OR_RETURN(const TileBuffer* from, buffers.SenderTile(d, t, slice));
//
// Fill, pre-copy and verification cut every tile into slices
// (BufferSetOptions::slicing, 16 MiB by default) that up to `threads`
// threads share; each slice starts with a cancellation check, so an abort
// ends them within one slice per thread, and Create's tiles are freed as
// it returns the error. A tile that cannot be allocated is
// RESOURCE_EXHAUSTED, not an exception.
// Thread safety: lookups are safe concurrently; tiles follow TileBuffer's
// rules (concurrent steps write disjoint regions, ordered by deps).
#ifndef MESHCAST_WORKER_BUFFER_SET_H_
#define MESHCAST_WORKER_BUFFER_SET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/cancellation.h"
#include "worker/program.h"
#include "worker/tile_buffer.h"
#include "worker/user_buffers.h"

namespace meshcast::worker {

// Destination bytes before any data arrives: 0xFF is a NaN in every float
// type (never a pattern value) and an unlikely integer pattern value.
inline constexpr uint8_t kPoisonByte = 0xFF;

// Elements VERIFY_MODE_SAMPLE checks per destination tile, at most.
inline constexpr int64_t kSampledElements = 4096;

struct BufferSetOptions {
  // Threads that fill, pre-copy and verify.
  int threads = 4;
  WorkSlicing slicing;
  // Where tiles named by BufferDesc::user_buffer live (looked up by name and
  // local device index = global device % devices_per_worker); null: a
  // program that names one fails with FAILED_PRECONDITION.
  std::shared_ptr<const UserBuffers> user_buffers;
  int devices_per_worker = 0;
};

struct VerificationSummary {
  int64_t elements = 0;
  int64_t mismatches = 0;
  // Largest |actual - reference| over computed elements (0 for moves).
  double max_abs_error = 0;
  // "device 3 tensor 0 index 1234: expected ..., found ..." for the first
  // mismatching buffer, empty if none.
  std::string first_mismatch;
  // VERIFY_MODE_CHECKSUM: (buffer id, TileChecksum) of every source and
  // destination tile, in the program's buffer order; nothing is compared
  // here (the controller does, across workers).
  std::vector<std::pair<int, uint64_t>> checksums;
};

// How far a verification is, for status polls from any thread: `total`
// (elements it will check: every element, or the sample, of every
// destination) is set before the first slice, and `done` grows by each
// slice's checked elements as the slice finishes, reaching `total` at the
// end.
struct VerificationProgress {
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> total{0};
};

class BufferSet {
 public:
  // `program` must outlive the set. CANCELLED (the reason) if
  // `cancellation` is set before the set is ready.
  static absl::StatusOr<BufferSet> Create(const ParsedProgram& program,
                                          const Cancellation& cancellation,
                                          const BufferSetOptions& options);
  static absl::StatusOr<BufferSet> Create(const ParsedProgram& program,
                                          const Cancellation& cancellation,
                                          int threads = 4);

  BufferSet(BufferSet&&) = default;
  BufferSet& operator=(BufferSet&&) = default;

  // Null if the device has no tile of that tensor and role (scratch tiles
  // are found by id only).
  TileBuffer* Find(int device, int tensor, BufferRole role) const;
  // The tile of local buffer `id`; null if there is none.
  TileBuffer* ById(int id) const;

  // The tile a sender reads `slice` from; FailedPrecondition naming the
  // device and slice if neither its source nor destination tile holds it.
  absl::StatusOr<const TileBuffer*> SenderTile(int device, int tensor,
                                               const Box& slice) const;
  // The destination tile a receiver writes `slice` into.
  absl::StatusOr<TileBuffer*> ReceiverTile(int device, int tensor,
                                           const Box& slice) const;

  // Checks the destinations (every element, a fixed sample of at most
  // kSampledElements per tile, or nothing: ParsedProgram::verify), slice by
  // slice with the options given to Create; CANCELLED once `cancellation`
  // is set. `counters` (optional) follow it slice by slice.
  absl::StatusOr<VerificationSummary> VerifyDestinations(
      const Cancellation& cancellation,
      VerificationProgress* counters = nullptr) const;
  // The same, never cancelled, on `threads` threads.
  absl::StatusOr<VerificationSummary> VerifyDestinations(int threads = 4) const;

  int64_t total_bytes() const;

 private:
  using Key = std::tuple<int, int, BufferRole>;  // device, tensor, role

  BufferSet() = default;

  absl::StatusOr<VerificationSummary> Verify(
      const Cancellation& cancellation, const BufferSetOptions& options,
      VerificationProgress* counters) const;
  absl::StatusOr<VerificationSummary> Checksums(
      const Cancellation& cancellation, const BufferSetOptions& options) const;

  const ParsedProgram* program_ = nullptr;
  BufferSetOptions options_;
  // unique_ptr keeps tile addresses stable for concurrent steps.
  std::vector<std::unique_ptr<TileBuffer>> owned_;
  absl::flat_hash_map<Key, TileBuffer*> tiles_;
  absl::flat_hash_map<int, TileBuffer*> by_id_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_BUFFER_SET_H_
