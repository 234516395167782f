#include "worker/kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/kernels/blas_arch.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/kernels/element_core.h"

namespace meshcast::worker {
namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int>::max();

absl::Status CheckDim(const char* op, const char* field, int64_t value) {
  if (value >= 1 && value <= kMaxDim) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ".", field, " = ", value, " must be in [1, ", kMaxDim, "]"));
}

// OK if an operand holds the product of `factors` elements, else
// INVALID_ARGUMENT showing `formula` and its numbers (the last factor as
// "(head_dim + 2)" when `state_head_dim` >= 0: a state's row).
absl::Status CheckCount(const char* operand, int64_t found,
                        const char* formula,
                        std::initializer_list<int64_t> factors,
                        int64_t state_head_dim = -1,
                        const char* op = "attention_block") {
  unsigned __int128 want = 1;
  for (int64_t f : factors) want *= static_cast<uint64_t>(f);
  if (found >= 0 && static_cast<unsigned __int128>(found) == want) {
    return absl::OkStatus();
  }
  std::string product;
  int i = 0;
  for (int64_t f : factors) {
    const bool last = i == static_cast<int>(factors.size()) - 1;
    absl::StrAppend(&product, i > 0 ? " * " : "",
                    last && state_head_dim >= 0
                        ? absl::StrCat("(", state_head_dim, " + 2)")
                        : absl::StrCat(f));
    ++i;
  }
  const std::string total =
      want > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())
          ? std::string("more than 2^63")
          : absl::StrCat(static_cast<int64_t>(want));
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", operand, " has ", found,
                   " elements; want ", formula, " = ", product, " = ", total));
}

// INVALID_ARGUMENT for an integer dtype or a span that is not whole
// elements.
absl::Status CheckFloatSpans(const char* op, DType dtype,
                             std::initializer_list<std::pair<const char*,
                                                             size_t>> spans) {
  if (IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  const size_t size = DTypeSize(dtype);
  for (const auto& [name, bytes] : spans) {
    if (bytes % size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on ", DTypeName(dtype), ": ", name, " has ",
                       bytes, " bytes, not a multiple of ", size));
    }
  }
  return absl::OkStatus();
}

// Runs `run(to)` with `to` = out's bytes, or, when `out` overlaps one of
// `inputs`, a copy of them (starting as out's contents, for a kernel that
// accumulates into its output) written back afterwards, so that no input
// is read after the kernel overwrote it.
template <typename Run>
void RunIntoOutput(absl::Span<uint8_t> out,
                   std::initializer_list<absl::Span<const uint8_t>> inputs,
                   Run run) {
  const absl::Span<const uint8_t> view(out.data(), out.size());
  for (absl::Span<const uint8_t> input : inputs) {
    if (!Overlaps(view, input)) continue;
    std::vector<uint8_t> copy(out.begin(), out.end());
    run(copy.data());
    std::memcpy(out.data(), copy.data(), copy.size());
    return;
  }
  run(out.data());
}

// Elements of a float dtype to and from the accumulator type T (float, or
// double for float64): loads are exact, stores round
// once to nearest even.
template <PatternType kType, typename T>
void LoadBitsAs(const uint8_t* in, int64_t n, T* out) {
  constexpr int kSize = PatternTypeSize(kType);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, in + kSize * i, kSize);
    out[i] = static_cast<T>(CoreFloatValue(kType, bits));
  }
}

template <typename T>
void LoadAs(DType dtype, const uint8_t* in, int64_t n, T* out) {
  switch (dtype) {
    case DType::kFloat16:
      return LoadBitsAs<PatternType::kFloat16>(in, n, out);
    case DType::kBFloat16:
      return LoadBitsAs<PatternType::kBFloat16>(in, n, out);
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, in + 4 * i, 4);
        out[i] = static_cast<T>(x);
      }
      return;
    default:
      for (int64_t i = 0; i < n; ++i) {
        double x;
        std::memcpy(&x, in + 8 * i, 8);
        out[i] = static_cast<T>(x);
      }
      return;
  }
}

template <PatternType kType, typename T>
void StoreBitsFrom(const T* in, int64_t n, uint8_t* out) {
  constexpr int kSize = PatternTypeSize(kType);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits =
        CoreFloatStoreBits(kType, static_cast<double>(in[i]));
    std::memcpy(out + kSize * i, &bits, kSize);
  }
}

template <typename T>
void StoreFrom(DType dtype, const T* in, int64_t n, uint8_t* out) {
  switch (dtype) {
    case DType::kFloat16:
      return StoreBitsFrom<PatternType::kFloat16>(in, n, out);
    case DType::kBFloat16:
      return StoreBitsFrom<PatternType::kBFloat16>(in, n, out);
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) {
        const float x = static_cast<float>(in[i]);
        std::memcpy(out + 4 * i, &x, 4);
      }
      return;
    default:
      for (int64_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(in[i]);
        std::memcpy(out + 8 * i, &x, 8);
      }
      return;
  }
}

