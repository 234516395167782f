#include "util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace meshcast {

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

}  // namespace meshcast
