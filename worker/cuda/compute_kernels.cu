#include <cuda_fp16.h>
#include <math_constants.h>

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

// Attention (LaunchAttentionBlock, LaunchAttentionFinish,
// LaunchAttentionBackward).
constexpr int kAttentionThreads = 128;  // a power of two (the reductions)
constexpr int kAttentionChunk = 256;    // keys per chunk: the host's
constexpr int64_t kAttentionMaxBlocks = 4096;

// The accumulator of a float dtype: float for fp16 / bf16, double for
// float32 / float64 (the host's, attention.h).
template <PatternType kType>
struct AttentionAcc {
  using T = double;
};
template <>
struct AttentionAcc<PatternType::kFloat16> {
  using T = float;
};
template <>
struct AttentionAcc<PatternType::kBFloat16> {
  using T = float;
};

__device__ inline float AttentionExp(float x) { return expf(x); }
__device__ inline double AttentionExp(double x) { return exp(x); }

template <typename T>
__device__ inline T AttentionNegInf() {
  return static_cast<T>(-CUDART_INF);
}

// A 16-bit or 32-bit float element as float, exactly: a shift or a
// conversion instruction (the generic double decoder, CoreFloatValue,
// costs more than the attention kernels' arithmetic).
template <PatternType kType>
__device__ inline float FloatOf(WordT<kType> bits) {
  if constexpr (kType == PatternType::kBFloat16) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  } else if constexpr (kType == PatternType::kFloat16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  } else {
    return __uint_as_float(static_cast<uint32_t>(bits));
  }
}

template <PatternType kType, typename T>
__device__ inline T AttentionValue(WordT<kType> bits) {
  if constexpr (kType == PatternType::kFloat64) {
    return static_cast<T>(CoreFloatValue(kType, bits));
  } else {
    return static_cast<T>(FloatOf<kType>(bits));  // exact, as the decoder
  }
}

template <PatternType kType, typename T>
__device__ inline WordT<kType> AttentionBits(T x) {
  return static_cast<WordT<kType>>(
      CoreFloatStoreBits(kType, static_cast<double>(x)));
}

// The maximum (kMax) or the sum of every thread's `x`, for all threads of
// the block (kAttentionThreads of them); `red` is shared memory of that
// many T. Synchronizes the block on entry and exit.
template <typename T, bool kMax>
__device__ T AttentionReduce(T x, T* red) {
  __syncthreads();
  red[threadIdx.x] = x;
  __syncthreads();
  for (int half = kAttentionThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const T a = red[threadIdx.x], b = red[threadIdx.x + half];
      red[threadIdx.x] = kMax ? (b > a ? b : a) : a + b;
    }
    __syncthreads();
  }
  const T r = red[0];
  __syncthreads();
  return r;
}

