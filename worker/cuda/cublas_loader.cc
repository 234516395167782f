#include "worker/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>
#include <string>

#include "absl/strings/str_cat.h"

namespace meshcast::worker::cuda {
namespace {

// The cuBLAS of the CUDA toolkit the worker was built with (CUDA 13).
constexpr char kLibrary[] = "libcublas.so.13";

// cublas_v2.h maps several API names to versioned symbols (cublasCreate ->
// cublasCreate_v2); dlsym needs the symbol names.
absl::StatusOr<CublasApi> Load() {
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kLibrary, " (cuBLAS, for GEMM steps): ",
                     error != nullptr ? error : "unknown error"));
  }
  CublasApi api;
  absl::Status status;
  const auto resolve = [&](auto& function, const char* symbol) {
    if (!status.ok()) return;
    void* address = dlsym(library, symbol);
    if (address == nullptr) {
      status = absl::FailedPreconditionError(
          absl::StrCat(kLibrary, " has no ", symbol));
      return;
    }
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
        address);
  };
  resolve(api.create, "cublasCreate_v2");
  resolve(api.destroy, "cublasDestroy_v2");
  resolve(api.set_stream, "cublasSetStream_v2");
  resolve(api.gemm_ex, "cublasGemmEx");
  resolve(api.status_string, "cublasGetStatusString");
  if (!status.ok()) return status;
  // The library stays loaded for the life of the process.
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> LoadCublas() {
  static std::once_flag once;
  static absl::StatusOr<CublasApi>* loaded = nullptr;
  std::call_once(once, [] { loaded = new absl::StatusOr<CublasApi>(Load()); });
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace meshcast::worker::cuda
