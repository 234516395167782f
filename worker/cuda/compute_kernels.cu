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

template <PatternType kType, bool kSigmoid>
__global__ void ActivationKernel(const WordT<kType>* in, WordT<kType>* out,
                                 int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    out[i] = static_cast<WordT<kType>>(kSigmoid ? SigmoidBits(kType, in[i])
                                                : ReluBits(kType, in[i]));
  }
}

template <PatternType kType, bool kSigmoid>
__global__ void ActivationGradKernel(const WordT<kType>* grad,
                                     const WordT<kType>* y, WordT<kType>* out,
                                     int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    out[i] = static_cast<WordT<kType>>(
        kSigmoid ? SigmoidGradBits(kType, grad[i], y[i])
                 : ReluGradBits(kType, grad[i], y[i]));
  }
}

// One D element per iteration, its row summed in column order; see
// LaunchRowDot.
template <PatternType kType>
__global__ void RowDotKernel(const WordT<kType>* a, const WordT<kType>* b,
                             const int64_t* index, int64_t row, int64_t n,
                             WordT<kType>* d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const int64_t ra = index[2 * i], rb = index[2 * i + 1];
    double acc = 0;
    if (ra >= 0 && rb >= 0) {
      const WordT<kType>* from_a = a + ra * row;
      const WordT<kType>* from_b = b + rb * row;
      for (int64_t c = 0; c < row; ++c) {
        acc = GatherMulAdd(kType, acc, CoreFloatValue(kType, from_a[c]),
                           CoreFloatValue(kType, from_b[c]));
      }
    }
    d[i] = static_cast<WordT<kType>>(CoreFloatStoreBits(kType, acc));
  }
}

// One output element (i, c) per iteration; see LaunchGather.
template <PatternType kType>
__global__ void GatherKernel(const WordT<kType>* x, const WordT<kType>* w,
                             const int64_t* index, int64_t row, int64_t k,
                             int64_t n, WordT<kType>* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < n; e += stride) {
    const int64_t i = e / row, c = e % row;
    if (!CoreIsFloatType(kType)) {
      uint64_t sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t source = index[i * k + j];
        if (source < 0) continue;
        sum +=
            static_cast<uint64_t>(CoreIntegerValue(kType, x[source * row + c]));
      }
      y[e] = static_cast<WordT<kType>>(
          CoreIntegerBits(kType, static_cast<int64_t>(sum)));
      continue;
    }
    double acc = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t source = index[i * k + j];
      if (source < 0) continue;
      const double weight =
          w == nullptr ? 1.0 : CoreFloatValue(kType, w[i * k + j]);
      acc = GatherMulAdd(kType, acc, weight,
                         CoreFloatValue(kType, x[source * row + c]));
    }
    y[e] = static_cast<WordT<kType>>(CoreFloatStoreBits(kType, acc));
  }
}

template <PatternType kType, bool kSigmoid>
cudaError_t Activation(const void* in, void* out, int64_t n,
                       cudaStream_t stream) {
  using W = WordT<kType>;
  ActivationKernel<kType, kSigmoid>
      <<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
          static_cast<const W*>(in), static_cast<W*>(out), n);
  return cudaGetLastError();
}

template <bool kSigmoid>
cudaError_t LaunchActivation(PatternType type, const void* in, void* out,
                             int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case PatternType::kFloat16:
      return Activation<PatternType::kFloat16, kSigmoid>(in, out, n, stream);
    case PatternType::kBFloat16:
      return Activation<PatternType::kBFloat16, kSigmoid>(in, out, n, stream);
    case PatternType::kFloat32:
      return Activation<PatternType::kFloat32, kSigmoid>(in, out, n, stream);
    case PatternType::kFloat64:
      return Activation<PatternType::kFloat64, kSigmoid>(in, out, n, stream);
    default:
      return cudaErrorInvalidValue;  // RELU / SIGMOID take floats only
  }
}

template <PatternType kType, bool kSigmoid>
cudaError_t ActivationGrad(const void* grad, const void* y, void* out,
                           int64_t n, cudaStream_t stream) {
  using W = WordT<kType>;
  ActivationGradKernel<kType, kSigmoid>
      <<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
          static_cast<const W*>(grad), static_cast<const W*>(y),
          static_cast<W*>(out), n);
  return cudaGetLastError();
}