// `x` rounded to the dtype and read back (the m that will be stored).
template <typename T>
T RoundToDType(DType dtype, T x) {
  T r;
  uint8_t bytes[8];
  StoreFrom(dtype, &x, 1, bytes);
  LoadAs(dtype, bytes, 1, &r);
  return r;
}

// AttentionFastExp (attention.h): exp(x) in float without a library call,
// so that a loop of them
// vectorizes (the exponentials of a score tile cost more than its two
// GEMMs through libm): x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite,
// n rounded to nearest by the 1.5 x 2^23 trick), exp(r) by a degree-6
// polynomial (the Cephes expf coefficients: under 2 ulp on the whole
// range), times 2^n built in the exponent bits. x below -87.3 (a result
// below the smallest normal float) and -inf give an exact 0, as a masked
// score must; x above 88.3 gives +inf (the last 0.4 before float's own
// overflow too: attention's arguments are at most about 0). Never given
// NaN here.
//
// ExpOfClamped is that arithmetic on a float or on a GCC vector of floats
// (whose arithmetic with a float applies it to every lane): for x already
// clamped to the range, n (a whole number) and exp(x - n ln2). Operands by
// reference: a vector passed by value would change the ABI under -Wpsabi's
// eye, though the function is always inlined.
template <typename V>
[[gnu::always_inline]] inline void ExpOfClamped(const V& clamped, V* n,
                                                V* exp_r) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23
  *n = (clamped * kLog2e + kRound) - kRound;
  const V r = (clamped - *n * kLn2Hi) - *n * kLn2Lo;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  *exp_r = p * r * r + r + 1.0f;
}
[[gnu::always_inline]] inline float FastExpImpl(float x) {
  const bool underflow = x < -87.3365f;
  const float clamped = std::min(std::max(x, -87.3365f), 88.7228f);
  float n, p;
  ExpOfClamped(clamped, &n, &p);
  const float scale =
      std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : p * scale;
}
// The exponential of the accumulator type: FastExp for float, libm's for
// double (float64 tensors).
inline float AccumulatorExp(float x) { return FastExpImpl(x); }
inline double AccumulatorExp(double x) { return std::exp(x); }

// The float row loops of the kernels, written once over kLanes-wide GCC
// vector types (whose compares give lane masks, so the clamps and the zero
// below exp's range need no branch; the compiler does not vectorize the
// scalar form's selects on its own) and compiled for three widths: SSE (4
// lanes, every x86-64), AVX2 (8) and AVX-512 (16), picked once by what the
// CPU has. The exponentials of a score tile cost more than its two GEMMs
// at 4 lanes. Sums run lane-wise, then over the lanes, then the tail: the
// order differs by width, within the tolerance the reference allows a row
// sum.
template <int kLanes>
struct LaneTypes;  // GCC takes vector_size only from a constant, not a
                   // template argument: one specialization per width.
template <>
struct LaneTypes<4> {
  using V = float __attribute__((vector_size(16)));
  using VI = int32_t __attribute__((vector_size(16)));
};
template <>
struct LaneTypes<8> {
  using V = float __attribute__((vector_size(32)));
  using VI = int32_t __attribute__((vector_size(32)));
};
template <>
struct LaneTypes<16> {
  using V = float __attribute__((vector_size(64)));
  using VI = int32_t __attribute__((vector_size(64)));
};

template <int kLanes>
struct FloatLanes {
  using V = typename LaneTypes<kLanes>::V;
  using VI = typename LaneTypes<kLanes>::VI;

  // x[i] = exp(x[i] - shift) (FastExpImpl's arithmetic); returns their sum
  // when kSum.
  template <bool kSum>
  [[gnu::always_inline]] static inline float ExpShifted(float* x, int64_t n,
                                                        float shift) {
    const V lo = V{} + -87.3365f, hi = V{} + 88.7228f;
    V sum = V{};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      V v;
      std::memcpy(&v, x + i, sizeof(v));
      v -= shift;
      const VI under = v < lo;
      V c = v < lo ? lo : v;
      c = c > hi ? hi : c;
      V n_, p;
      ExpOfClamped(c, &n_, &p);
      const VI bits = (__builtin_convertvector(n_, VI) + 127) << 23;
      // GCC's vector casts between types of one size reinterpret the bits.
      const V out = (V)((VI)(p * (V)bits) & ~under);
      std::memcpy(x + i, &out, sizeof(out));
      if constexpr (kSum) sum += out;
    }
    float total = 0;
    if constexpr (kSum) {
      for (int l = 0; l < kLanes; ++l) total += sum[l];
    }
    for (; i < n; ++i) {
      x[i] = FastExpImpl(x[i] - shift);
      if constexpr (kSum) total += x[i];
    }
    return total;
  }

  [[gnu::always_inline]] static inline float Max(const float* x, int64_t n) {
    V best = V{} - std::numeric_limits<float>::infinity();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      V v;
      std::memcpy(&v, x + i, sizeof(v));
      best = v > best ? v : best;
    }
    float out = best[0];
    for (int l = 1; l < kLanes; ++l) out = std::max(out, best[l]);
    for (; i < n; ++i) out = std::max(out, x[i]);
    return out;
  }
};