// One query row per thread block (grid-stride); see LaunchAttentionBlock.
template <PatternType kType>
__global__ void AttentionBlockKernel(AttentionBlockShape sh,
                                     const WordT<kType>* q,
                                     const WordT<kType>* k,
                                     const WordT<kType>* v,
                                     const WordT<kType>* s_in,
                                     WordT<kType>* s_out, const int64_t* q_pos,
                                     const int64_t* kv_pos,
                                     typename AttentionAcc<kType>::T* scratch) {
  using T = typename AttentionAcc<kType>::T;
  using W = WordT<kType>;
  __shared__ T p[kAttentionChunk];
  __shared__ T red[kAttentionThreads];
  const int64_t d = sh.head_dim, width = d + 2;
  const int64_t rows = sh.batch * sh.heads * sh.q_rows;
  const int64_t group = sh.heads / sh.kv_heads;
  const T alpha = static_cast<T>(sh.scale);
  const T neg_inf = AttentionNegInf<T>();
  const int tid = threadIdx.x;
  T* acc = scratch + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % sh.q_rows;
    const int64_t h = (row / sh.q_rows) % sh.heads;
    const int64_t b = row / (sh.q_rows * sh.heads);
    const int64_t kv_offset = (b * sh.kv_heads + h / group) * sh.kv_rows * d;
    const W* qrow = q + row * d;
    const W* in = s_in == nullptr ? nullptr : s_in + row * width;
    W* out = s_out + row * width;
    for (int64_t c = tid; c < d; c += kAttentionThreads) {
      acc[c] = in == nullptr ? T(0) : AttentionValue<kType, T>(in[c]);
    }
    T m = in == nullptr ? neg_inf : AttentionValue<kType, T>(in[d]);
    T l = in == nullptr ? T(0) : AttentionValue<kType, T>(in[d + 1]);
    bool any = false;
    const int64_t qp = sh.causal ? q_pos[i] : 0;
    for (int64_t j0 = 0; j0 < sh.kv_rows; j0 += kAttentionChunk) {
      const int cols = static_cast<int>(
          sh.kv_rows - j0 < kAttentionChunk ? sh.kv_rows - j0
                                            : kAttentionChunk);
      T local = neg_inf;
      for (int jj = tid; jj < cols; jj += kAttentionThreads) {
        T score = neg_inf;
        if (!sh.causal || kv_pos[j0 + jj] <= qp) {
          const W* krow = k + kv_offset + (j0 + jj) * d;
          T dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += AttentionValue<kType, T>(qrow[c]) *
                   AttentionValue<kType, T>(krow[c]);
          }
          score = alpha * dot;
        }
        p[jj] = score;
        local = score > local ? score : local;
      }
      const T mx = AttentionReduce<T, true>(local, red);
      if (mx == neg_inf) continue;  // every key of the chunk masked
      any = true;
      const T m_new = AttentionValue<kType, T>(
          AttentionBits<kType, T>(mx > m ? mx : m));  // rounded to the dtype
      const T f = m == neg_inf ? T(0) : AttentionExp(m - m_new);
      T part = 0;
      for (int jj = tid; jj < cols; jj += kAttentionThreads) {
        const T e = AttentionExp(p[jj] - m_new);  // masked: exp(-inf) = 0
        p[jj] = e;
        part += e;
      }
      const T sum = AttentionReduce<T, false>(part, red);
      l = l * f + sum;
      for (int64_t c = tid; c < d; c += kAttentionThreads) {
        T a = acc[c] * f;
        const W* vcol = v + kv_offset + j0 * d + c;
        for (int jj = 0; jj < cols; ++jj) {
          a += p[jj] * AttentionValue<kType, T>(vcol[jj * d]);
        }
        acc[c] = a;
      }
      m = m_new;
      __syncthreads();  // p is read above before the next chunk writes it
    }
    if (any) {
      for (int64_t c = tid; c < d; c += kAttentionThreads) {
        out[c] = AttentionBits<kType, T>(acc[c]);
      }
      if (tid == 0) {
        out[d] = AttentionBits<kType, T>(m);
        out[d + 1] = AttentionBits<kType, T>(l);
      }
    } else if (in != nullptr) {
      if (in != out) {
        for (int64_t c = tid; c < width; c += kAttentionThreads) out[c] = in[c];
      }
    } else {
      for (int64_t c = tid; c < d; c += kAttentionThreads) out[c] = 0;
      if (tid == 0) {
        out[d] = AttentionBits<kType, T>(neg_inf);
        out[d + 1] = 0;
      }
    }
    __syncthreads();
  }
}

template <PatternType kType>
__global__ void AttentionFinishKernel(const WordT<kType>* state,
                                      WordT<kType>* out, int64_t d, int64_t n) {
  using T = typename AttentionAcc<kType>::T;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < n; e += stride) {
    const int64_t row = e / d, c = e % d;
    const WordT<kType>* s = state + row * (d + 2);
    const T l = AttentionValue<kType, T>(s[d + 1]);
    out[e] = l == T(0) ? WordT<kType>(0)
                       : AttentionBits<kType, T>(
                             AttentionValue<kType, T>(s[c]) / l);
  }
}

// D_i = dO_i . O_i in the accumulator type, summed in column order: one
// query row per iteration; see LaunchAttentionBackward.
template <PatternType kType>
__global__ void AttentionDeltaKernel(const WordT<kType>* dout,
                                     const WordT<kType>* o, int64_t d,
                                     int64_t rows,
                                     typename AttentionAcc<kType>::T* delta) {
  using T = typename AttentionAcc<kType>::T;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       r < rows; r += stride) {
    T sum = 0;
    for (int64_t c = 0; c < d; ++c) {
      sum += AttentionValue<kType, T>(dout[r * d + c]) *
             AttentionValue<kType, T>(o[r * d + c]);
    }
    delta[r] = sum;
  }
}

