#include "util/host_bytes.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace meshcast {
namespace {

// Small and large allocations are writable to their last byte; large ones
// start on a 2 MiB boundary (the huge page the advice asks for).
TEST(HostBytesTest, SmallAndLargeBuffersAreWritableAndLargeOnesAligned) {
  for (int64_t bytes :
       {int64_t{1}, int64_t{4096}, int64_t{4} << 20, (int64_t{6} << 20) + 3}) {
    HostBytes data = AllocateHostBytes(bytes);
    ASSERT_NE(data, nullptr) << bytes;
    std::memset(data.get(), 0x5a, bytes);
    EXPECT_EQ(data[bytes - 1], 0x5a);
    if (bytes >= (int64_t{4} << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data.get()) % (uintptr_t{2} << 20),
                0u)
          << bytes;
    }
  }
}

}  // namespace
}  // namespace meshcast