// The row loops at one width, as plain functions to take the address of.
struct RowLoops {
  float (*exp_shifted_sum)(float* x, int64_t n, float shift);
  float (*exp_shifted)(float* x, int64_t n, float shift);
  float (*max)(const float* x, int64_t n);
};

#define MESHCAST_ROW_LOOPS(name, lanes, target)                 \
  target float name##ExpSum(float* x, int64_t n, float shift) { \
    return FloatLanes<lanes>::ExpShifted<true>(x, n, shift);    \
  }                                                             \
  target float name##Exp(float* x, int64_t n, float shift) {    \
    return FloatLanes<lanes>::ExpShifted<false>(x, n, shift);   \
  }                                                             \
  target float name##Max(const float* x, int64_t n) {           \
    return FloatLanes<lanes>::Max(x, n);                        \
  }
MESHCAST_ROW_LOOPS(Sse, 4, )
#if defined(__x86_64__)
MESHCAST_ROW_LOOPS(Avx2, 8, [[gnu::target("avx2,fma")]])
MESHCAST_ROW_LOOPS(Avx512, 16, [[gnu::target("avx512f")]])
#endif
#undef MESHCAST_ROW_LOOPS

const RowLoops& Loops() {
  static const RowLoops loops = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
      return RowLoops{Avx512ExpSum, Avx512Exp, Avx512Max};
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return RowLoops{Avx2ExpSum, Avx2Exp, Avx2Max};
    }
#endif
    return RowLoops{SseExpSum, SseExp, SseMax};
  }();
  return loops;
}

// x[i] = exp(x[i] - shift) for i < n; ExpShiftedSum also returns their sum.
void ExpShifted(float* x, int64_t n, float shift) {
  Loops().exp_shifted(x, n, shift);
}
void ExpShifted(double* x, int64_t n, double shift) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift);
}
float ExpShiftedSum(float* x, int64_t n, float shift) {
  return Loops().exp_shifted_sum(x, n, shift);
}
double ExpShiftedSum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - shift);
  return sum;
}

// The largest of x[0, n).
float RowMax(const float* x, int64_t n) { return Loops().max(x, n); }
double RowMax(const double* x, int64_t n) {
  double out = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) out = std::max(out, x[i]);
  return out;
}

