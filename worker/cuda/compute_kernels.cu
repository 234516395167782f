#include "worker/cuda/compute_kernels.h"

#include <algorithm>

#include "worker/kernels/element_core.h"

namespace meshcast::worker::cuda {
namespace {

template <int kSize>
struct Word;
template <>
struct Word<1> {
  using Type = uint8_t;
};
template <>
struct Word<2> {
  using Type = uint16_t;
};
template <>
struct Word<4> {
  using Type = uint32_t;
};
template <>
struct Word<8> {
  using Type = unsigned long long;
};

template <PatternType kType>
using WordT = typename Word<PatternTypeSize(kType)>::Type;

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t needed = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::clamp<int64_t>(needed, 1, 65535));
}

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
    ReduceKernel<kType, true><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<const W*>(in), static_cast<W*>(inout), n);
  } else {
    ReduceKernel<kType, false><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<const W*>(in), static_cast<W*>(inout), n);
  }
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Add(const void* a, const void* b, void* out, int64_t n,
                cudaStream_t stream) {
  using W = WordT<kType>;
  AddKernel<kType><<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<const W*>(a), static_cast<const W*>(b), static_cast<W*>(out),
      n);
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Scale(double alpha, const void* in, void* out, int64_t n,
                  cudaStream_t stream) {
  using W = WordT<kType>;
  ScaleKernel<kType><<<Blocks(n), kThreads, 0, stream>>>(
      alpha, static_cast<const W*>(in), static_cast<W*>(out), n);
  return cudaGetLastError();
}

}  // namespace

#define MESHCAST_DISPATCH(type, CALL)     \
  switch (type) {                         \
    case PatternType::kInt8:              \
      return CALL(PatternType::kInt8);    \
    case PatternType::kUInt8:             \
      return CALL(PatternType::kUInt8);   \
    case PatternType::kInt32:             \
      return CALL(PatternType::kInt32);   \
    case PatternType::kInt64:             \
      return CALL(PatternType::kInt64);   \
    case PatternType::kFloat16:           \
      return CALL(PatternType::kFloat16); \
    case PatternType::kBFloat16:          \
      return CALL(PatternType::kBFloat16);\
    case PatternType::kFloat32:           \
      return CALL(PatternType::kFloat32); \
    case PatternType::kFloat64:           \
      return CALL(PatternType::kFloat64); \
  }                                       \
  return cudaErrorInvalidValue

cudaError_t LaunchReduceInto(PatternType type, bool max, const void* in,
                             void* inout, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_REDUCE(t) Reduce<t>(max, in, inout, n, stream)
  MESHCAST_DISPATCH(type, MESHCAST_REDUCE);
#undef MESHCAST_REDUCE
}

cudaError_t LaunchAdd(PatternType type, const void* a, const void* b,
                      void* out, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_ADD(t) Add<t>(a, b, out, n, stream)
  MESHCAST_DISPATCH(type, MESHCAST_ADD);
#undef MESHCAST_ADD
}

cudaError_t LaunchScale(PatternType type, double alpha, const void* in,
                        void* out, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
#define MESHCAST_SCALE(t) Scale<t>(alpha, in, out, n, stream)
  MESHCAST_DISPATCH(type, MESHCAST_SCALE);
#undef MESHCAST_SCALE
}

#undef MESHCAST_DISPATCH

}  // namespace meshcast::worker::cuda
