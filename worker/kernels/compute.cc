#include "worker/kernels/compute.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/kernels/blas_arch.h"
#include "worker/kernels/element.h"
#include "worker/kernels/element_core.h"

namespace meshcast::worker {
namespace {

// OK if `bytes` holds exactly `elements` elements of `dtype`.
absl::Status CheckOperand(const v1::GemmAttrs& g, DType dtype,
                          const char* operand, const char* shape,
                          size_t bytes, int64_t elements) {
  const size_t size = DTypeSize(dtype);
  if (bytes % size != 0 || static_cast<int64_t>(bytes / size) != elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm m=", g.m(), " n=", g.n(), " k=", g.k(), ": operand ", operand,
        " (", shape, ") needs ", elements, " ", DTypeName(dtype),
        " elements but has ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Row-major op(A)(i, p) / op(B)(p, j) offsets.
inline int64_t AIndex(const v1::GemmAttrs& g, int64_t i, int64_t p) {
  return g.trans_a() ? p * g.m() + i : i * g.k() + p;
}
inline int64_t BIndex(const v1::GemmAttrs& g, int64_t p, int64_t j) {
  return g.trans_b() ? j * g.k() + p : p * g.n() + j;
}

// fp16 / bf16: op(B) converted to float once, each row of C accumulated in
// float over p (a loop over j the compiler vectorizes), rounded once.
void GemmHalf(const v1::GemmAttrs& g, DType dtype, const uint8_t* a,
              const uint8_t* b, uint8_t* c) {
  const int64_t m = g.m(), n = g.n(), k = g.k();
  const float alpha = static_cast<float>(GemmAlpha(g));
  std::vector<float> bf(static_cast<size_t>(k * n));
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      bf[p * n + j] =
          static_cast<float>(LoadElement(dtype, b + 2 * BIndex(g, p, j)));
    }
  }
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      const float aip =
          static_cast<float>(LoadElement(dtype, a + 2 * AIndex(g, i, p)));
      const float* brow = bf.data() + p * n;
      for (int64_t j = 0; j < n; ++j) row[j] += aip * brow[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      uint8_t* out = c + 2 * (i * n + j);
      float value = alpha * row[j];
      if (g.accumulate()) value += static_cast<float>(LoadElement(dtype, out));
      StoreElement(dtype, out, value);
    }
  }
}

// out[i] = fn(kType, in[i]) over element bits; kType a template argument so
// that the type switches inside element_core.h's functions fold away.
template <PatternType kType, typename Fn>
void MapBits(const uint8_t* in, uint8_t* out, int64_t count, Fn fn) {
  constexpr int kSize = PatternTypeSize(kType);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, in + kSize * i, kSize);
    bits = fn(kType, bits);
    std::memcpy(out + kSize * i, &bits, kSize);
  }
}

template <typename Fn>
void MapFloatBits(DType dtype, const uint8_t* in, uint8_t* out, int64_t count,
                  Fn fn) {
  switch (dtype) {
    case DType::kFloat16:
      return MapBits<PatternType::kFloat16>(in, out, count, fn);
    case DType::kBFloat16:
      return MapBits<PatternType::kBFloat16>(in, out, count, fn);
    case DType::kFloat32:
      return MapBits<PatternType::kFloat32>(in, out, count, fn);
    default:
      return MapBits<PatternType::kFloat64>(in, out, count, fn);
  }
}

template <PatternType kType>
uint64_t LoadBits(const uint8_t* at) {
  uint64_t bits = 0;
  std::memcpy(&bits, at, PatternTypeSize(kType));
  return bits;
}

// The float gather of RunGather (see compute.h) for weighted or k > 1
// steps: one row of accumulators, terms added in j order.
template <PatternType kType>
void GatherFloat(const v1::GatherAttrs& g, const uint8_t* x, const uint8_t* w,
                 int64_t rows_y, uint8_t* y) {
  constexpr int kSize = PatternTypeSize(kType);
  const int64_t row = g.row(), k = GatherK(g);
  std::vector<double> acc(static_cast<size_t>(row));
  for (int64_t i = 0; i < rows_y; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t source = g.index(i * k + j);
      if (source < 0) continue;
      const double weight =
          w == nullptr
              ? 1.0
              : CoreFloatValue(kType, LoadBits<kType>(w + kSize * (i * k + j)));
      const uint8_t* from = x + kSize * source * row;
      for (int64_t c = 0; c < row; ++c) {
        acc[c] = GatherMulAdd(
            kType, acc[c], weight,
            CoreFloatValue(kType, LoadBits<kType>(from + kSize * c)));
      }
    }
    uint8_t* to = y + kSize * i * row;
    for (int64_t c = 0; c < row; ++c) {
      const uint64_t bits = CoreFloatStoreBits(kType, acc[c]);
      std::memcpy(to + kSize * c, &bits, kSize);
    }
  }
}