// Row-major C = alpha op(A) B (+ beta C), op(A) = A, B transposed when
// `trans_b`.
void Gemm(bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Gemm(bool trans_b, int m, int n, int k, double alpha, const double* a,
          int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Row-major C = alpha op(A) op(B) + beta C with both transposes.
void Gemm2(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta,
           float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
void Gemm2(bool trans_a, bool trans_b, int m, int n, int k, double alpha,
           const double* a, int lda, const double* b, int ldb, double beta,
           double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

// The block of RunAttentionBlock on validated operands; `s_in` null
// without an input state, else possibly equal to `s_out` (in place). See
// attention.h for the arithmetic.
template <typename T>
void AttentionBlockInto(const v1::AttentionBlockAttrs& a, DType dtype,
                        const uint8_t* q, const uint8_t* k, const uint8_t* v,
                        const uint8_t* s_in, uint8_t* s_out) {
  const int64_t batch = a.batch(), heads = a.heads(), kv_heads = a.kv_heads();
  const int64_t q_rows = a.q_rows(), kv_rows = a.kv_rows(), d = a.head_dim();
  const int64_t group = heads / kv_heads, width = d + 2;
  const int64_t size = DTypeSize(dtype);
  const bool causal = a.causal();
  const int64_t* q_pos = a.q_position().data();
  const int64_t* kv_pos = a.kv_position().data();
  const T alpha = static_cast<T>(AttentionScale(a));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t tq = std::min(kAttentionQueryTile, q_rows);
  const int64_t tk = std::min(kAttentionKeyChunk, kv_rows);
  const int64_t chunks = (kv_rows + tk - 1) / tk;
  // Causal: each chunk's smallest and largest key position, to skip chunks
  // that a tile's rows all mask and the mask itself where they all see.
  std::vector<int64_t> chunk_min(chunks, 0), chunk_max(chunks, 0);
  if (causal) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t end = std::min(kv_rows, (c + 1) * tk);
      const auto [lo, hi] = std::minmax_element(kv_pos + c * tk, kv_pos + end);
      chunk_min[c] = *lo;
      chunk_max[c] = *hi;
    }
  }
  std::vector<T> kc(kv_rows * d), vc(kv_rows * d);
  std::vector<T> qt(tq * d), ot(tq * d), st(tq * tk), mt(tq), lt(tq);
  std::vector<char> kept(tq);
  T ml[2];
  const std::vector<T> zeros(d, T(0));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      const int64_t kv_offset = (b * kv_heads + kvh) * kv_rows * d;
      LoadAs(dtype, k + kv_offset * size, kv_rows * d, kc.data());
      LoadAs(dtype, v + kv_offset * size, kv_rows * d, vc.data());
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i0 = 0; i0 < q_rows; i0 += tq) {
          const int64_t rows = std::min(tq, q_rows - i0);
          const int64_t row0 = (b * heads + h) * q_rows + i0;  // state row
          LoadAs(dtype, q + row0 * d * size, rows * d, qt.data());
          for (int64_t r = 0; r < rows; ++r) {
            if (s_in != nullptr) {
              const uint8_t* in = s_in + (row0 + r) * width * size;
              LoadAs(dtype, in, d, ot.data() + r * d);
              LoadAs(dtype, in + d * size, 2, ml);
              mt[r] = ml[0];
              lt[r] = ml[1];
            } else {
              std::fill(ot.begin() + r * d, ot.begin() + (r + 1) * d, T(0));
              mt[r] = neg_inf;
              lt[r] = 0;
            }
            kept[r] = 0;
          }
          int64_t max_q_pos = std::numeric_limits<int64_t>::min();
          int64_t min_q_pos = std::numeric_limits<int64_t>::max();
          if (causal) {
            const auto [lo, hi] =
                std::minmax_element(q_pos + i0, q_pos + i0 + rows);
            min_q_pos = *lo;
            max_q_pos = *hi;
          }
          for (int64_t c = 0; c < chunks; ++c) {
            if (causal && chunk_min[c] > max_q_pos) continue;  // all masked
            const int64_t j0 = c * tk;
            const int64_t cols = std::min(tk, kv_rows - j0);
            // Scores of the tile against the chunk: alpha Q K^T.
            Gemm(true, static_cast<int>(rows), static_cast<int>(cols),
                 static_cast<int>(d), alpha, qt.data(), static_cast<int>(d),
                 kc.data() + j0 * d, static_cast<int>(d), T(0), st.data(),
                 static_cast<int>(cols));
            bool any = false;
            for (int64_t r = 0; r < rows; ++r) {
              T* srow = st.data() + r * cols;
              if (causal && chunk_max[c] > min_q_pos) {
                const int64_t qp = q_pos[i0 + r];
                for (int64_t j = 0; j < cols; ++j) {
                  if (kv_pos[j0 + j] > qp) srow[j] = neg_inf;
                }
              }
              const T mx = RowMax(srow, cols);
              if (mx == neg_inf) {  // every key of the chunk masked
                std::fill(srow, srow + cols, T(0));
                continue;
              }
              any = true;
              kept[r] = 1;
              const T m_old = mt[r];
              const T m_new = RoundToDType(dtype, std::max(m_old, mx));
              const T f =
                  m_old == neg_inf ? T(0) : AccumulatorExp(m_old - m_new);
              // The exponentials (masked: exp(-inf) = 0), then their sum.
              lt[r] = lt[r] * f + ExpShiftedSum(srow, cols, m_new);
              if (f != T(1)) {
                T* orow = ot.data() + r * d;
                for (int64_t x = 0; x < d; ++x) orow[x] *= f;
              }
              mt[r] = m_new;
            }
            if (!any) continue;
            // o += P V over the chunk.
            Gemm(false, static_cast<int>(rows), static_cast<int>(d),
                 static_cast<int>(cols), T(1), st.data(),
                 static_cast<int>(cols), vc.data() + j0 * d,
                 static_cast<int>(d), T(1), ot.data(), static_cast<int>(d));
          }
          for (int64_t r = 0; r < rows; ++r) {
            uint8_t* out = s_out + (row0 + r) * width * size;
            if (kept[r]) {
              StoreFrom(dtype, ot.data() + r * d, d, out);
              ml[0] = mt[r];
              ml[1] = lt[r];
              StoreFrom(dtype, ml, 2, out + d * size);
            } else if (s_in != nullptr) {
              // No key kept: the state stays, bit for bit.
              const uint8_t* in = s_in + (row0 + r) * width * size;
              if (in != out) std::memcpy(out, in, width * size);
            } else {
              StoreFrom(dtype, zeros.data(), d, out);
              ml[0] = neg_inf;
              ml[1] = 0;
              StoreFrom(dtype, ml, 2, out + d * size);
            }
          }
        }
      }
    }
  }
}

