// ParallelFor: runs independent tasks 0..count-1 on a few threads and
// returns the first error, for the workers' fills and verifications.
//
//   RETURN_IF_ERROR(ParallelFor(tiles.size(), 4, [&](int i) {
//     return Check(tiles[i]);
//   }));
//
// The calling thread works too; at most `threads` run at once (at least
// one, at most `count`). After a task fails no further task starts; the
// ones already running finish. The tasks must not depend on each other's
// order.
// Thread safety: `task` is called concurrently and must be safe to.
#ifndef MESHCAST_UTIL_PARALLEL_FOR_H_
#define MESHCAST_UTIL_PARALLEL_FOR_H_

#include <functional>

#include "absl/status/status.h"

namespace meshcast {

absl::Status ParallelFor(int count, int threads,
                         const std::function<absl::Status(int)>& task);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_PARALLEL_FOR_H_