// dQ: one query row per thread block (grid-stride); see
// LaunchAttentionBackward. Each thread scores keys of a chunk and leaves
// their dS_ij in shared memory, then adds the chunk's sum_j dS_ij k_j to
// its columns of the row's accumulator (`scratch`, one head_dim row per
// thread block), in key order.
template <PatternType kType>
__global__ void AttentionBackwardDqKernel(
    AttentionBackwardShape sh, const WordT<kType>* q, const WordT<kType>* k,
    const WordT<kType>* v, const WordT<kType>* dout, const WordT<kType>* state,
    WordT<kType>* out, const int64_t* q_pos, const int64_t* kv_pos,
    const typename AttentionAcc<kType>::T* delta,
    typename AttentionAcc<kType>::T* scratch) {
  using T = typename AttentionAcc<kType>::T;
  using W = WordT<kType>;
  __shared__ T ds[kAttentionChunk];
  const AttentionBlockShape& a = sh.block;
  const int64_t d = a.head_dim, width = d + 2;
  const int64_t rows = a.batch * a.heads * a.q_rows;
  const int64_t group = a.heads / a.kv_heads;
  const T alpha = static_cast<T>(a.scale);
  const int tid = threadIdx.x;
  T* acc = scratch + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % a.q_rows;
    const int64_t h = (row / a.q_rows) % a.heads;
    const int64_t b = row / (a.q_rows * a.heads);
    const int64_t kv_offset = (b * a.kv_heads + h / group) * a.kv_rows * d;
    const W* qrow = q + row * d;
    const W* dorow = dout + row * d;
    const T m = AttentionValue<kType, T>(state[row * width + d]);
    const T l = AttentionValue<kType, T>(state[row * width + d + 1]);
    const T delta_i = delta[row];
    for (int64_t c = tid; c < d; c += kAttentionThreads) acc[c] = 0;
    // l == 0: the row saw no key and has no gradient (the same for every
    // thread of the block, so the barriers below stay uniform).
    const int64_t qp = a.causal ? q_pos[i] : 0;
    for (int64_t j0 = 0; l != T(0) && j0 < a.kv_rows; j0 += kAttentionChunk) {
      const int cols = static_cast<int>(
          a.kv_rows - j0 < kAttentionChunk ? a.kv_rows - j0 : kAttentionChunk);
      int kept = 0;
      for (int jj = tid; jj < cols; jj += kAttentionThreads) {
        T g = 0;
        if (!a.causal || kv_pos[j0 + jj] <= qp) {
          const W* krow = k + kv_offset + (j0 + jj) * d;
          const W* vrow = v + kv_offset + (j0 + jj) * d;
          T dot = 0, dp = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += AttentionValue<kType, T>(qrow[c]) *
                   AttentionValue<kType, T>(krow[c]);
            dp += AttentionValue<kType, T>(dorow[c]) *
                  AttentionValue<kType, T>(vrow[c]);
          }
          const T p = AttentionExp(alpha * dot - m) / l;
          g = p * (dp - delta_i);
          kept = 1;
        }
        ds[jj] = g;
      }
      // Also the barrier between writing ds and reading it.
      if (!__syncthreads_or(kept)) continue;  // every key of the chunk masked
      for (int64_t c = tid; c < d; c += kAttentionThreads) {
        T sum = acc[c];
        const W* kcol = k + kv_offset + j0 * d + c;
        for (int jj = 0; jj < cols; ++jj) {
          sum += ds[jj] * AttentionValue<kType, T>(kcol[jj * d]);
        }
        acc[c] = sum;
      }
      __syncthreads();  // ds is read above before the next chunk writes it
    }
    W* orow = out + row * d;
    for (int64_t c = tid; c < d; c += kAttentionThreads) {
      const T before = sh.accumulate ? AttentionValue<kType, T>(orow[c]) : T(0);
      orow[c] = AttentionBits<kType, T>(before + alpha * acc[c]);
    }
  }
}