// The gradients of RunAttentionBackward on validated operands, into `out`
// (which holds the previous values when accumulating). Per (batch, kv
// head), per query head of its group and tile of query rows, per chunk of
// keys: the scores by one GEMM, P from the stored m and l, dP = dO V^T by
// a second, dS = P (dP - D); then dQ += scale dS K (TARGET_DQ) or dK +=
// scale dS^T Q and dV += P^T dO (TARGET_DKV), accumulated in T and stored
// once.
template <typename T>
void AttentionBackwardInto(const v1::AttentionBackwardAttrs& ab, DType dtype,
                           const uint8_t* q, const uint8_t* k,
                           const uint8_t* v, const uint8_t* dout,
                           const uint8_t* o, const uint8_t* s, uint8_t* out) {
  const v1::AttentionBlockAttrs& a = ab.block();
  const bool want_dq = ab.target() == v1::AttentionBackwardAttrs::TARGET_DQ;
  const bool accumulate = ab.accumulate();
  const int64_t batch = a.batch(), heads = a.heads(), kv_heads = a.kv_heads();
  const int64_t q_rows = a.q_rows(), kv_rows = a.kv_rows(), d = a.head_dim();
  const int64_t group = heads / kv_heads, width = d + 2;
  const int64_t size = DTypeSize(dtype);
  const bool causal = a.causal();
  const int64_t* q_pos = a.q_position().data();
  const int64_t* kv_pos = a.kv_position().data();
  const T alpha = static_cast<T>(AttentionScale(a));
  const int64_t tq = std::min(kAttentionQueryTile, q_rows);
  const int64_t tk = std::min(kAttentionKeyChunk, kv_rows);
  const int64_t chunks = (kv_rows + tk - 1) / tk;
  // Causal: each chunk's smallest and largest key position, to skip chunks
  // that a tile's rows all mask and the mask itself where they all see.
  std::vector<int64_t> chunk_min(chunks, 0), chunk_max(chunks, 0);
  if (causal) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t end = std::min(kv_rows, (c + 1) * tk);
      const auto [lo, hi] = std::minmax_element(kv_pos + c * tk, kv_pos + end);
      chunk_min[c] = *lo;
      chunk_max[c] = *hi;
    }
  }
  std::vector<T> kc(kv_rows * d), vc(kv_rows * d), gk, gv;
  if (!want_dq) {
    gk.resize(kv_rows * d);
    gv.resize(kv_rows * d);
  }
  std::vector<T> qt(tq * d), dot(tq * d), ot(tq * d), gq(tq * d);
  std::vector<T> pt(tq * tk), dpt(tq * tk), mt(tq), lt(tq), delta(tq);
  T ml[2];
  const int64_t kv_block = kv_rows * d;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      const int64_t kv_offset = (b * kv_heads + kvh) * kv_block;
      LoadAs(dtype, k + kv_offset * size, kv_block, kc.data());
      LoadAs(dtype, v + kv_offset * size, kv_block, vc.data());
      // dK then dV: [2, batch, kv_heads, kv_rows, head_dim].
      uint8_t* dk_out = out + kv_offset * size;
      uint8_t* dv_out = out + (batch * kv_heads * kv_block + kv_offset) * size;
      if (!want_dq) {
        if (accumulate) {
          LoadAs(dtype, dk_out, kv_block, gk.data());
          LoadAs(dtype, dv_out, kv_block, gv.data());
        } else {
          std::fill(gk.begin(), gk.end(), T(0));
          std::fill(gv.begin(), gv.end(), T(0));
        }
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i0 = 0; i0 < q_rows; i0 += tq) {
          const int64_t rows = std::min(tq, q_rows - i0);
          const int64_t row0 = (b * heads + h) * q_rows + i0;
          LoadAs(dtype, q + row0 * d * size, rows * d, qt.data());
          LoadAs(dtype, dout + row0 * d * size, rows * d, dot.data());
          LoadAs(dtype, o + row0 * d * size, rows * d, ot.data());
          if (want_dq) {
            if (accumulate) {
              LoadAs(dtype, out + row0 * d * size, rows * d, gq.data());
            } else {
              std::fill(gq.begin(), gq.end(), T(0));
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            LoadAs(dtype, s + ((row0 + r) * width + d) * size, 2, ml);
            mt[r] = ml[0];
            lt[r] = ml[1];
            T sum = 0;
            for (int64_t x = 0; x < d; ++x) {
              sum += dot[r * d + x] * ot[r * d + x];
            }
            delta[r] = sum;
          }
          int64_t max_q_pos = std::numeric_limits<int64_t>::min();
          int64_t min_q_pos = std::numeric_limits<int64_t>::max();
          if (causal) {
            const auto [lo, hi] =
                std::minmax_element(q_pos + i0, q_pos + i0 + rows);
            min_q_pos = *lo;
            max_q_pos = *hi;
          }
          for (int64_t c = 0; c < chunks; ++c) {
            if (causal && chunk_min[c] > max_q_pos) continue;  // all masked
            const int64_t j0 = c * tk;
            const int64_t cols = std::min(tk, kv_rows - j0);
            const int ir = static_cast<int>(rows), ic = static_cast<int>(cols),
                      id = static_cast<int>(d);
            Gemm(true, ir, ic, id, alpha, qt.data(), id, kc.data() + j0 * d,
                 id, T(0), pt.data(), ic);
            for (int64_t r = 0; r < rows; ++r) {
              T* prow = pt.data() + r * cols;
              if (lt[r] == T(0)) {  // the row saw no key: no gradient
                std::fill(prow, prow + cols, T(0));
                continue;
              }
              const int64_t qp = causal ? q_pos[i0 + r] : 0;
              const T m = mt[r], inv_l = T(1) / lt[r];
              ExpShifted(prow, cols, m);
              for (int64_t j = 0; j < cols; ++j) prow[j] *= inv_l;
              if (causal && chunk_max[c] > min_q_pos) {
                for (int64_t j = 0; j < cols; ++j) {
                  if (kv_pos[j0 + j] > qp) prow[j] = T(0);
                }
              }
            }
            Gemm(true, ir, ic, id, T(1), dot.data(), id, vc.data() + j0 * d,
                 id, T(0), dpt.data(), ic);
            if (!want_dq) {  // dV += P^T dO, before P becomes dS
              Gemm2(true, false, ic, id, ir, T(1), pt.data(), ic, dot.data(),
                    id, T(1), gv.data() + j0 * d, id);
            }
            for (int64_t r = 0; r < rows; ++r) {
              T* prow = pt.data() + r * cols;
              const T* dprow = dpt.data() + r * cols;
              for (int64_t j = 0; j < cols; ++j) {
                prow[j] *= dprow[j] - delta[r];
              }
            }
            if (want_dq) {
              Gemm2(false, false, ir, id, ic, alpha, pt.data(), ic,
                    kc.data() + j0 * d, id, T(1), gq.data(), id);
            } else {
              Gemm2(true, false, ic, id, ir, alpha, pt.data(), ic, qt.data(),
                    id, T(1), gk.data() + j0 * d, id);
            }
          }
          if (want_dq) StoreFrom(dtype, gq.data(), rows * d, out + row0 * d * size);
        }
      }
      if (!want_dq) {
        StoreFrom(dtype, gk.data(), kv_block, dk_out);
        StoreFrom(dtype, gv.data(), kv_block, dv_out);
      }
    }
  }
}

