#include "controller/memory_check.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void AddBuffer(v1::Plan& plan, int tensor, int device,
               std::vector<std::pair<int64_t, int64_t>> box,
               v1::Buffer::Role role) {
  v1::Buffer* buffer = plan.add_buffers();
  buffer->set_id(plan.buffers_size() - 1);
  buffer->set_tensor(tensor);
  buffer->set_device(device);
  for (auto [begin, end] : box) {
    v1::Interval* interval = buffer->add_box();
    interval->set_begin(begin);
    interval->set_end(end);
  }
  buffer->set_role(role);
}

// 3 hosts x 2 devices; a 4x6 int32 tensor (96 B) split by rows over hosts
// 0-1 (S0R on a 2x2 mesh: each device holds its host's 48 B half, so 96 B
// per host), replicated onto host 2 (RR: 96 B on each of its 2 devices).
v1::Plan RowsToReplicas() {
  v1::Plan plan;
  v1::TensorSpec* tensor = plan.add_tensors();
  tensor->add_shape(4);
  tensor->add_shape(6);
  tensor->set_dtype(v1::DTYPE_INT32);
  AddBuffer(plan, 0, 0, {{0, 2}, {0, 6}}, v1::Buffer::ROLE_SOURCE);
  AddBuffer(plan, 0, 1, {{0, 2}, {0, 6}}, v1::Buffer::ROLE_SOURCE);
  AddBuffer(plan, 0, 2, {{2, 4}, {0, 6}}, v1::Buffer::ROLE_SOURCE);
  AddBuffer(plan, 0, 3, {{2, 4}, {0, 6}}, v1::Buffer::ROLE_SOURCE);
  AddBuffer(plan, 0, 4, {{0, 4}, {0, 6}}, v1::Buffer::ROLE_DESTINATION);
  AddBuffer(plan, 0, 5, {{0, 4}, {0, 6}}, v1::Buffer::ROLE_DESTINATION);
  return plan;
}

Topology ThreeHosts() {
  Topology topology;
  topology.num_hosts = 3;
  topology.devices_per_host = 2;
  return topology;
}

WorkerRecord Worker(const std::string& name, int host, int64_t memory) {
  WorkerRecord record;
  record.name = name;
  record.host_index = host;
  record.num_devices = 2;
  record.memory_bytes = memory;
  return record;
}

TEST(MemoryCheckTest, BufferBytesPerHostCountsEveryBuffer) {
  EXPECT_THAT(BufferBytesPerHost(RowsToReplicas(), ThreeHosts()),
              ElementsAre(96, 96, 192));
  // A device holding a source and a destination buffer holds both.
  v1::Plan same = RowsToReplicas();
  same.mutable_buffers(4)->set_device(0);
  same.mutable_buffers(5)->set_device(1);
  EXPECT_THAT(BufferBytesPerHost(same, ThreeHosts()),
              ElementsAre(96 + 192, 96, 0));
  // Scratch buffers and other dtypes count too: a float64 2x2 scratch.
  v1::Plan scratch = RowsToReplicas();
  v1::TensorSpec* wide = scratch.add_tensors();
  wide->add_shape(2);
  wide->add_shape(2);
  wide->set_dtype(v1::DTYPE_FLOAT64);
  AddBuffer(scratch, 1, 2, {{0, 2}, {0, 2}}, v1::Buffer::ROLE_SCRATCH);
  EXPECT_THAT(BufferBytesPerHost(scratch, ThreeHosts()),
              ElementsAre(96, 96 + 32, 192));
}

TEST(MemoryCheckTest, RefusesTheFirstWorkerThatCannotHoldItsBuffers) {
  const std::vector<WorkerRecord> roomy = {
      Worker("w0", 0, 96), Worker("w1", 1, 1 << 20), Worker("w2", 2, 192)};
  EXPECT_TRUE(
      CheckBuffersFitWorkers(RowsToReplicas(), ThreeHosts(), roomy).ok());

  std::vector<WorkerRecord> tight = roomy;
  tight[2].memory_bytes = 191;
  const absl::Status status =
      CheckBuffersFitWorkers(RowsToReplicas(), ThreeHosts(), tight);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("the job's tiles need 192 B on worker w2 (host 2), "
                        "which reported 191 B of memory"));
}

TEST(MemoryCheckTest, WorkersThatReportNoMemoryAreNotChecked) {
  const std::vector<WorkerRecord> unknown = {
      Worker("w0", 0, 0), Worker("w1", 1, 0), Worker("w2", 2, 0)};
  EXPECT_TRUE(
      CheckBuffersFitWorkers(RowsToReplicas(), ThreeHosts(), unknown).ok());
}

}  // namespace
}  // namespace meshcast
