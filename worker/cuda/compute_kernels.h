// CUDA kernels for the element arithmetic of the GPU backend: the combine
// step of reducing collectives and the elementwise compute ops, with the
// bits of worker/kernels/element_core.h (the host's rules, reduce.h and
// compute.h). Plain C++ and the CUDA runtime API, so nvcc compiles it
// without Abseil; worker/cuda/device_compute.h and device_collectives.h
// wrap it with absl::Status.
//
//   LaunchReduceInto(PatternType::kFloat32, /*max=*/false, in, inout, n, s);
//   LaunchAdd(PatternType::kBFloat16, a, b, out, n, s);
//   LaunchScale(PatternType::kInt32, 0.5, in, out, n, s);
//
// Contract: n elements of PatternTypeSize(type) bytes each, device memory of
// the stream's GPU (or peer memory it can reach). `inout` and `in` must not
// overlap; `out` may alias an input exactly. Launches are asynchronous on
// `stream` and return the launch error (cudaErrorInvalidValue for n < 0).
// Thread safety: as the CUDA runtime.
#ifndef MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_
#define MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/pattern_core.h"

namespace meshcast::worker::cuda {

// inout[i] = ReduceBits(type, max, inout[i], in[i]).
cudaError_t LaunchReduceInto(PatternType type, bool max, const void* in,
                             void* inout, int64_t n, cudaStream_t stream);

// out[i] = AddBits(type, a[i], b[i]).
cudaError_t LaunchAdd(PatternType type, const void* a, const void* b,
                      void* out, int64_t n, cudaStream_t stream);

// out[i] = ScaleBits(type, alpha, in[i]).
cudaError_t LaunchScale(PatternType type, double alpha, const void* in,
                        void* out, int64_t n, cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_