template <typename T>
void AttentionFinishInto(DType dtype, int64_t d, int64_t rows,
                         const uint8_t* state, uint8_t* out) {
  const int64_t size = DTypeSize(dtype);
  std::vector<T> row(d + 2), o(d);
  for (int64_t r = 0; r < rows; ++r) {
    LoadAs(dtype, state + r * (d + 2) * size, d + 2, row.data());
    const T l = row[d + 1];
    for (int64_t c = 0; c < d; ++c) o[c] = l == T(0) ? T(0) : row[c] / l;
    StoreFrom(dtype, o.data(), d, out + r * d * size);
  }
}

// Float accumulators for every dtype but float64 (as flash attention
// kernels accumulate float32 inputs in float32): BLIS sgemm runs at twice
// dgemm's rate, and FastExp vectorizes.
bool FloatAccumulator(DType dtype) { return dtype != DType::kFloat64; }

}  // namespace

float AttentionFastExp(float x) { return FastExpImpl(x); }

double AttentionScale(const v1::AttentionBlockAttrs& attrs) {
  if (attrs.scale() != 0) return attrs.scale();
  return 1.0 / std::sqrt(static_cast<double>(attrs.head_dim()));
}

absl::Status CheckAttentionBlock(const v1::AttentionBlockAttrs& a,
                                 int64_t q_elements, int64_t k_elements,
                                 int64_t v_elements, int64_t s_in_elements,
                                 int64_t s_out_elements) {
  constexpr char kOp[] = "attention_block";
  RETURN_IF_ERROR(CheckDim(kOp, "batch", a.batch()));
  RETURN_IF_ERROR(CheckDim(kOp, "heads", a.heads()));
  RETURN_IF_ERROR(CheckDim(kOp, "kv_heads", a.kv_heads()));
  RETURN_IF_ERROR(CheckDim(kOp, "q_rows", a.q_rows()));
  RETURN_IF_ERROR(CheckDim(kOp, "kv_rows", a.kv_rows()));
  RETURN_IF_ERROR(CheckDim(kOp, "head_dim", a.head_dim()));
  if (a.heads() % a.kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_block.heads = ", a.heads(), " is not a multiple of kv_heads = ",
        a.kv_heads(), "; kv_heads must divide heads (grouped-query "
        "attention: head h reads kv head h / (heads / kv_heads))"));
  }
  if (!std::isfinite(a.scale())) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention_block.scale = ", a.scale(),
                     " must be finite (0 reads as 1 / sqrt(head_dim))"));
  }
  struct Positions {
    const char* field;
    int size;
    const char* rows_name;
    int64_t rows;
  };
  for (const Positions& p :
       {Positions{"q_position", a.q_position_size(), "q_rows", a.q_rows()},
        Positions{"kv_position", a.kv_position_size(), "kv_rows",
                  a.kv_rows()}}) {
    if (p.size == p.rows || (p.size == 0 && !a.causal())) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_block.", p.field, " has ", p.size, " entries; want ",
        p.rows_name, " = ", p.rows,
        a.causal() ? " (causal masks by the global position of every row)"
                   : " or none (without causal)"));
  }
  RETURN_IF_ERROR(CheckCount("Q", q_elements,
                             "batch * heads * q_rows * head_dim",
                             {a.batch(), a.heads(), a.q_rows(), a.head_dim()}));
  RETURN_IF_ERROR(
      CheckCount("K", k_elements, "batch * kv_heads * kv_rows * head_dim",
                 {a.batch(), a.kv_heads(), a.kv_rows(), a.head_dim()}));
  RETURN_IF_ERROR(
      CheckCount("V", v_elements, "batch * kv_heads * kv_rows * head_dim",
                 {a.batch(), a.kv_heads(), a.kv_rows(), a.head_dim()}));
  if (s_in_elements >= 0) {
    RETURN_IF_ERROR(CheckCount(
        "S", s_in_elements, "batch * heads * q_rows * (head_dim + 2)",
        {a.batch(), a.heads(), a.q_rows(), a.head_dim() + 2}, a.head_dim()));
  }
  RETURN_IF_ERROR(CheckCount(
      "S'", s_out_elements, "batch * heads * q_rows * (head_dim + 2)",
      {a.batch(), a.heads(), a.q_rows(), a.head_dim() + 2}, a.head_dim()));
  return absl::OkStatus();
}