// dK and dV: one key row per thread block (grid-stride); see
// LaunchAttentionBackward. Each thread takes query rows of a chunk of one
// head of the key's group and leaves their P_ij and dS_ij in shared
// memory, then adds the chunk's sum_i dS_ij q_i and sum_i P_ij dO_i to its
// columns of the key row's two accumulators (`scratch`, two head_dim rows
// per thread block), in query order.
template <PatternType kType>
__global__ void AttentionBackwardDkvKernel(
    AttentionBackwardShape sh, const WordT<kType>* q, const WordT<kType>* k,
    const WordT<kType>* v, const WordT<kType>* dout, const WordT<kType>* state,
    WordT<kType>* out, const int64_t* q_pos, const int64_t* kv_pos,
    const typename AttentionAcc<kType>::T* delta,
    typename AttentionAcc<kType>::T* scratch) {
  using T = typename AttentionAcc<kType>::T;
  using W = WordT<kType>;
  __shared__ T ps[kAttentionChunk];
  __shared__ T ds[kAttentionChunk];
  const AttentionBlockShape& a = sh.block;
  const int64_t d = a.head_dim, width = d + 2;
  const int64_t keys = a.batch * a.kv_heads * a.kv_rows;
  const int64_t group = a.heads / a.kv_heads;
  const T alpha = static_cast<T>(a.scale);
  const int tid = threadIdx.x;
  T* dk = scratch + static_cast<int64_t>(blockIdx.x) * 2 * d;
  T* dv = dk + d;
  for (int64_t key = blockIdx.x; key < keys; key += gridDim.x) {
    const int64_t j = key % a.kv_rows;
    const int64_t g = (key / a.kv_rows) % a.kv_heads;
    const int64_t b = key / (a.kv_rows * a.kv_heads);
    const W* krow = k + key * d;
    const W* vrow = v + key * d;
    const int64_t kp = a.causal ? kv_pos[j] : 0;
    for (int64_t c = tid; c < d; c += kAttentionThreads) {
      dk[c] = 0;
      dv[c] = 0;
    }
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t row0 = (b * a.heads + h) * a.q_rows;  // query row 0
      for (int64_t i0 = 0; i0 < a.q_rows; i0 += kAttentionChunk) {
        const int cols = static_cast<int>(
            a.q_rows - i0 < kAttentionChunk ? a.q_rows - i0 : kAttentionChunk);
        int kept = 0;
        for (int ii = tid; ii < cols; ii += kAttentionThreads) {
          const int64_t row = row0 + i0 + ii;
          const T l = AttentionValue<kType, T>(state[row * width + d + 1]);
          T p = 0, gs = 0;
          if (l != T(0) && (!a.causal || kp <= q_pos[i0 + ii])) {
            const T m = AttentionValue<kType, T>(state[row * width + d]);
            const W* qrow = q + row * d;
            const W* dorow = dout + row * d;
            T dot = 0, dp = 0;
            for (int64_t c = 0; c < d; ++c) {
              dot += AttentionValue<kType, T>(qrow[c]) *
                     AttentionValue<kType, T>(krow[c]);
              dp += AttentionValue<kType, T>(dorow[c]) *
                    AttentionValue<kType, T>(vrow[c]);
            }
            p = AttentionExp(alpha * dot - m) / l;
            gs = p * (dp - delta[row]);
            kept = 1;
          }
          ps[ii] = p;
          ds[ii] = gs;
        }
        // Also the barrier between writing ps / ds and reading them.
        if (!__syncthreads_or(kept)) continue;  // no query row kept this key
        for (int64_t c = tid; c < d; c += kAttentionThreads) {
          T sum_k = dk[c], sum_v = dv[c];
          const W* qcol = q + (row0 + i0) * d + c;
          const W* docol = dout + (row0 + i0) * d + c;
          for (int ii = 0; ii < cols; ++ii) {
            sum_k += ds[ii] * AttentionValue<kType, T>(qcol[ii * d]);
            sum_v += ps[ii] * AttentionValue<kType, T>(docol[ii * d]);
          }
          dk[c] = sum_k;
          dv[c] = sum_v;
        }
        __syncthreads();  // ps / ds are read above before the next chunk
      }
    }
    W* dk_row = out + key * d;
    W* dv_row = out + (keys + key) * d;  // dV after all of dK
    for (int64_t c = tid; c < d; c += kAttentionThreads) {
      const T dk_before =
          sh.accumulate ? AttentionValue<kType, T>(dk_row[c]) : T(0);
      const T dv_before =
          sh.accumulate ? AttentionValue<kType, T>(dv_row[c]) : T(0);
      dk_row[c] = AttentionBits<kType, T>(dk_before + alpha * dk[c]);
      dv_row[c] = AttentionBits<kType, T>(dv_before + dv[c]);
    }
  }
}

int64_t AttentionGrid(const AttentionBlockShape& sh) {
  const int64_t rows = sh.batch * sh.heads * sh.q_rows;
  return rows < kAttentionMaxBlocks ? rows : kAttentionMaxBlocks;
}

template <PatternType kType>
cudaError_t AttentionBlock(const AttentionBlockShape& sh, const void* q,
                           const void* k, const void* v, const void* s_in,
                           void* s_out, const int64_t* q_pos,
                           const int64_t* kv_pos, void* scratch,
                           cudaStream_t stream) {
  using W = WordT<kType>;
  using T = typename AttentionAcc<kType>::T;
  AttentionBlockKernel<kType>
      <<<static_cast<int>(AttentionGrid(sh)), kAttentionThreads, 0, stream>>>(
          sh, static_cast<const W*>(q), static_cast<const W*>(k),
          static_cast<const W*>(v), static_cast<const W*>(s_in),
          static_cast<W*>(s_out), q_pos, kv_pos, static_cast<T*>(scratch));
  return cudaGetLastError();
}

// The tiled forward kernel (LaunchAttentionBlock for fp16, bf16 and float32
// with head_dim <= kTiledMaxDim): a thread block takes kTiledRows query rows
// of one (batch, head) and walks the keys in tiles of kTiledKeys, each tile
// of K and V loaded once into shared memory and used by every query row of
// the block (the row kernel above reads each key once per query row). The
// 16 x 16 threads each hold a 4 x 4 tile of scores (rows ty*4.., keys tx +
// 16j) and a 4 x 8 tile of o (columns tx*4.. and 64 + tx*4..) in
// registers, and read shared memory 16 bytes at a time: Q and K rows along
// head_dim, the probabilities (stored key-major) and V rows along the
// columns. The 16 threads of a row group are one half-warp, so a row's
// maximum and sum are warp shuffles.
constexpr int kTiledRows = 64;
constexpr int kTiledKeys = 64;
constexpr int kTiledThreads = 256;
constexpr int kTiledMaxDim = 128;
constexpr int kTiledPLd = kTiledRows + 4;  // P's row stride: 2-way banks

