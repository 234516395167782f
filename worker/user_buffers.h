// UserBuffers: memory that processes on the worker's host lend to jobs, so
// that a job reads a program's own tensors and writes into its own memory
// instead of the worker's synthetic tiles.
//
// A process writes its tile into a file (usually in /dev/shm, shared
// memory) and registers it with the worker over the worker's local Unix
// socket (Worker.RegisterBuffer, --local-socket): a name, the worker's local
// device index the tile belongs to, the path and the size. The worker maps
// the file shared, read-write; a job whose plan names the buffer
// (v1::Buffer.user_buffer) uses that mapping as the tile, so what the job
// writes is in the process's own mapping of the file when it ends, with no
// copy in either direction.
//
//   UserBuffers buffers;
//   RETURN_IF_ERROR(buffers.Register({"train/wq", 0, "/dev/shm/wq.0", n}));
//   ASSIGN_OR_RETURN(std::shared_ptr<UserBuffers::Mapping> m,
//                    buffers.Acquire("train/wq", 0, n));   // for one job
//   uint8_t* tile = m->data();
//
// Contract: a name and device identify one buffer; registering them again
// replaces the mapping (jobs already holding the old one keep it until they
// end). Acquire checks the size a job needs against the registered size, so
// a job can never read or write past the file. Unregister drops the
// registry's reference; the mapping is unmapped when the last job using it
// ends.
// Errors: INVALID_ARGUMENT for an empty name, a negative device or size, a
// relative path, a path that is not a regular file or is shorter than
// size_bytes; NOT_FOUND (naming what is registered) for an unknown name;
// FAILED_PRECONDITION when the sizes differ.
// Thread safety: thread-safe.
#ifndef MESHCAST_WORKER_USER_BUFFERS_H_
#define MESHCAST_WORKER_USER_BUFFERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace meshcast::worker {

class UserBuffers {
 public:
  struct Info {
    std::string name;
    int device = 0;  // local device index
    std::string path;
    int64_t size_bytes = 0;
    int jobs_using = 0;  // List() only: mappings held by jobs
  };

  // One file mapped shared; unmapped when the last holder drops it.
  class Mapping {
   public:
    ~Mapping();
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;

    uint8_t* data() const { return data_; }
    int64_t size_bytes() const { return size_bytes_; }

   private:
    friend class UserBuffers;
    Mapping(uint8_t* data, int64_t size_bytes)
        : data_(data), size_bytes_(size_bytes) {}
    uint8_t* const data_;
    const int64_t size_bytes_;
  };

  absl::Status Register(const Info& info) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Unregister(const std::string& name, int device)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Info> List() const ABSL_LOCKS_EXCLUDED(mu_);

  // The mapping of (name, device) for a job that needs `size_bytes`.
  absl::StatusOr<std::shared_ptr<Mapping>> Acquire(const std::string& name,
                                                   int device,
                                                   int64_t size_bytes) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Info info;
    std::shared_ptr<Mapping> mapping;
  };
  using Key = std::pair<std::string, int>;  // name, device

  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_USER_BUFFERS_H_
