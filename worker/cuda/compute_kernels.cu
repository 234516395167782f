#include "worker/cuda/compute_kernels.h"

#include "worker/cuda/kernel_launch.h"
#include "worker/kernels/element_core.h"

namespace meshcast::worker::cuda {
namespace {

template <PatternType kType, bool kMax>
__global__ void ReduceKernel(const WordT<kType>* in, WordT<kType>* inout,
                             int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    inout[i] = static_cast<WordT<kType>>(ReduceBits(kType, kMax, inout[i],
                                                    in[i]));
  }
}

template <PatternType kType>
__global__ void AddKernel(const WordT<kType>* a, const WordT<kType>* b,
                          WordT<kType>* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    out[i] = static_cast<WordT<kType>>(AddBits(kType, a[i], b[i]));
  }
}

template <PatternType kType>
__global__ void ScaleKernel(double alpha, const WordT<kType>* in,
                            WordT<kType>* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    out[i] = static_cast<WordT<kType>>(ScaleBits(kType, alpha, in[i]));
  }
}

template <PatternType kType>
cudaError_t Reduce(bool max, const void* in, void* inout, int64_t n,
                   cudaStream_t stream) {
  using W = WordT<kType>;
  if (max) {
    ReduceKernel<kType, true><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
        static_cast<const W*>(in), static_cast<W*>(inout), n);
  } else {
    ReduceKernel<kType, false><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
        static_cast<const W*>(in), static_cast<W*>(inout), n);
  }
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Add(const void* a, const void* b, void* out, int64_t n,
                cudaStream_t stream) {
  using W = WordT<kType>;
  AddKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      static_cast<const W*>(a), static_cast<const W*>(b), static_cast<W*>(out),
      n);
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Scale(double alpha, const void* in, void* out, int64_t n,
                  cudaStream_t stream) {
  using W = WordT<kType>;
  ScaleKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      alpha, static_cast<const W*>(in), static_cast<W*>(out), n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchReduceInto(PatternType type, bool max, const void* in,
                             void* inout, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_REDUCE(t) Reduce<t>(max, in, inout, n, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_REDUCE);
#undef MESHCAST_REDUCE
}

cudaError_t LaunchAdd(PatternType type, const void* a, const void* b,
                      void* out, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_ADD(t) Add<t>(a, b, out, n, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_ADD);
#undef MESHCAST_ADD
}

cudaError_t LaunchScale(PatternType type, double alpha, const void* in,
                        void* out, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_SCALE(t) Scale<t>(alpha, in, out, n, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_SCALE);
#undef MESHCAST_SCALE
}


}  // namespace meshcast::worker::cuda