// head_dim rounded up to whole float4s, and the Q / K row stride (one more
// float4: the 16 key rows a half-warp reads fall on distinct bank groups).
__host__ __device__ inline int TiledPaddedDim(int64_t d) {
  return static_cast<int>((d + 3) / 4 * 4);
}
__host__ __device__ inline int TiledQkLd(int64_t d) {
  return TiledPaddedDim(d) + 4;
}

// Shared memory of the tiled kernel for head_dim d, bytes: the Q and K
// tiles, the V tile (kTiledMaxDim columns, zero past d), the probabilities.
int64_t TiledSharedBytes(int64_t d) {
  return (int64_t{kTiledRows + kTiledKeys} * TiledQkLd(d) +
          int64_t{kTiledKeys} * kTiledMaxDim +
          int64_t{kTiledKeys} * kTiledPLd) *
         static_cast<int64_t>(sizeof(float));
}

__device__ inline float HalfWarpMax(float x) {
  for (int offset = 8; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}
__device__ inline float HalfWarpSum(float x) {
  for (int offset = 8; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}

// `rows` x `pad` floats into shared `dst` (row stride ld) from `src` (row
// stride d): elements past `valid` rows or d columns are zero.
template <PatternType kType>
__device__ inline void TiledLoad(float* dst, int ld, const WordT<kType>* src,
                                 int rows, int valid, int d, int pad) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int r = ty; r < rows; r += kTiledThreads / 16) {
    for (int c = tx; c < pad; c += 16) {
      dst[r * ld + c] =
          r < valid && c < d ? FloatOf<kType>(src[r * d + c]) : 0.0f;
    }
  }
}