template <bool kSigmoid>
cudaError_t LaunchActivationGrad(PatternType type, const void* grad,
                                 const void* y, void* out, int64_t n,
                                 cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case PatternType::kFloat16:
      return ActivationGrad<PatternType::kFloat16, kSigmoid>(grad, y, out, n,
                                                             stream);
    case PatternType::kBFloat16:
      return ActivationGrad<PatternType::kBFloat16, kSigmoid>(grad, y, out, n,
                                                              stream);
    case PatternType::kFloat32:
      return ActivationGrad<PatternType::kFloat32, kSigmoid>(grad, y, out, n,
                                                             stream);
    case PatternType::kFloat64:
      return ActivationGrad<PatternType::kFloat64, kSigmoid>(grad, y, out, n,
                                                             stream);
    default:
      return cudaErrorInvalidValue;  // the gradients take floats only
  }
}

template <PatternType kType>
cudaError_t RowDot(const void* a, const void* b, const int64_t* index,
                   int64_t row, int64_t n, void* d, cudaStream_t stream) {
  using W = WordT<kType>;
  RowDotKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      static_cast<const W*>(a), static_cast<const W*>(b), index, row, n,
      static_cast<W*>(d));
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Gather(const void* x, const void* w, const int64_t* index,
                   int64_t row, int64_t k, int64_t n, void* y,
                   cudaStream_t stream) {
  using W = WordT<kType>;
  if (w != nullptr && !CoreIsFloatType(kType)) return cudaErrorInvalidValue;
  GatherKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      static_cast<const W*>(x), static_cast<const W*>(w), index, row, k, n,
      static_cast<W*>(y));
  return cudaGetLastError();
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

cudaError_t LaunchRelu(PatternType type, const void* in, void* out, int64_t n,
                       cudaStream_t stream) {
  return LaunchActivation<false>(type, in, out, n, stream);
}

cudaError_t LaunchSigmoid(PatternType type, const void* in, void* out,
                          int64_t n, cudaStream_t stream) {
  return LaunchActivation<true>(type, in, out, n, stream);
}

cudaError_t LaunchReluGrad(PatternType type, const void* grad, const void* y,
                           void* out, int64_t n, cudaStream_t stream) {
  return LaunchActivationGrad<false>(type, grad, y, out, n, stream);
}

cudaError_t LaunchSigmoidGrad(PatternType type, const void* grad, const void* y,
                              void* out, int64_t n, cudaStream_t stream) {
  return LaunchActivationGrad<true>(type, grad, y, out, n, stream);
}

cudaError_t LaunchRowDot(PatternType type, const void* a, const void* b,
                         const int64_t* index, int64_t row, int64_t n, void* d,
                         cudaStream_t stream) {
  if (row < 1 || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case PatternType::kFloat16:
      return RowDot<PatternType::kFloat16>(a, b, index, row, n, d, stream);
    case PatternType::kBFloat16:
      return RowDot<PatternType::kBFloat16>(a, b, index, row, n, d, stream);
    case PatternType::kFloat32:
      return RowDot<PatternType::kFloat32>(a, b, index, row, n, d, stream);
    case PatternType::kFloat64:
      return RowDot<PatternType::kFloat64>(a, b, index, row, n, d, stream);
    default:
      return cudaErrorInvalidValue;  // a row dot takes floats only
  }
}

cudaError_t LaunchGather(PatternType type, const void* x, const void* w,
                         const int64_t* index, int64_t row, int64_t k,
                         int64_t rows_y, void* y, cudaStream_t stream) {
  if (row < 1 || k < 1 || rows_y < 0) return cudaErrorInvalidValue;
  const int64_t n = rows_y * row;
  if (n == 0) return cudaSuccess;
#define MESHCAST_GATHER(t) Gather<t>(x, w, index, row, k, n, y, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_GATHER);
#undef MESHCAST_GATHER
}

}  // namespace meshcast::worker::cuda