// RunGather on validated, non-overlapping operands.
absl::Status GatherInto(const v1::GatherAttrs& g, DType dtype,
                        absl::Span<const uint8_t> x,
                        absl::Span<const uint8_t> w, absl::Span<uint8_t> y) {
  const int64_t size = DTypeSize(dtype);
  const int64_t row = g.row(), k = GatherK(g);
  const int64_t row_bytes = row * size;
  const int64_t rows_y = static_cast<int64_t>(y.size()) / row_bytes;
  if (k == 1 && w.empty()) {
    for (int64_t i = 0; i < rows_y; ++i) {
      const int64_t source = g.index(i);
      uint8_t* to = y.data() + i * row_bytes;
      if (source < 0) {
        std::memset(to, 0, row_bytes);
      } else {
        std::memcpy(to, x.data() + source * row_bytes, row_bytes);
      }
    }
    return absl::OkStatus();
  }
  if (IsIntegerDType(dtype)) {
    // Wrapping sums; only unweighted reaches here.
    std::vector<uint64_t> acc(static_cast<size_t>(row));
    for (int64_t i = 0; i < rows_y; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t source = g.index(i * k + j);
        if (source < 0) continue;
        const uint8_t* from = x.data() + source * row_bytes;
        for (int64_t c = 0; c < row; ++c) {
          acc[c] += static_cast<uint64_t>(LoadInteger(dtype, from + size * c));
        }
      }
      for (int64_t c = 0; c < row; ++c) {
        StoreInteger(dtype, y.data() + i * row_bytes + size * c,
                     static_cast<int64_t>(acc[c]));
      }
    }
    return absl::OkStatus();
  }
  const uint8_t* wp = w.empty() ? nullptr : w.data();
  switch (dtype) {
    case DType::kFloat16:
      GatherFloat<PatternType::kFloat16>(g, x.data(), wp, rows_y, y.data());
      break;
    case DType::kBFloat16:
      GatherFloat<PatternType::kBFloat16>(g, x.data(), wp, rows_y, y.data());
      break;
    case DType::kFloat32:
      GatherFloat<PatternType::kFloat32>(g, x.data(), wp, rows_y, y.data());
      break;
    default:
      GatherFloat<PatternType::kFloat64>(g, x.data(), wp, rows_y, y.data());
      break;
  }
  return absl::OkStatus();
}

// The row dot of RunRowDot (see compute.h) on validated operands: one
// accumulator per D element, the columns in order.
template <PatternType kType>
void RowDotFloat(const v1::RowDotAttrs& r, const uint8_t* a, const uint8_t* b,
                 int64_t count, uint8_t* d) {
  constexpr int kSize = PatternTypeSize(kType);
  const int64_t row = r.row();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t ra = r.index(2 * i), rb = r.index(2 * i + 1);
    double acc = 0;
    if (ra >= 0 && rb >= 0) {
      const uint8_t* from_a = a + kSize * ra * row;
      const uint8_t* from_b = b + kSize * rb * row;
      for (int64_t c = 0; c < row; ++c) {
        acc = GatherMulAdd(
            kType, acc,
            CoreFloatValue(kType, LoadBits<kType>(from_a + kSize * c)),
            CoreFloatValue(kType, LoadBits<kType>(from_b + kSize * c)));
      }
    }
    const uint64_t bits = CoreFloatStoreBits(kType, acc);
    std::memcpy(d + kSize * i, &bits, kSize);
  }
}

