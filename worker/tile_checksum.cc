#include "worker/tile_checksum.h"

#include <cstring>

namespace meshcast::worker {
namespace {

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t ElementHash(int64_t global_index, uint64_t bits) {
  return Mix(Mix(static_cast<uint64_t>(global_index) + 0x9e3779b97f4a7c15ULL) ^
             bits);
}

uint64_t TileChecksum(const TileBuffer& tile,
                      const std::vector<int64_t>& shape) {
  const Box& box = tile.box();
  const int dims = static_cast<int>(box.size());
  if (tile.num_elements() == 0) return 0;
  if (dims == 0) {  // a scalar
    uint64_t bits = 0;
    std::memcpy(&bits, tile.bytes().data(), tile.element_size());
    return ElementHash(0, bits);
  }
  std::vector<int64_t> stride(dims, 1);
  for (int d = dims - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  // Rows of the box (all but the last dimension), in row-major order.
  std::vector<int64_t> coord(dims);
  for (int d = 0; d < dims; ++d) coord[d] = box[d].begin;
  const int size = tile.element_size();
  const int64_t row = box[dims - 1].end - box[dims - 1].begin;
  const uint8_t* data = tile.bytes().data();
  uint64_t sum = 0;
  while (true) {
    int64_t base = 0;
    for (int d = 0; d < dims; ++d) base += coord[d] * stride[d];
    for (int64_t i = 0; i < row; ++i, data += size) {
      uint64_t bits = 0;
      std::memcpy(&bits, data, size);
      sum += ElementHash(base + i, bits);
    }
    int d = dims - 2;
    for (; d >= 0; --d) {
      if (++coord[d] < box[d].end) break;
      coord[d] = box[d].begin;
    }
    if (d < 0) break;
  }
  return sum;
}

}  // namespace meshcast::worker
