// TileChecksum: a position-keyed checksum of a tile, for verifying data
// meshcast does not know (user buffers, VERIFY_MODE_CHECKSUM).
//
//   uint64_t sum = TileChecksum(tile, tensor.shape);
//
// The checksum is the sum (mod 2^64) over the tile's elements of
// ElementHash(global row-major index, element bits). Because it is a sum,
// tiles that partition a tensor add up to the same value whatever the
// partition: the controller compares the destinations of a tensor with its
// sources without any worker seeing both. Because every term depends on the
// element's position, a value that lands in the wrong place changes it.
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_TILE_CHECKSUM_H_
#define MESHCAST_WORKER_TILE_CHECKSUM_H_

#include <cstdint>
#include <vector>

#include "worker/tile_buffer.h"

namespace meshcast::worker {

// One element's term: a 64-bit mix of its global index and its bits (the
// element's bytes, little-endian, zero-extended to 64 bits).
uint64_t ElementHash(int64_t global_index, uint64_t bits);

// The sum of ElementHash over the tile's elements; `shape` is the whole
// tensor's (it gives the global indices).
uint64_t TileChecksum(const TileBuffer& tile,
                      const std::vector<int64_t>& shape);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_TILE_CHECKSUM_H_
