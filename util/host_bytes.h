// Host memory for large working buffers: uninitialized bytes, those of
// 4 MiB and more 2 MiB aligned and advised to use transparent huge pages.
//
//   HostBytes tile = AllocateHostBytes(256 << 20);
//   std::memset(tile.get(), 0, 256 << 20);  // first touch: 128 faults
//
// Why: every first touch of a 4 KiB page faults, and a TLB miss walks the
// page table; on a virtual machine with an emulated MMU both cost
// microseconds, so filling a gigabyte of fresh memory can take longer than
// sending it. With transparent huge pages in `madvise` or `always` mode
// the kernel backs the buffer with 2 MiB pages: one fault per 2 MiB.
// Without them the advice is ignored and the buffer works as any other.
//
// Users: the worker's staging pool (worker/staging_pool.h), its tiles
// (worker/tile_buffer.h) and the verification reference's float64 arrays
// (worker/kernels/reference.cc).
//
// Errors: throws std::bad_alloc when memory runs out, as new does.
// Thread safety: thread-safe.
#ifndef MESHCAST_UTIL_HOST_BYTES_H_
#define MESHCAST_UTIL_HOST_BYTES_H_

#include <cstdint>
#include <memory>

namespace meshcast {

// Host bytes are freed with free() (they come from malloc or
// aligned_alloc).
struct HostBytesFree {
  void operator()(uint8_t* data) const;
};
using HostBytes = std::unique_ptr<uint8_t[], HostBytesFree>;

// `bytes` (> 0) uninitialized bytes, on huge pages from 4 MiB (above).
HostBytes AllocateHostBytes(int64_t bytes);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_HOST_BYTES_H_
