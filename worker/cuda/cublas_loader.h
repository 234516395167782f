// CublasApi: cuBLAS, loaded on first use rather than linked.
//
// Linking cuBLAS makes the loader map libcublasLt at start-up, and its
// ~94 KiB of static thread-local storage is then carved out of every
// thread's stack. Threads created with small fixed stacks cannot start: the
// worker's metrics server (civetweb, built with a fixed thread stack size)
// failed to start in every worker, GPU or not. Loaded with dlopen, cuBLAS's
// thread-local storage is dynamic (allocated per thread on first use), so
// nothing changes for threads that never call it.
//
//   ASSIGN_OR_RETURN(const CublasApi* blas, LoadCublas());
//   cublasHandle_t handle;
//   blas->create(&handle);
//
// Errors: FAILED_PRECONDITION naming the library and dlerror() when
// libcublas.so.13 or one of its functions cannot be loaded.
// Thread safety: LoadCublas may be called from any thread; it loads once.
#ifndef MESHCAST_WORKER_CUDA_CUBLAS_LOADER_H_
#define MESHCAST_WORKER_CUDA_CUBLAS_LOADER_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace meshcast::worker::cuda {

struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  // cublasGemmEx (32-bit sizes); spelled out, C++ sees two overloads.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t,
                            cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

absl::StatusOr<const CublasApi*> LoadCublas();

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_CUBLAS_LOADER_H_