template <PatternType kType>
__global__ void __launch_bounds__(kTiledThreads)
    AttentionTiledKernel(AttentionBlockShape sh, const WordT<kType>* q,
                         const WordT<kType>* k, const WordT<kType>* v,
                         const WordT<kType>* s_in, WordT<kType>* s_out,
                         const int64_t* q_pos, const int64_t* kv_pos) {
  using W = WordT<kType>;
  extern __shared__ float4 tiled_shared4[];
  __shared__ int64_t qpos_s[kTiledRows];
  __shared__ int64_t kpos_s[kTiledKeys];
  const int d = static_cast<int>(sh.head_dim);
  const int pad = TiledPaddedDim(d), ld = TiledQkLd(d);
  const int64_t width = sh.head_dim + 2;
  float* qs = reinterpret_cast<float*>(tiled_shared4);  // kTiledRows x ld
  float* ks = qs + kTiledRows * ld;                     // kTiledKeys x ld
  float* vs = ks + kTiledKeys * ld;            // kTiledKeys x kTiledMaxDim
  float* ps = vs + kTiledKeys * kTiledMaxDim;  // kTiledKeys x kTiledPLd
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t row_tiles = (sh.q_rows + kTiledRows - 1) / kTiledRows;
  const int64_t bh = blockIdx.x / row_tiles;  // batch * heads + head
  const int64_t row0 = (blockIdx.x % row_tiles) * kTiledRows;
  const int rows_here = static_cast<int>(
      sh.q_rows - row0 < kTiledRows ? sh.q_rows - row0 : kTiledRows);
  const int64_t b = bh / sh.heads, h = bh % sh.heads;
  const int64_t group = sh.heads / sh.kv_heads;
  const int64_t kv_offset = (b * sh.kv_heads + h / group) * sh.kv_rows * d;
  const float alpha = static_cast<float>(sh.scale);
  const float neg_inf = -CUDART_INF_F;
  // This thread's columns of o: two runs of 4 (the second past d when
  // head_dim <= 64).
  const int col0 = tx * 4, col1 = 64 + tx * 4;
  const bool second = col1 < d;

  TiledLoad<kType>(qs, ld, q + (bh * sh.q_rows + row0) * d, kTiledRows,
                   rows_here, d, pad);
  if (tid < kTiledRows) {
    // Rows past the end see no key (they are neither computed nor
    // written); without a mask every real row sees every real key.
    qpos_s[tid] = tid >= rows_here ? INT64_MIN
                  : sh.causal      ? q_pos[row0 + tid]
                                   : INT64_MAX - 1;
  }
  float acc[4][8], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    const W* in = s_in == nullptr || r >= rows_here
                      ? nullptr
                      : s_in + (bh * sh.q_rows + row0 + r) * width;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int col = (c < 4 ? col0 : col1) + c % 4;
      acc[i][c] = in != nullptr && col < d ? FloatOf<kType>(in[col]) : 0.0f;
    }
    m[i] = in != nullptr ? FloatOf<kType>(in[d]) : neg_inf;
    l[i] = in != nullptr ? FloatOf<kType>(in[d + 1]) : 0.0f;
  }

  for (int64_t j0 = 0; j0 < sh.kv_rows; j0 += kTiledKeys) {
    const int keys_here = static_cast<int>(
        sh.kv_rows - j0 < kTiledKeys ? sh.kv_rows - j0 : kTiledKeys);
    __syncthreads();  // the last tile's ks, vs, ps and kpos_s are read
    if (tid < kTiledKeys) {
      // Keys past the end are masked for every row.
      kpos_s[tid] = tid >= keys_here ? INT64_MAX
                    : sh.causal      ? kv_pos[j0 + tid]
                                     : INT64_MIN + 1;
    }
    __syncthreads();
    bool live = false;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        live |= kpos_s[tx + 16 * j] <= qpos_s[ty * 4 + i];
      }
    }
    if (!__syncthreads_or(live)) continue;  // every pair of the tile masked
    TiledLoad<kType>(ks, ld, k + kv_offset + j0 * d, kTiledKeys, keys_here, d,
                     pad);
    TiledLoad<kType>(vs, kTiledMaxDim, v + kv_offset + j0 * d, kTiledKeys,
                     keys_here, d, kTiledMaxDim);
    __syncthreads();
    float s[4][4] = {};
    for (int c = 0; c < pad; c += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        qv[i] = *reinterpret_cast<const float4*>(&qs[(ty * 4 + i) * ld + c]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        kv[j] = *reinterpret_cast<const float4*>(&ks[(tx + 16 * j) * ld + c]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
      }
    }
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i;
      float mx = neg_inf;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = kpos_s[tx + 16 * j] <= qpos_s[r] ? alpha * s[i][j] : neg_inf;
        mx = fmaxf(mx, s[i][j]);
      }
      // The shuffles run in every thread (no branch around them): the two
      // half-warps of a warp hold different rows.
      mx = HalfWarpMax(mx);
      const bool none = mx == neg_inf;  // no key of this tile for the row
      const float m_new =
          none ? m[i]
               : AttentionValue<kType, float>(AttentionBits<kType, float>(
                     fmaxf(mx, m[i])));  // rounded to the dtype
      f[i] =
          none || m[i] == neg_inf ? (none ? 1.0f : 0.0f) : expf(m[i] - m_new);
      float part = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = none ? 0.0f : expf(s[i][j] - m_new);  // masked: 0
        part += s[i][j];
      }
      const float sum = HalfWarpSum(part);
      if (!none) {
        l[i] = l[i] * f[i] + sum;
        m[i] = m_new;
      }
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[i][c] *= f[i];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float4*>(&ps[(tx + 16 * j) * kTiledPLd + ty * 4]) =
          make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
    }
    __syncthreads();
    for (int j = 0; j < keys_here; ++j) {
      const float4 p =
          *reinterpret_cast<const float4*>(&ps[j * kTiledPLd + ty * 4]);
      const float4 va =
          *reinterpret_cast<const float4*>(&vs[j * kTiledMaxDim + col0]);
      const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[i][0] = fmaf(pr[i], va.x, acc[i][0]);
        acc[i][1] = fmaf(pr[i], va.y, acc[i][1]);
        acc[i][2] = fmaf(pr[i], va.z, acc[i][2]);
        acc[i][3] = fmaf(pr[i], va.w, acc[i][3]);
      }
      if (second) {
        const float4 vb =
            *reinterpret_cast<const float4*>(&vs[j * kTiledMaxDim + col1]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[i][4] = fmaf(pr[i], vb.x, acc[i][4]);
          acc[i][5] = fmaf(pr[i], vb.y, acc[i][5]);
          acc[i][6] = fmaf(pr[i], vb.z, acc[i][6]);
          acc[i][7] = fmaf(pr[i], vb.w, acc[i][7]);
        }
      }
    }
  }
  // Every read of s_in happened before the loop's first barrier, so an
  // s_out that aliases it is safe to write.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= rows_here) continue;
    W* out = s_out + (bh * sh.q_rows + row0 + r) * width;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int col = (c < 4 ? col0 : col1) + c % 4;
      if (col < d) out[col] = AttentionBits<kType, float>(acc[i][c]);
    }
    if (tx == 0) {
      out[d] = AttentionBits<kType, float>(m[i]);
      out[d + 1] = AttentionBits<kType, float>(l[i]);
    }
  }
}

template <PatternType kType>
cudaError_t AttentionTiled(const AttentionBlockShape& sh, const void* q,
                           const void* k, const void* v, const void* s_in,
                           void* s_out, const int64_t* q_pos,
                           const int64_t* kv_pos, cudaStream_t stream) {
  using W = WordT<kType>;
  const int64_t blocks =
      sh.batch * sh.heads * ((sh.q_rows + kTiledRows - 1) / kTiledRows);
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const int64_t shared = TiledSharedBytes(sh.head_dim);
  cudaError_t err = cudaFuncSetAttribute(
      AttentionTiledKernel<kType>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(shared));
  if (err != cudaSuccess) return err;
  AttentionTiledKernel<kType>
      <<<static_cast<int>(blocks), kTiledThreads, shared, stream>>>(
          sh, static_cast<const W*>(q), static_cast<const W*>(k),
          static_cast<const W*>(v), static_cast<const W*>(s_in),
          static_cast<W*>(s_out), q_pos, kv_pos);
  return cudaGetLastError();
}

