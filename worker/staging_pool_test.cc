#include "worker/staging_pool.h"

#include <cstring>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

TEST(StagingPoolTest, ReusesAReturnedBufferThatFits) {
  StagingPool pool(1 << 20);
  const uint8_t* first = nullptr;
  {
    StagingBuffer buffer = pool.Take(1000);
    ASSERT_EQ(buffer.size(), 1000);
    std::memset(buffer.data(), 7, 1000);
    first = buffer.data();
  }
  EXPECT_EQ(pool.cached_bytes(), 1000);
  StagingBuffer again = pool.Take(600);  // fits: 1000 <= 2 x 600
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.size(), 600);
  EXPECT_EQ(again.span().size(), 600u);
  EXPECT_EQ(pool.cached_bytes(), 0);
}

TEST(StagingPoolTest, NeverHandsOutABufferMoreThanTwiceTheRequest) {
  StagingPool pool(1 << 20);
  const uint8_t* big = nullptr;
  {
    StagingBuffer buffer = pool.Take(10000);
    big = buffer.data();
  }
  StagingBuffer small = pool.Take(100);
  EXPECT_NE(small.data(), big);
  EXPECT_EQ(pool.cached_bytes(), 10000);
  StagingBuffer larger = pool.Take(20000);  // too small to reuse
  EXPECT_NE(larger.data(), big);
}

TEST(StagingPoolTest, BuffersInUseAreNeverShared) {
  StagingPool pool(1 << 20);
  std::vector<StagingBuffer> held;
  for (int i = 0; i < 8; ++i) held.push_back(pool.Take(4096));
  for (int i = 0; i < 8; ++i) {
    std::memset(held[i].data(), i, 4096);
  }
  for (int i = 0; i < 8; ++i) {
    for (int b = 0; b < 4096; b += 511) EXPECT_EQ(held[i].data()[b], i);
  }
  held.clear();
  EXPECT_EQ(pool.cached_bytes(), 8 * 4096);
}

TEST(StagingPoolTest, KeepsWithinItsCapacityDroppingTheLargestFirst) {
  StagingPool pool(10000);
  { StagingBuffer a = pool.Take(6000); }
  EXPECT_EQ(pool.cached_bytes(), 6000);
  { StagingBuffer b = pool.Take(7000); }  // 6000 cannot serve 7000
  // 6000 + 7000 exceed the capacity: the largest cached (a) goes first.
  EXPECT_EQ(pool.cached_bytes(), 7000);
  { StagingBuffer c = pool.Take(1000); }
  EXPECT_EQ(pool.cached_bytes(), 8000);
  { StagingBuffer huge = pool.Take(20000); }  // larger than the capacity
  EXPECT_EQ(pool.cached_bytes(), 8000);
  EXPECT_EQ(pool.Release(), 8000);
  EXPECT_EQ(pool.cached_bytes(), 0);
}

TEST(StagingPoolTest, MovedBuffersReturnOnce) {
  StagingPool pool(1 << 20);
  StagingBuffer a = pool.Take(100);
  StagingBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 100);
  StagingBuffer c = pool.Take(200);
  c = std::move(b);  // c's own buffer goes back now
  EXPECT_EQ(pool.cached_bytes(), 200);
  c = StagingBuffer();
  EXPECT_EQ(pool.cached_bytes(), 300);
  StagingBuffer empty = pool.Take(0);
  EXPECT_EQ(empty.size(), 0);
}

}  // namespace
}  // namespace meshcast::worker
