#include "worker/engine/kernel_registry.h"

#include "absl/strings/str_cat.h"

namespace meshcast::worker {

absl::Status KernelRegistry::Register(v1::Step::Op op,
                                      absl::string_view backend,
                                      StepKernel kernel) {
  if (!kernel) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel of ", v1::Step::Op_Name(op), " on backend \"",
                     backend, "\" is empty"));
  }
  auto [it, inserted] = kernels_.try_emplace(
      std::make_pair(static_cast<int>(op), std::string(backend)),
      std::move(kernel));
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("a kernel of ", v1::Step::Op_Name(op), " on backend \"",
                     backend, "\" is registered already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const StepKernel*> KernelRegistry::Find(
    v1::Step::Op op, absl::string_view backend) const {
  auto it =
      kernels_.find(std::make_pair(static_cast<int>(op), std::string(backend)));
  if (it == kernels_.end()) {
    const std::string name = v1::Step::Op_IsValid(op)
                                 ? v1::Step::Op_Name(op)
                                 : absl::StrCat(static_cast<int>(op));
    return absl::UnimplementedError(absl::StrCat(
        "op ", name, " has no kernel on backend \"", backend, "\""));
  }
  return &it->second;
}

}  // namespace meshcast::worker