absl::Status CheckAttentionFinish(const v1::AttentionFinishAttrs& f,
                                  int64_t s_elements, int64_t o_elements) {
  RETURN_IF_ERROR(CheckDim("attention_finish", "head_dim", f.head_dim()));
  const int64_t d = f.head_dim(), width = d + 2;
  if (s_elements < 0 || s_elements % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_finish.head_dim = ", d, ": S has ", s_elements,
        " elements, not whole rows of head_dim + 2 = ", width));
  }
  const int64_t rows = s_elements / width;
  if (o_elements != rows * d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_finish: O has ", o_elements,
        " elements; want rows(S) * head_dim = ", rows, " * ", d, " = ",
        rows * d));
  }
  return absl::OkStatus();
}

absl::Status RunAttentionBlock(const v1::AttentionBlockAttrs& attrs,
                               DType dtype, absl::Span<const uint8_t> q,
                               absl::Span<const uint8_t> k,
                               absl::Span<const uint8_t> v,
                               absl::Span<const uint8_t> state_in,
                               absl::Span<uint8_t> state_out) {
  EnsureBlasArch();
  RETURN_IF_ERROR(CheckFloatSpans("attention_block", dtype,
                                  {{"Q", q.size()},
                                   {"K", k.size()},
                                   {"V", v.size()},
                                   {"S", state_in.size()},
                                   {"S'", state_out.size()}}));
  const int64_t size = DTypeSize(dtype);
  auto count = [&](size_t bytes) { return static_cast<int64_t>(bytes) / size; };
  RETURN_IF_ERROR(CheckAttentionBlock(
      attrs, count(q.size()), count(k.size()), count(v.size()),
      state_in.empty() ? -1 : count(state_in.size()), count(state_out.size())));
  const bool in_place =
      !state_in.empty() && state_in.data() == state_out.data();
  const uint8_t* s_in = state_in.empty() ? nullptr : state_in.data();
  auto run = [&](uint8_t* to) {
    if (FloatAccumulator(dtype)) {
      AttentionBlockInto<float>(attrs, dtype, q.data(), k.data(), v.data(),
                                s_in, to);
    } else {
      AttentionBlockInto<double>(attrs, dtype, q.data(), k.data(), v.data(),
                                 s_in, to);
    }
  };
  // S' may be S exactly (each row is read before it is written).
  RunIntoOutput(state_out,
                {q, k, v, in_place ? absl::Span<const uint8_t>() : state_in},
                run);
  return absl::OkStatus();
}