// The tiled kernel where it takes the dtype and head_dim (and `by_row` is
// false), else the row kernel.
template <PatternType kType>
cudaError_t AttentionBlockEither(bool by_row, const AttentionBlockShape& sh,
                                 const void* q, const void* k, const void* v,
                                 const void* s_in, void* s_out,
                                 const int64_t* q_pos, const int64_t* kv_pos,
                                 void* scratch, cudaStream_t stream) {
  if constexpr (kType != PatternType::kFloat64) {
    if (!by_row && sh.head_dim <= kTiledMaxDim) {
      return AttentionTiled<kType>(sh, q, k, v, s_in, s_out, q_pos, kv_pos,
                                   stream);
    }
  }
  return AttentionBlock<kType>(sh, q, k, v, s_in, s_out, q_pos, kv_pos, scratch,
                               stream);
}

// Thread blocks of the backward's dQ (one per query row) or dK / dV (one
// per key row) kernel.
int64_t AttentionBackwardGrid(const AttentionBackwardShape& sh) {
  const AttentionBlockShape& a = sh.block;
  const int64_t rows =
      sh.dkv ? a.batch * a.kv_heads * a.kv_rows : a.batch * a.heads * a.q_rows;
  return rows < kAttentionMaxBlocks ? rows : kAttentionMaxBlocks;
}

