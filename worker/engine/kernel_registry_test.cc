#include "worker/engine/kernel_registry.h"

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

absl::Status Nothing(const StepDesc&, const StepEnvironment&) {
  return absl::OkStatus();
}

TEST(KernelRegistryTest, FindsWhatWasRegisteredPerOpAndBackend) {
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(v1::Step::OP_ALL_REDUCE, "cpu", Nothing).ok());
  EXPECT_TRUE(registry.Find(v1::Step::OP_ALL_REDUCE, "cpu").ok());
  absl::StatusOr<const StepKernel*> other_backend =
      registry.Find(v1::Step::OP_ALL_REDUCE, "gpu");
  EXPECT_EQ(other_backend.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(other_backend.status().message().find("OP_ALL_REDUCE"),
            std::string::npos);
  EXPECT_NE(other_backend.status().message().find("\"gpu\""),
            std::string::npos);
}

TEST(KernelRegistryTest, RejectsATwiceRegisteredPair) {
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(v1::Step::OP_COMPUTE, "cpu", Nothing).ok());
  EXPECT_EQ(registry.Register(v1::Step::OP_COMPUTE, "cpu", Nothing).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register(v1::Step::OP_COMPUTE, "cpu", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelRegistryTest, TheCpuBackendHasEveryOpOfTheIr) {
  for (int op = v1::Step::Op_MIN; op <= v1::Step::Op_MAX; ++op) {
    if (op == v1::Step::OP_UNSPECIFIED || !v1::Step::Op_IsValid(op)) continue;
    SCOPED_TRACE(v1::Step::Op_Name(static_cast<v1::Step::Op>(op)));
    EXPECT_TRUE(
        CpuKernels().Find(static_cast<v1::Step::Op>(op), kCpuBackend).ok());
  }
  EXPECT_EQ(
      CpuKernels().Find(v1::Step::OP_UNSPECIFIED, kCpuBackend).status().code(),
      absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace meshcast::worker