void RowDotInto(const v1::RowDotAttrs& r, DType dtype, const uint8_t* a,
                const uint8_t* b, int64_t count, uint8_t* d) {
  switch (dtype) {
    case DType::kFloat16:
      return RowDotFloat<PatternType::kFloat16>(r, a, b, count, d);
    case DType::kBFloat16:
      return RowDotFloat<PatternType::kBFloat16>(r, a, b, count, d);
    case DType::kFloat32:
      return RowDotFloat<PatternType::kFloat32>(r, a, b, count, d);
    default:
      return RowDotFloat<PatternType::kFloat64>(r, a, b, count, d);
  }
}

// out[i] = fn(kType, in0[i], in1[i]) over element bits (see MapBits).
template <PatternType kType, typename Fn>
void ZipBits(const uint8_t* in0, const uint8_t* in1, uint8_t* out,
             int64_t count, Fn fn) {
  constexpr int kSize = PatternTypeSize(kType);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t x = 0, y = 0;
    std::memcpy(&x, in0 + kSize * i, kSize);
    std::memcpy(&y, in1 + kSize * i, kSize);
    const uint64_t bits = fn(kType, x, y);
    std::memcpy(out + kSize * i, &bits, kSize);
  }
}

template <typename Fn>
void ZipFloatBits(DType dtype, const uint8_t* in0, const uint8_t* in1,
                  uint8_t* out, int64_t count, Fn fn) {
  switch (dtype) {
    case DType::kFloat16:
      return ZipBits<PatternType::kFloat16>(in0, in1, out, count, fn);
    case DType::kBFloat16:
      return ZipBits<PatternType::kBFloat16>(in0, in1, out, count, fn);
    case DType::kFloat32:
      return ZipBits<PatternType::kFloat32>(in0, in1, out, count, fn);
    default:
      return ZipBits<PatternType::kFloat64>(in0, in1, out, count, fn);
  }
}

}  // namespace

bool Overlaps(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  if (a.empty() || b.empty()) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data());
  const auto b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + b.size() && b0 < a0 + a.size();
}

const char* ElementwiseName(v1::ElementwiseAttrs::Kind kind) {
  switch (kind) {
    case v1::ElementwiseAttrs::KIND_ADD:
      return "add";
    case v1::ElementwiseAttrs::KIND_SCALE:
      return "scale";
    case v1::ElementwiseAttrs::KIND_RELU:
      return "relu";
    case v1::ElementwiseAttrs::KIND_SIGMOID:
      return "sigmoid";
    case v1::ElementwiseAttrs::KIND_RELU_GRAD:
      return "relu_grad";
    case v1::ElementwiseAttrs::KIND_SIGMOID_GRAD:
      return "sigmoid_grad";
    default:
      return "unknown";
  }
}

bool ElementwiseNeedsFloat(v1::ElementwiseAttrs::Kind kind) {
  return kind == v1::ElementwiseAttrs::KIND_RELU ||
         kind == v1::ElementwiseAttrs::KIND_SIGMOID ||
         kind == v1::ElementwiseAttrs::KIND_RELU_GRAD ||
         kind == v1::ElementwiseAttrs::KIND_SIGMOID_GRAD;
}

int ElementwiseInputs(v1::ElementwiseAttrs::Kind kind) {
  switch (kind) {
    case v1::ElementwiseAttrs::KIND_ADD:
    case v1::ElementwiseAttrs::KIND_RELU_GRAD:
    case v1::ElementwiseAttrs::KIND_SIGMOID_GRAD:
      return 2;
    case v1::ElementwiseAttrs::KIND_SCALE:
    case v1::ElementwiseAttrs::KIND_RELU:
    case v1::ElementwiseAttrs::KIND_SIGMOID:
      return 1;
    default:
      return 0;
  }
}