template <PatternType kType>
cudaError_t AttentionBackward(const AttentionBackwardShape& sh, const void* q,
                              const void* k, const void* v, const void* dout,
                              const void* o, const void* state, void* out,
                              const int64_t* q_pos, const int64_t* kv_pos,
                              void* scratch, cudaStream_t stream) {
  using W = WordT<kType>;
  using T = typename AttentionAcc<kType>::T;
  const AttentionBlockShape& a = sh.block;
  const int64_t q_rows = a.batch * a.heads * a.q_rows;
  // Scratch: D (q_rows entries), then the thread blocks' accumulators.
  T* delta = static_cast<T*>(scratch);
  T* acc = delta + q_rows;
  AttentionDeltaKernel<kType>
      <<<LaunchBlocks(q_rows), kLaunchThreads, 0, stream>>>(
          static_cast<const W*>(dout), static_cast<const W*>(o), a.head_dim,
          q_rows, delta);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const int grid = static_cast<int>(AttentionBackwardGrid(sh));
  if (sh.dkv) {
    AttentionBackwardDkvKernel<kType><<<grid, kAttentionThreads, 0, stream>>>(
        sh, static_cast<const W*>(q), static_cast<const W*>(k),
        static_cast<const W*>(v), static_cast<const W*>(dout),
        static_cast<const W*>(state), static_cast<W*>(out), q_pos, kv_pos,
        delta, acc);
  } else {
    AttentionBackwardDqKernel<kType><<<grid, kAttentionThreads, 0, stream>>>(
        sh, static_cast<const W*>(q), static_cast<const W*>(k),
        static_cast<const W*>(v), static_cast<const W*>(dout),
        static_cast<const W*>(state), static_cast<W*>(out), q_pos, kv_pos,
        delta, acc);
  }
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t AttentionFinish(const void* state, void* out, int64_t d, int64_t n,
                            cudaStream_t stream) {
  using W = WordT<kType>;
  AttentionFinishKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(
      static_cast<const W*>(state), static_cast<W*>(out), d, n);
  return cudaGetLastError();
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

int64_t AttentionBlockScratchBytes(PatternType type,
                                   const AttentionBlockShape& shape) {
  const int64_t acc = type == PatternType::kFloat16 ||
                              type == PatternType::kBFloat16
                          ? 4
                          : 8;
  return AttentionGrid(shape) * shape.head_dim * acc;
}

namespace {

cudaError_t LaunchAttentionBlockWith(bool by_row, PatternType type,
                                     const AttentionBlockShape& shape,
                                     const void* q, const void* k,
                                     const void* v, const void* s_in,
                                     void* s_out, const int64_t* q_pos,
                                     const int64_t* kv_pos, void* scratch,
                                     cudaStream_t stream) {
  if (shape.batch < 1 || shape.heads < 1 || shape.kv_heads < 1 ||
      shape.q_rows < 1 || shape.kv_rows < 1 || shape.head_dim < 1 ||
      shape.heads % shape.kv_heads != 0 ||
      (shape.causal && (q_pos == nullptr || kv_pos == nullptr))) {
    return cudaErrorInvalidValue;
  }
  switch (type) {
    case PatternType::kFloat16:
      return AttentionBlockEither<PatternType::kFloat16>(
          by_row, shape, q, k, v, s_in, s_out, q_pos, kv_pos, scratch, stream);
    case PatternType::kBFloat16:
      return AttentionBlockEither<PatternType::kBFloat16>(
          by_row, shape, q, k, v, s_in, s_out, q_pos, kv_pos, scratch, stream);
    case PatternType::kFloat32:
      return AttentionBlockEither<PatternType::kFloat32>(
          by_row, shape, q, k, v, s_in, s_out, q_pos, kv_pos, scratch, stream);
    case PatternType::kFloat64:
      return AttentionBlockEither<PatternType::kFloat64>(
          by_row, shape, q, k, v, s_in, s_out, q_pos, kv_pos, scratch, stream);
    default:
      return cudaErrorInvalidValue;  // attention takes floats only
  }
}

}  // namespace

cudaError_t LaunchAttentionBlock(PatternType type,
                                 const AttentionBlockShape& shape,
                                 const void* q, const void* k, const void* v,
                                 const void* s_in, void* s_out,
                                 const int64_t* q_pos, const int64_t* kv_pos,
                                 void* scratch, cudaStream_t stream) {
  return LaunchAttentionBlockWith(/*by_row=*/false, type, shape, q, k, v, s_in,
                                  s_out, q_pos, kv_pos, scratch, stream);
}

cudaError_t LaunchAttentionBlockByRow(PatternType type,
                                      const AttentionBlockShape& shape,
                                      const void* q, const void* k,
                                      const void* v, const void* s_in,
                                      void* s_out, const int64_t* q_pos,
                                      const int64_t* kv_pos, void* scratch,
                                      cudaStream_t stream) {
  return LaunchAttentionBlockWith(/*by_row=*/true, type, shape, q, k, v, s_in,
                                  s_out, q_pos, kv_pos, scratch, stream);
}

cudaError_t LaunchAttentionFinish(PatternType type, const void* state,
                                  void* out, int64_t rows, int64_t head_dim,
                                  cudaStream_t stream) {
  if (head_dim < 1 || rows < 0) return cudaErrorInvalidValue;
  const int64_t n = rows * head_dim;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case PatternType::kFloat16:
      return AttentionFinish<PatternType::kFloat16>(state, out, head_dim, n,
                                                    stream);
    case PatternType::kBFloat16:
      return AttentionFinish<PatternType::kBFloat16>(state, out, head_dim, n,
                                                     stream);
    case PatternType::kFloat32:
      return AttentionFinish<PatternType::kFloat32>(state, out, head_dim, n,
                                                    stream);
    case PatternType::kFloat64:
      return AttentionFinish<PatternType::kFloat64>(state, out, head_dim, n,
                                                    stream);
    default:
      return cudaErrorInvalidValue;  // attention takes floats only
  }
}

int64_t AttentionBackwardScratchBytes(PatternType type,
                                      const AttentionBackwardShape& shape) {
  const int64_t acc =
      type == PatternType::kFloat16 || type == PatternType::kBFloat16 ? 4 : 8;
  const AttentionBlockShape& a = shape.block;
  const int64_t delta = a.batch * a.heads * a.q_rows;
  const int64_t rows = shape.dkv ? 2 : 1;  // head_dim rows per thread block
  return (delta + AttentionBackwardGrid(shape) * rows * a.head_dim) * acc;
}

cudaError_t LaunchAttentionBackward(PatternType type,
                                    const AttentionBackwardShape& shape,
                                    const void* q, const void* k, const void* v,
                                    const void* dout, const void* o,
                                    const void* state, void* out,
                                    const int64_t* q_pos, const int64_t* kv_pos,
                                    void* scratch, cudaStream_t stream) {
  const AttentionBlockShape& a = shape.block;
  if (a.batch < 1 || a.heads < 1 || a.kv_heads < 1 || a.q_rows < 1 ||
      a.kv_rows < 1 || a.head_dim < 1 || a.heads % a.kv_heads != 0 ||
      (a.causal && (q_pos == nullptr || kv_pos == nullptr))) {
    return cudaErrorInvalidValue;
  }
  switch (type) {
    case PatternType::kFloat16:
      return AttentionBackward<PatternType::kFloat16>(
          shape, q, k, v, dout, o, state, out, q_pos, kv_pos, scratch, stream);
    case PatternType::kBFloat16:
      return AttentionBackward<PatternType::kBFloat16>(
          shape, q, k, v, dout, o, state, out, q_pos, kv_pos, scratch, stream);
    case PatternType::kFloat32:
      return AttentionBackward<PatternType::kFloat32>(
          shape, q, k, v, dout, o, state, out, q_pos, kv_pos, scratch, stream);
    case PatternType::kFloat64:
      return AttentionBackward<PatternType::kFloat64>(
          shape, q, k, v, dout, o, state, out, q_pos, kv_pos, scratch, stream);
    default:
      return cudaErrorInvalidValue;  // attention takes floats only
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
