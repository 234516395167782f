#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/device_pattern.h"
#include "worker/pattern.h"

namespace meshcast::worker::cuda {
namespace {

const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

// Runs everywhere: the kernels' view of a box.
TEST(PatternTileTest, DescribesTheBoxInTheTensor) {
  auto tile = MakePatternTile({{1, 3}, {2, 7}, {0, 4}},
                              TensorSpec{{5, 9, 4}, DType::kInt32});
  ASSERT_TRUE(tile.ok()) << tile.status();
  EXPECT_EQ(tile->rank, 3);
  EXPECT_EQ(tile->elements, 2 * 5 * 4);
  EXPECT_EQ(tile->box_begin[1], 2);
  EXPECT_EQ(tile->box_size[1], 5);
  EXPECT_EQ(tile->tensor_stride[0], 36);
  EXPECT_EQ(tile->tensor_stride[1], 4);
  EXPECT_EQ(tile->tensor_stride[2], 1);
  EXPECT_FALSE(MakePatternTile({{0, 6}}, TensorSpec{{5}, DType::kInt8}).ok());
  Box deep(9, Interval{0, 1});
  EXPECT_FALSE(MakePatternTile(
                   deep, TensorSpec{std::vector<int64_t>(9, 1), DType::kInt8})
                   .ok());
}

class PatternKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount reports none); "
                      "GPU pattern kernels not tested";
    }
  }
};

// The device fill equals the host FillBox byte for byte, and the device
// verify counts exactly the corrupted elements.
TEST_F(PatternKernelsTest, FillMatchesHostAndVerifyCountsCorruption) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const TensorSpec spec{{37, 19, 5}, dtype};
    const Box box = {{3, 30}, {4, 19}, {1, 5}};
    const size_t bytes = NumElements(box) * DTypeSize(dtype);
    std::vector<uint8_t> expected(bytes);
    ASSERT_TRUE(FillBox(absl::MakeSpan(expected), box, spec, 3).ok());

    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
    ASSERT_TRUE(FillBoxOnDevice(device, box, spec, 3, nullptr).ok());
    std::vector<uint8_t> filled(bytes);
    ASSERT_EQ(cudaMemcpy(filled.data(), device, bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(filled, expected);

    auto clean = CountMismatchesOnDevice(device, box, spec, 3, nullptr);
    ASSERT_TRUE(clean.ok()) << clean.status();
    EXPECT_EQ(*clean, 0);

    // Corrupt three elements.
    for (size_t element :
         {size_t{0}, size_t{17}, bytes / DTypeSize(dtype) - 1}) {
      filled[element * DTypeSize(dtype)] ^= 0x5A;
    }
    ASSERT_EQ(cudaMemcpy(device, filled.data(), bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
    auto corrupted = CountMismatchesOnDevice(device, box, spec, 3, nullptr);
    ASSERT_TRUE(corrupted.ok()) << corrupted.status();
    EXPECT_EQ(*corrupted, 3);
    // The wrong tensor index mismatches (nearly) everywhere.
    auto other = CountMismatchesOnDevice(device, box, spec, 4, nullptr);
    ASSERT_TRUE(other.ok());
    EXPECT_GT(*other, NumElements(box) / 2);
    cudaFree(device);
  }
}

TEST_F(PatternKernelsTest, LargeTileUsesTheGridStrideLoop) {
  const TensorSpec spec{{4096, 8192}, DType::kFloat32};  // 128 MiB
  const Box box = spec.full_box();
  void* device = nullptr;
  const size_t bytes = spec.num_bytes();
  ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
  ASSERT_TRUE(FillBoxOnDevice(device, box, spec, 0, nullptr).ok());
  auto mismatches = CountMismatchesOnDevice(device, box, spec, 0, nullptr);
  ASSERT_TRUE(mismatches.ok()) << mismatches.status();
  EXPECT_EQ(*mismatches, 0);
  // Spot-check the last element against the host pattern.
  uint32_t last = 0;
  ASSERT_EQ(cudaMemcpy(&last, static_cast<uint8_t*>(device) + bytes - 4, 4,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(last, PatternBits(DType::kFloat32, spec.num_elements() - 1, 0));
  cudaFree(device);
}

}  // namespace
}  // namespace meshcast::worker::cuda
