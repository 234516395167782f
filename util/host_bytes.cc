#include "util/host_bytes.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace meshcast {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kHugeFrom = int64_t{4} << 20;

}  // namespace

void HostBytesFree::operator()(uint8_t* data) const { std::free(data); }

HostBytes AllocateHostBytes(int64_t bytes) {
  void* data = nullptr;
  if (bytes >= kHugeFrom) {
    const int64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    data = std::aligned_alloc(kHugePage, rounded);
    // Advice only: without transparent huge pages the buffer still works.
    if (data != nullptr) madvise(data, rounded, MADV_HUGEPAGE);
  } else {
    data = std::malloc(bytes);
  }
  if (data == nullptr) throw std::bad_alloc();
  return HostBytes(static_cast<uint8_t*>(data));
}

}  // namespace meshcast