absl::Status CheckGather(const v1::GatherAttrs& g, int64_t x_elements,
                         int64_t w_elements, int64_t y_elements) {
  if (g.row() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather.row = ", g.row(), " must be >= 1 (elements per row)"));
  }
  if (g.k() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gather.k = ", g.k(),
                     " must be >= 0 (terms per output row; 0 reads "
                     "as 1)"));
  }
  const int64_t row = g.row();
  if (x_elements % row != 0 || y_elements % row != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather.row = ", row, ": X has ", x_elements, " elements and Y ",
        y_elements, "; both must be whole rows (multiples of row)"));
  }
  const int64_t rows_x = x_elements / row, rows_y = y_elements / row;
  const int64_t k = GatherK(g);
  const int64_t entries = rows_y * k;
  if (g.index_size() != entries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather.index has ", g.index_size(),
        " entries; it needs rows(Y) * k = ", rows_y, " * ", k, " = ", entries));
  }
  if (w_elements >= 0 && w_elements != entries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather: W has ", w_elements, " elements; it needs rows(Y) * k = ",
        rows_y, " * ", k, " = ", entries, " (one weight per index)"));
  }
  for (int i = 0; i < g.index_size(); ++i) {
    const int64_t v = g.index(i);
    if (v < -1 || v >= rows_x) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gather.index[", i, "] = ", v, " is outside [-1, rows(X) = ", rows_x,
          "); -1 adds nothing, others name a row of X"));
    }
  }
  return absl::OkStatus();
}

absl::Status RunGather(const v1::GatherAttrs& g, DType dtype,
                       absl::Span<const uint8_t> x, absl::Span<const uint8_t> w,
                       absl::Span<uint8_t> y) {
  const size_t size = DTypeSize(dtype);
  if (x.size() % size != 0 || w.size() % size != 0 || y.size() % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather on ", DTypeName(dtype), ": X has ", x.size(), " bytes, W ",
        w.size(), ", Y ", y.size(), "; each must be a multiple of ", size));
  }
  RETURN_IF_ERROR(
      CheckGather(g, static_cast<int64_t>(x.size() / size),
                  w.empty() ? -1 : static_cast<int64_t>(w.size() / size),
                  static_cast<int64_t>(y.size() / size)));
  if (IsIntegerDType(dtype) && !w.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "gather with weights on ", DTypeName(dtype),
        " is not supported; allowed: float16, bfloat16, float32, float64 "
        "(integer dtypes gather without W)"));
  }
  const absl::Span<const uint8_t> out(y.data(), y.size());
  if (Overlaps(out, x) || Overlaps(out, w)) {
    std::vector<uint8_t> copy(y.size());
    RETURN_IF_ERROR(GatherInto(g, dtype, x, w, absl::MakeSpan(copy)));
    std::memcpy(y.data(), copy.data(), copy.size());
    return absl::OkStatus();
  }
  return GatherInto(g, dtype, x, w, y);
}

absl::Status CheckRowDot(const v1::RowDotAttrs& r, int64_t a_elements,
                         int64_t b_elements, int64_t d_elements) {
  if (r.row() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot.row = ", r.row(), " must be >= 1 (elements per row)"));
  }
  const int64_t row = r.row();
  if (a_elements % row != 0 || b_elements % row != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot.row = ", row, ": A has ", a_elements, " elements and B ",
        b_elements, "; both must be whole rows (multiples of row)"));
  }
  const int64_t rows_a = a_elements / row, rows_b = b_elements / row;
  if (r.index_size() != 2 * d_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot.index has ", r.index_size(),
        " entries; it needs 2 * elements(D) = 2 * ", d_elements, " = ",
        2 * d_elements, " (a row of A and a row of B per element)"));
  }
  for (int i = 0; i < r.index_size(); ++i) {
    const int64_t v = r.index(i);
    const bool of_a = i % 2 == 0;
    const int64_t rows = of_a ? rows_a : rows_b;
    if (v < -1 || v >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("row_dot.index[", i, "] = ", v, " is outside [-1, rows(",
                       of_a ? "A" : "B", ") = ", rows,
                       "); -1 makes the element 0, others name a row of ",
                       of_a ? "A (even entries)" : "B (odd entries)"));
    }
  }
  return absl::OkStatus();
}

absl::Status RunRowDot(const v1::RowDotAttrs& r, DType dtype,
                       absl::Span<const uint8_t> a, absl::Span<const uint8_t> b,
                       absl::Span<uint8_t> d) {
  if (IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  const size_t size = DTypeSize(dtype);
  if (a.size() % size != 0 || b.size() % size != 0 || d.size() % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot on ", DTypeName(dtype), ": A has ", a.size(), " bytes, B ",
        b.size(), ", D ", d.size(), "; each must be a multiple of ", size));
  }
  const int64_t count = static_cast<int64_t>(d.size() / size);
  RETURN_IF_ERROR(CheckRowDot(r, static_cast<int64_t>(a.size() / size),
                              static_cast<int64_t>(b.size() / size), count));
  const absl::Span<const uint8_t> out(d.data(), d.size());
  if (Overlaps(out, a) || Overlaps(out, b)) {
    std::vector<uint8_t> copy(d.size());
    RowDotInto(r, dtype, a.data(), b.data(), count, copy.data());
    std::memcpy(d.data(), copy.data(), copy.size());
    return absl::OkStatus();
  }
  RowDotInto(r, dtype, a.data(), b.data(), count, d.data());
  return absl::OkStatus();
}

