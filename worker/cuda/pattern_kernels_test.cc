#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/mismatch_report.h"
#include "worker/pattern.h"
#include "worker/program.h"

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

// Flips bits in the first byte of element `element` of a device tile.
void CorruptOnDevice(void* device, int64_t element, int element_size) {
  uint8_t* at = static_cast<uint8_t*>(device) + element * element_size;
  uint8_t byte = 0;
  ASSERT_EQ(cudaMemcpy(&byte, at, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  byte ^= 0x5A;
  ASSERT_EQ(cudaMemcpy(at, &byte, 1, cudaMemcpyHostToDevice), cudaSuccess);
}

// The device fill equals the host FillBox byte for byte, and the device
// verify counts exactly the corrupted elements and finds the first.
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

    auto clean = VerifyBoxOnDevice(device, box, spec, 3, nullptr);
    ASSERT_TRUE(clean.ok()) << clean.status();
    EXPECT_EQ(clean->mismatches, 0);
    EXPECT_EQ(clean->first_mismatch_element, -1);

    // Corrupt three elements.
    for (size_t element :
         {size_t{0}, size_t{17}, bytes / DTypeSize(dtype) - 1}) {
      filled[element * DTypeSize(dtype)] ^= 0x5A;
    }
    ASSERT_EQ(cudaMemcpy(device, filled.data(), bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
    auto corrupted = VerifyBoxOnDevice(device, box, spec, 3, nullptr);
    ASSERT_TRUE(corrupted.ok()) << corrupted.status();
    EXPECT_EQ(corrupted->mismatches, 3);
    EXPECT_EQ(corrupted->first_mismatch_element, 0);
    // The wrong tensor index mismatches (nearly) everywhere.
    auto other = VerifyBoxOnDevice(device, box, spec, 4, nullptr);
    ASSERT_TRUE(other.ok());
    EXPECT_GT(other->mismatches, NumElements(box) / 2);
    cudaFree(device);
  }
}

// Mismatches planted far apart (in different blocks, in no particular
// order): the kernel reports the lowest, and it is the element the host
// verifier reports first, described identically.
TEST_F(PatternKernelsTest, FirstMismatchIsTheLowestOfSeveral) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const TensorSpec spec{{300, 257, 3}, dtype};
    const Box box = {{10, 290}, {5, 250}, {0, 3}};
    const int64_t elements = NumElements(box);
    const int size = DTypeSize(dtype);
    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, elements * size), cudaSuccess);
    ASSERT_TRUE(FillBoxOnDevice(device, box, spec, 1, nullptr).ok());
    const std::vector<int64_t> planted = {elements - 1, elements / 2, 70001,
                                          5003, 140002};
    for (int64_t element : planted) CorruptOnDevice(device, element, size);

    auto verified = VerifyBoxOnDevice(device, box, spec, 1, nullptr);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->mismatches, static_cast<int64_t>(planted.size()));
    EXPECT_EQ(verified->first_mismatch_element,
              *std::min_element(planted.begin(), planted.end()));

    // Host reference: the whole tile through the CPU verifier.
    std::vector<uint8_t> host(elements * size);
    ASSERT_EQ(
        cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    auto reference = VerifyBox(host, box, spec, 1);
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_EQ(reference->mismatches, verified->mismatches);
    ASSERT_GE(verified->first_mismatch_element, 0);
    auto first =
        LocateTileElement(box, spec, 1, verified->first_mismatch_element,
                          absl::MakeConstSpan(host).subspan(
                              verified->first_mismatch_element * size, size));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->global_index, reference->first_mismatch_index);
    EXPECT_EQ(MismatchBitsText(first->expected_bits, first->found_bits),
              reference->first_mismatch);
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
  auto clean = VerifyBoxOnDevice(device, box, spec, 0, nullptr);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(clean->mismatches, 0);
  EXPECT_EQ(clean->first_mismatch_element, -1);
  // Spot-check the last element against the host pattern.
  uint32_t last = 0;
  ASSERT_EQ(cudaMemcpy(&last, static_cast<uint8_t*>(device) + bytes - 4, 4,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(last, PatternBits(DType::kFloat32, spec.num_elements() - 1, 0));

  // The kernels' grid is 65535 blocks of 256 threads here, so one thread
  // checks elements 7 and 7 + kGrid: it must report the lower of its two.
  const int64_t kGrid = int64_t{65535} * 256;
  ASSERT_LT(7 + kGrid, spec.num_elements());
  for (int64_t element : {7 + kGrid, int64_t{7}, spec.num_elements() - 1}) {
    CorruptOnDevice(device, element, 4);
  }
  auto corrupted = VerifyBoxOnDevice(device, box, spec, 0, nullptr);
  ASSERT_TRUE(corrupted.ok()) << corrupted.status();
  EXPECT_EQ(corrupted->mismatches, 3);
  EXPECT_EQ(corrupted->first_mismatch_element, 7);
  cudaFree(device);
}

// DeviceBufferSet and BufferSet report the same mismatches in the same
// words when the same elements are corrupted.
TEST_F(PatternKernelsTest, DeviceVerificationWordsMismatchesAsTheCpu) {
  for (DType dtype : {DType::kInt8, DType::kFloat16, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    ParsedProgram program;
    program.tensors = {TensorSpec{{40, 33}, dtype}};
    program.local_devices = {0, 1};
    const Box tile_box = {{5, 37}, {3, 30}};  // pre-copied on device 0
    program.buffers = {
        {0, 0, 0, program.tensors[0].full_box(), BufferRole::kSource},
        {1, 0, 0, tile_box, BufferRole::kDestination},
        // No source on device 1: all poison, reported after device 0.
        {2, 0, 1, {{0, 2}, {0, 33}}, BufferRole::kDestination},
    };
    Cancellation cancellation;
    auto host = BufferSet::Create(program, cancellation, 1);
    ASSERT_TRUE(host.ok()) << host.status();
    auto device =
        DeviceBufferSet::Create(program, {{0, 0}, {1, 0}}, cancellation);
    ASSERT_TRUE(device.ok()) << device.status();
    const int size = DTypeSize(dtype);
    TileBuffer* host_tile = host->Find(0, 0, BufferRole::kDestination);
    DeviceTile* device_tile = device->Find(0, 0, BufferRole::kDestination);
    ASSERT_NE(host_tile, nullptr);
    ASSERT_NE(device_tile, nullptr);
    for (int64_t element : {int64_t{600}, int64_t{95}, int64_t{411}}) {
      host_tile->bytes()[element * size] ^= 0x5A;
      CorruptOnDevice(device_tile->data(), element, size);
    }
    auto want = host->VerifyDestinations(1);
    auto got = device->VerifyDestinations();
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->elements, want->elements);
    EXPECT_EQ(got->mismatches, want->mismatches);
    EXPECT_GT(got->mismatches, 3 + 2 * 33 / 2);  // device 1's poison too
    EXPECT_EQ(got->first_mismatch, want->first_mismatch);
    EXPECT_NE(got->first_mismatch.find("3 mismatches in tile"),
              std::string::npos)
        << got->first_mismatch;
  }
}

}  // namespace
}  // namespace meshcast::worker::cuda