absl::Status RunAttentionFinish(const v1::AttentionFinishAttrs& attrs,
                                DType dtype, absl::Span<const uint8_t> state,
                                absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(CheckFloatSpans("attention_finish", dtype,
                                  {{"S", state.size()}, {"O", out.size()}}));
  const int64_t size = DTypeSize(dtype);
  const int64_t s_elements = static_cast<int64_t>(state.size()) / size;
  RETURN_IF_ERROR(CheckAttentionFinish(attrs, s_elements,
                                       static_cast<int64_t>(out.size()) / size));
  const int64_t d = attrs.head_dim();
  const int64_t rows = s_elements / (d + 2);
  auto run = [&](uint8_t* to) {
    if (FloatAccumulator(dtype)) {
      AttentionFinishInto<float>(dtype, d, rows, state.data(), to);
    } else {
      AttentionFinishInto<double>(dtype, d, rows, state.data(), to);
    }
  };
  RunIntoOutput(out, {state}, run);
  return absl::OkStatus();
}

absl::Status CheckAttentionBackward(const v1::AttentionBackwardAttrs& attrs,
                                    int64_t q_elements, int64_t k_elements,
                                    int64_t v_elements, int64_t do_elements,
                                    int64_t o_elements, int64_t s_elements,
                                    int64_t out_elements) {
  constexpr char kOp[] = "attention_backward";
  if (attrs.target() != v1::AttentionBackwardAttrs::TARGET_DQ &&
      attrs.target() != v1::AttentionBackwardAttrs::TARGET_DKV) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_backward.target = ", static_cast<int>(attrs.target()),
        " is not one of TARGET_DQ (1), TARGET_DKV (2)"));
  }
  const v1::AttentionBlockAttrs& a = attrs.block();
  const absl::Status block =
      CheckAttentionBlock(a, q_elements, k_elements, v_elements, -1, s_elements);
  if (!block.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention_backward.block: ", block.message()));
  }
  RETURN_IF_ERROR(CheckCount("dO", do_elements,
                             "batch * heads * q_rows * head_dim",
                             {a.batch(), a.heads(), a.q_rows(), a.head_dim()},
                             -1, kOp));
  RETURN_IF_ERROR(CheckCount("O", o_elements,
                             "batch * heads * q_rows * head_dim",
                             {a.batch(), a.heads(), a.q_rows(), a.head_dim()},
                             -1, kOp));
  if (attrs.target() == v1::AttentionBackwardAttrs::TARGET_DQ) {
    return CheckCount("dQ", out_elements, "batch * heads * q_rows * head_dim",
                      {a.batch(), a.heads(), a.q_rows(), a.head_dim()}, -1,
                      kOp);
  }
  return CheckCount("dKV", out_elements,
                    "2 * batch * kv_heads * kv_rows * head_dim",
                    {2, a.batch(), a.kv_heads(), a.kv_rows(), a.head_dim()},
                    -1, kOp);
}

absl::Status RunAttentionBackward(const v1::AttentionBackwardAttrs& attrs,
                                  DType dtype, absl::Span<const uint8_t> q,
                                  absl::Span<const uint8_t> k,
                                  absl::Span<const uint8_t> v,
                                  absl::Span<const uint8_t> dout,
                                  absl::Span<const uint8_t> o,
                                  absl::Span<const uint8_t> state,
                                  absl::Span<uint8_t> out) {
  EnsureBlasArch();
  RETURN_IF_ERROR(CheckFloatSpans("attention_backward", dtype,
                                  {{"Q", q.size()},
                                   {"K", k.size()},
                                   {"V", v.size()},
                                   {"dO", dout.size()},
                                   {"O", o.size()},
                                   {"S", state.size()},
                                   {"out", out.size()}}));
  const int64_t size = DTypeSize(dtype);
  auto count = [&](size_t bytes) { return static_cast<int64_t>(bytes) / size; };
  RETURN_IF_ERROR(CheckAttentionBackward(
      attrs, count(q.size()), count(k.size()), count(v.size()),
      count(dout.size()), count(o.size()), count(state.size()),
      count(out.size())));
  auto run = [&](uint8_t* to) {
    if (FloatAccumulator(dtype)) {
      AttentionBackwardInto<float>(attrs, dtype, q.data(), k.data(), v.data(),
                                   dout.data(), o.data(), state.data(), to);
    } else {
      AttentionBackwardInto<double>(attrs, dtype, q.data(), k.data(),
                                    v.data(), dout.data(), o.data(),
                                    state.data(), to);
    }
  };
  // The output is read too when accumulating (a copy starts from it).
  RunIntoOutput(out, {q, k, v, dout, o, state}, run);
  return absl::OkStatus();
}

}  // namespace meshcast::worker