int64_t ScaleInteger(int64_t value, double alpha) {
  return CoreScaleInteger(value, alpha);
}

absl::Status RunGemm(const v1::GemmAttrs& g, DType dtype,
                     absl::Span<const uint8_t> a, absl::Span<const uint8_t> b,
                     absl::Span<uint8_t> c) {
  constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
  if (g.m() < 0 || g.n() < 0 || g.k() < 0 || g.m() > kMaxDim ||
      g.n() > kMaxDim || g.k() > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm m=", g.m(), " n=", g.n(), " k=", g.k(),
        ": every dimension must be in [0, ", kMaxDim, "]"));
  }
  RETURN_IF_ERROR(CheckOperand(g, dtype, "A", g.trans_a() ? "k x m" : "m x k",
                               a.size(), g.m() * g.k()));
  RETURN_IF_ERROR(CheckOperand(g, dtype, "B", g.trans_b() ? "n x k" : "k x n",
                               b.size(), g.k() * g.n()));
  RETURN_IF_ERROR(
      CheckOperand(g, dtype, "C", "m x n", c.size(), g.m() * g.n()));
  if (g.m() == 0 || g.n() == 0) return absl::OkStatus();
  EnsureBlasArch();
  const int m = static_cast<int>(g.m());
  const int n = static_cast<int>(g.n());
  const int k = static_cast<int>(g.k());
  const CBLAS_TRANSPOSE ta = g.trans_a() ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b() ? CblasTrans : CblasNoTrans;
  const int lda = g.trans_a() ? m : k;
  const int ldb = g.trans_b() ? k : n;
  const double alpha = GemmAlpha(g);
  const double beta = g.accumulate() ? 1.0 : 0.0;
  switch (dtype) {
    case DType::kFloat32:
      // CBLAS insists on lda >= 1 even when k == 0.
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha),
                  reinterpret_cast<const float*>(a.data()), std::max(lda, 1),
                  reinterpret_cast<const float*>(b.data()), std::max(ldb, 1),
                  static_cast<float>(beta), reinterpret_cast<float*>(c.data()),
                  n);
      return absl::OkStatus();
    case DType::kFloat64:
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha,
                  reinterpret_cast<const double*>(a.data()), std::max(lda, 1),
                  reinterpret_cast<const double*>(b.data()), std::max(ldb, 1),
                  beta, reinterpret_cast<double*>(c.data()), n);
      return absl::OkStatus();
    case DType::kFloat16:
    case DType::kBFloat16:
      GemmHalf(g, dtype, a.data(), b.data(), c.data());
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat(
          "gemm on ", DTypeName(dtype),
          " is not supported; allowed: float16, bfloat16, float32, float64"));
  }
}

