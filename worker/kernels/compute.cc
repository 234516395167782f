#include "worker/kernels/compute.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
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

}  // namespace

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
      // OpenBLAS insists on lda >= 1 even when k == 0.
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
  size_t want_inputs = 0;
  switch (attrs.kind()) {
    case v1::ElementwiseAttrs::KIND_ADD:
      want_inputs = 2;
      break;
    case v1::ElementwiseAttrs::KIND_SCALE:
      want_inputs = 1;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("elementwise kind ", static_cast<int>(attrs.kind()),
                       " is unknown; allowed: KIND_ADD, KIND_SCALE"));
  }
  const char* name =
      attrs.kind() == v1::ElementwiseAttrs::KIND_ADD ? "add" : "scale";
  if (inputs.size() != want_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("elementwise ", name, " takes ", want_inputs,
                     " inputs, got ", inputs.size()));
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
