// StagingPool: host buffers that CPU steps stage data in (relay slots, ring
// accumulators, packed pieces, all-gather bundles, packed compute operands),
// kept between steps and jobs so that their pages are touched once per
// worker, not once per step.
//
//   StagingPool pool(/*capacity_bytes=*/int64_t{1} << 30);
//   StagingBuffer acc = pool.Take(bytes);   // uninitialized bytes
//   Pack(..., acc.span());                  // write before reading
//   // acc goes back to the pool when it goes out of scope
//
// Why: a fresh allocation of N bytes costs a page fault per 4 KiB page on
// first touch, and a large one (glibc serves it with mmap) is unmapped when
// freed, so the next step faults again. On a virtual machine with an
// emulated MMU a fault costs microseconds: an all-gather that allocated its
// bundles afresh spent as long faulting them in as sending them.
//
// Large buffers (4 MiB and more) are 2 MiB aligned and advised to use
// transparent huge pages, where the kernel allows them (madvise mode), so
// that even the first touch faults once per 2 MiB instead of per 4 KiB.
//
// Contract: Take returns a buffer of exactly `bytes` bytes (span()), backed
// by a cached allocation of at least `bytes` and at most twice that when
// one is free, else by a new allocation. Its contents are unspecified: the
// caller writes every byte it reads. A buffer given back is cached while
// the cached total stays within the capacity (the largest cached buffers
// are dropped first to make room); Release() drops every cached buffer (the
// executor calls it when a job's memory check would otherwise fail).
// A StagingBuffer must not outlive its pool.
//
// Errors: none (allocation failure throws std::bad_alloc, as new does; the
// executor's memory check runs first).
// Thread safety: StagingPool is thread-safe; a StagingBuffer is not.
#ifndef MESHCAST_WORKER_STAGING_POOL_H_
#define MESHCAST_WORKER_STAGING_POOL_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "util/host_bytes.h"

namespace meshcast::worker {

class StagingPool;

// Staging memory is util/host_bytes.h's: large buffers on huge pages.
using StagingFree = HostBytesFree;
using StagingBytes = HostBytes;

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(StagingBuffer&& other) noexcept;
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer();

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  absl::Span<uint8_t> span() {
    return {data_.get(), static_cast<size_t>(size_)};
  }
  absl::Span<const uint8_t> span() const {
    return {data_.get(), static_cast<size_t>(size_)};
  }

 private:
  friend class StagingPool;
  StagingBuffer(StagingPool* pool, StagingBytes data, int64_t capacity,
                int64_t size)
      : pool_(pool), data_(std::move(data)), capacity_(capacity), size_(size) {}
  void GiveBack();

  StagingPool* pool_ = nullptr;  // null: not from a pool (freed on its own)
  StagingBytes data_;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
};

class StagingPool {
 public:
  explicit StagingPool(int64_t capacity_bytes);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of `bytes` (>= 0) uninitialized bytes.
  StagingBuffer Take(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every cached buffer; returns the bytes it freed.
  int64_t Release() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t cached_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t capacity_bytes() const { return capacity_bytes_; }

  // The worker's pool (1 GiB), for steps whose environment names none.
  static StagingPool& Default();

 private:
  friend class StagingBuffer;
  void Return(StagingBytes data, int64_t capacity) ABSL_LOCKS_EXCLUDED(mu_);

  const int64_t capacity_bytes_;
  mutable absl::Mutex mu_;
  // Cached allocations by capacity.
  std::multimap<int64_t, StagingBytes> free_ ABSL_GUARDED_BY(mu_);
  int64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_STAGING_POOL_H_