absl::Status RunElementwise(const v1::ElementwiseAttrs& attrs, DType dtype,
                            const std::vector<absl::Span<const uint8_t>>& inputs,
                            absl::Span<uint8_t> out) {
  const size_t want_inputs = ElementwiseInputs(attrs.kind());
  if (want_inputs == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("elementwise kind ", static_cast<int>(attrs.kind()),
                     " is unknown; allowed: ", kElementwiseKinds));
  }
  const char* name = ElementwiseName(attrs.kind());
  if (inputs.size() != want_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("elementwise ", name, " takes ", want_inputs,
                     " inputs, got ", inputs.size()));
  }
  if (ElementwiseNeedsFloat(attrs.kind()) && IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elementwise ", name, " on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  const size_t size = DTypeSize(dtype);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].size() != out.size() || out.size() % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "elementwise ", name, " on ", DTypeName(dtype), ": input ", i,
          " has ", inputs[i].size(), " bytes and the output ", out.size(),
          "; all must be the same multiple of ", size));
    }
  }
  const int64_t count = static_cast<int64_t>(out.size() / size);
  const uint8_t* in0 = inputs[0].data();
  uint8_t* o = out.data();
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_ADD) {
    const uint8_t* in1 = inputs[1].data();
    switch (dtype) {
      case DType::kFloat32:
        for (int64_t i = 0; i < count; ++i) {
          float x, y;
          std::memcpy(&x, in0 + 4 * i, 4);
          std::memcpy(&y, in1 + 4 * i, 4);
          const float r = x + y;
          std::memcpy(o + 4 * i, &r, 4);
        }
        break;
      case DType::kFloat64:
        for (int64_t i = 0; i < count; ++i) {
          double x, y;
          std::memcpy(&x, in0 + 8 * i, 8);
          std::memcpy(&y, in1 + 8 * i, 8);
          const double r = x + y;
          std::memcpy(o + 8 * i, &r, 8);
        }
        break;
      case DType::kFloat16:
      case DType::kBFloat16:
        for (int64_t i = 0; i < count; ++i) {
          const float r = static_cast<float>(LoadElement(dtype, in0 + 2 * i)) +
                          static_cast<float>(LoadElement(dtype, in1 + 2 * i));
          StoreElement(dtype, o + 2 * i, r);
        }
        break;
      default:
        for (int64_t i = 0; i < count; ++i) {
          const uint64_t r =
              static_cast<uint64_t>(LoadInteger(dtype, in0 + size * i)) +
              static_cast<uint64_t>(LoadInteger(dtype, in1 + size * i));
          StoreInteger(dtype, o + size * i, static_cast<int64_t>(r));
        }
        break;
    }
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_RELU &&
      dtype == DType::kFloat32) {
    // ReluBits' result on float values, in a loop that vectorizes: x < 0
    // gives +0 (all zero bits); -0 and NaN compare false and stay.
    for (int64_t i = 0; i < count; ++i) {
      float x;
      std::memcpy(&x, in0 + 4 * i, 4);
      const float r = x < 0.0f ? 0.0f : x;
      std::memcpy(o + 4 * i, &r, 4);
    }
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_RELU_GRAD &&
      dtype == DType::kFloat32) {
    // ReluGradBits' result: the gradient's bits where y > 0, else +0.
    const uint8_t* in1 = inputs[1].data();
    for (int64_t i = 0; i < count; ++i) {
      float g, y;
      std::memcpy(&g, in0 + 4 * i, 4);
      std::memcpy(&y, in1 + 4 * i, 4);
      const float r = y > 0.0f ? g : 0.0f;
      std::memcpy(o + 4 * i, &r, 4);
    }
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_RELU) {
    MapFloatBits(dtype, in0, o, count, [](PatternType type, uint64_t bits) {
      return ReluBits(type, bits);
    });
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_SIGMOID) {
    MapFloatBits(dtype, in0, o, count, [](PatternType type, uint64_t bits) {
      return SigmoidBits(type, bits);
    });
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_RELU_GRAD) {
    ZipFloatBits(dtype, in0, inputs[1].data(), o, count,
                 [](PatternType type, uint64_t g, uint64_t y) {
                   return ReluGradBits(type, g, y);
                 });
    return absl::OkStatus();
  }
  if (attrs.kind() == v1::ElementwiseAttrs::KIND_SIGMOID_GRAD) {
    ZipFloatBits(dtype, in0, inputs[1].data(), o, count,
                 [](PatternType type, uint64_t g, uint64_t s) {
                   return SigmoidGradBits(type, g, s);
                 });
    return absl::OkStatus();
  }
  const double alpha = attrs.alpha();
  if (IsIntegerDType(dtype)) {
    for (int64_t i = 0; i < count; ++i) {
      StoreInteger(dtype, o + size * i,
                   ScaleInteger(LoadInteger(dtype, in0 + size * i), alpha));
    }
  } else if (dtype == DType::kFloat32) {
    for (int64_t i = 0; i < count; ++i) {
      float x;
      std::memcpy(&x, in0 + 4 * i, 4);
      const float r = static_cast<float>(alpha * static_cast<double>(x));
      std::memcpy(o + 4 * i, &r, 4);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      StoreElement(dtype, o + size * i,
                   alpha * LoadElement(dtype, in0 + size * i));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast::worker
