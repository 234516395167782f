#include "worker/staging_pool.h"

#include <cstdlib>
#include <new>
#include <utility>

namespace meshcast::worker {

StagingBuffer::StagingBuffer(StagingBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::move(other.data_)),
      capacity_(std::exchange(other.capacity_, 0)),
      size_(std::exchange(other.size_, 0)) {}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    GiveBack();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::move(other.data_);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

StagingBuffer::~StagingBuffer() { GiveBack(); }

void StagingBuffer::GiveBack() {
  if (pool_ != nullptr && data_ != nullptr) {
    pool_->Return(std::move(data_), capacity_);
  }
  data_.reset();
  pool_ = nullptr;
  capacity_ = size_ = 0;
}

StagingPool::StagingPool(int64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes) {}

StagingBuffer StagingPool::Take(int64_t bytes) {
  if (bytes <= 0) return StagingBuffer(this, nullptr, 0, 0);
  {
    absl::MutexLock lock(&mu_);
    // The smallest cached buffer that fits, unless it wastes more than half.
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes) {
      const int64_t capacity = it->first;
      StagingBytes data = std::move(it->second);
      free_.erase(it);
      cached_bytes_ -= capacity;
      return StagingBuffer(this, std::move(data), capacity, bytes);
    }
  }
  return StagingBuffer(this, AllocateHostBytes(bytes), bytes, bytes);
}

void StagingPool::Return(StagingBytes data, int64_t capacity) {
  if (capacity > capacity_bytes_) return;  // freed here, outside the lock
  absl::MutexLock lock(&mu_);
  // Make room by dropping the largest cached buffers first: they are the
  // least likely to fit the next request closely.
  while (cached_bytes_ + capacity > capacity_bytes_ && !free_.empty()) {
    auto largest = std::prev(free_.end());
    cached_bytes_ -= largest->first;
    free_.erase(largest);
  }
  free_.emplace(capacity, std::move(data));
  cached_bytes_ += capacity;
}

int64_t StagingPool::Release() {
  std::multimap<int64_t, StagingBytes> dropped;
  absl::MutexLock lock(&mu_);
  const int64_t freed = cached_bytes_;
  dropped.swap(free_);
  cached_bytes_ = 0;
  return freed;
}

int64_t StagingPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

StagingPool& StagingPool::Default() {
  static StagingPool* pool = new StagingPool(int64_t{1} << 30);
  return *pool;
}

}  // namespace meshcast::worker
