#include "worker/kernels/reference.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "planner/ir/step_order.h"
#include "proto/dtype_convert.h"
#include "util/host_bytes.h"
#include "util/parallel_for.h"
#include "util/status_macros.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/blas_arch.h"
#include "worker/kernels/box_index.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"

namespace meshcast::worker {

using kernels_internal::BoxContains;
using kernels_internal::CoordInBox;
using kernels_internal::CoordOfIndex;
using kernels_internal::GlobalIndex;
using kernels_internal::OffsetInBox;

namespace {

// A coordinate without a heap allocation for ranks up to 8.
using Coord = absl::InlinedVector<int64_t, 8>;

// Above this many op(A) + op(B) elements a GEMM's operands are evaluated
// per output element instead of once into arrays (2^24 elements = 256 MiB
// of values and scales).
constexpr int64_t kMaterializeLimit = int64_t{1} << 24;

// The elements of one GEMM computed from rows and columns evaluated on
// demand before its whole operands are (GemmCache): a sampled check of a
// dozen tiles of the same GEMM stays below it.
constexpr int64_t kLazyGemmCalls = 65536;

// n doubles, uninitialized, on huge pages when large (util/host_bytes.h): a
// GEMM's float64 operands and output run to hundreds of MiB, and faulting
// them in page by page cost a full check more than computing them.
class Doubles {
 public:
  Doubles() = default;
  explicit Doubles(int64_t n)
      : bytes_(n > 0 ? AllocateHostBytes(n * int64_t{sizeof(double)})
                     : nullptr) {}
  double* data() { return reinterpret_cast<double*>(bytes_.get()); }
  const double* data() const {
    return reinterpret_cast<const double*>(bytes_.get());
  }
  double& operator[](int64_t i) { return data()[i]; }
  double operator[](int64_t i) const { return data()[i]; }

 private:
  HostBytes bytes_;
};

// Elements of a GEMM operand evaluated per task when it is built whole.
constexpr int64_t kOperandBlock = 65536;

// Where element p of row `index` of op(A) (operand 0) or of column `index`
// of op(B) (operand 1) is stored, row-major over the operand's box: A's
// i * k + p (transposed: p * m + i), B's p * n + j (transposed: j * k + p).
int64_t OperandOffset(const v1::GemmAttrs& g, int operand, int64_t index,
                      int64_t p) {
  if (operand == 0) return g.trans_a() ? p * g.m() + index : index * g.k() + p;
  return g.trans_b() ? index * g.k() + p : p * g.n() + index;
}

Box BoxFromProto(const google::protobuf::RepeatedPtrField<v1::Interval>& p) {
  Box box;
  box.reserve(p.size());
  for (const v1::Interval& i : p) box.push_back({i.begin(), i.end()});
  return box;
}

// Integer view of a value of dtype `from`.
int64_t IntegerOf(const Expected& e, DType from) {
  return IsIntegerDType(from) ? e.integer : DoubleToWrappedInt64(e.value);
}

// `e` as stored in `to`: integers wrap (exactly), floats stay in float64.
Expected ConvertTo(Expected e, DType from, DType to) {
  if (IsIntegerDType(to)) {
    e.integer = WrapInteger(to, IntegerOf(e, from));
    e.value = static_cast<double>(e.integer);
    e.scale = std::abs(e.value);
    e.terms = 0;
    e.clamped_from = 0;
  } else if (IsIntegerDType(from)) {
    e.value = static_cast<double>(e.integer);
    e.scale = std::abs(e.value);
    e.integer = 0;
  }
  return e;
}

}  // namespace

// One output operand region of a value-defining step.
struct Reference::Definition {
  Box box;
  int step = 0;  // index into steps_ (dependency order)
};

struct Reference::StepInfo {
  int id = 0;
  int index = 0;  // position in dependency order
  v1::Step::Op op = v1::Step::OP_UNSPECIFIED;
  v1::Reduction reduction = v1::REDUCTION_SUM;
  int out_tensor = -1;
  // Input operands: tensor and box (reductions / all-to-all: inputs[0]'s
  // tensor only).
  std::vector<int> in_tensors;
  std::vector<Box> in_boxes;
  // All-to-all: n, the start of block (r, s) of IN (index r * n + s) and
  // the prefix sums of OUT's blocks in receiver-major order (b = s * n + r).
  int n = 0;
  std::vector<int64_t> in_start;
  std::vector<int64_t> out_prefix;
  // Compute.
  bool gemm = false;
  v1::GemmAttrs gemm_attrs;
  bool gather = false;
  v1::GatherAttrs gather_attrs;
  bool row_dot = false;
  v1::RowDotAttrs row_dot_attrs;
  bool attention_block = false;
  v1::AttentionBlockAttrs attention_attrs;
  bool attention_finish = false;
  v1::AttentionFinishAttrs finish_attrs;
  bool attention_backward = false;
  v1::AttentionBackwardAttrs backward_attrs;
  v1::ElementwiseAttrs elementwise;
  std::unique_ptr<GemmCache> cache;
  std::unique_ptr<AttentionCache> attention;
  std::unique_ptr<BackwardCache> backward;
};

// An attention backward's output (dQ, or dK then dV), computed per (batch,
// kv head) on the first element of it asked for: a dK or dV element sums
// over every query row of the kv head's heads, each of which needs a whole
// score row, and those rows give the heads' dQ rows too. Without the
// previous values (accumulate adds them per element).
struct Reference::BackwardCache {
  BackwardCache(int64_t groups, int64_t elements)
      : once(new std::once_flag[groups]),
        value(elements, 0.0),
        scale(elements, 0.0),
        terms(elements, 0) {}
  std::unique_ptr<std::once_flag[]> once;  // b * kv_heads + kv head
  std::vector<double> value, scale;
  std::vector<int64_t> terms;
};

// A row of op(A) or a column of op(B): k values and scales, and the
// largest terms among them.
struct Reference::GemmVector {
  std::vector<double> value, scale;
  int64_t terms = 0;
};

// op(A) (m x k) and op(B) (k x n), row-major, as values and scales; the
// largest `terms` of each; and the output C (m x n) as sums and scales, in
// blocks of rows, each built on the first element asked for in it: a
// worker checks only its own rows, and of an output a collective summed
// over ranks, its rows of every rank's GEMM.
//
// A few elements (a sampled check) need only a few rows of op(A) and columns
// of op(B): the first kLazyGemmCalls elements asked for are computed from
// those, each evaluated once on its first use; past that, or from the
// start once a full check of a large buffer has begun (whole_gemms_), the
// whole operands and the output's blocks are built as above, which the
// BLAS does far faster per element than dot products do.
struct Reference::GemmCache {
  GemmCache(int64_t m, int64_t n)
      : row_once(new std::once_flag[m]),
        column_once(new std::once_flag[n]),
        rows(m),
        columns(n) {}
  std::unique_ptr<std::once_flag[]> row_once, column_once;
  std::vector<GemmVector> rows, columns;
  std::atomic<int64_t> calls{0};

  std::once_flag once;
  bool materialized = false;
  Doubles a_value, a_scale, b_value, b_scale;
  int64_t a_terms = 0, b_terms = 0;
  std::once_flag output_once;  // allocates the output and its flags
  bool output_ready = false;   // false: too large, dot products instead
  std::unique_ptr<std::once_flag[]> output_block_once;
  Doubles c_sum, c_scale;
};

// An attention block's memos. K and V of each (batch, kv head), evaluated
// once on first use: K transposed (head_dim x kv_rows, so that a row's
// scores are a loop over keys the compiler vectorizes), V row-major
// (kv_rows x head_dim), values and scales, with the largest terms of each.
// And each output state row (b, h, i), head_dim + 2 entries, computed once
// on first use: every element of a row needs the whole row (its maximum
// and its exponentials), and the next block's row needs all of it again.
struct Reference::AttentionCache {
  struct KvHead {
    std::vector<double> k_value, k_scale, v_value, v_scale;
    int64_t k_terms = 0, v_terms = 0;
  };
  struct Entry {
    double value = 0;
    double scale = 0;
    int64_t terms = 0;
  };
  AttentionCache(int64_t kv_count, int64_t row_count)
      : kv_once(new std::once_flag[kv_count]),
        kv(kv_count),
        row_once(new std::once_flag[row_count]),
        rows(row_count) {}
  std::unique_ptr<std::once_flag[]> kv_once;
  std::vector<KvHead> kv;  // b * kv_heads + kvh
  std::unique_ptr<std::once_flag[]> row_once;
  std::vector<std::vector<Entry>> rows;  // (b * heads + h) * q_rows + i
};

Reference::Reference() = default;
Reference::~Reference() = default;

bool IsOperandCopy(const v1::Step& step) {
  return step.op() == v1::Step::OP_SEND_RECV && step.slice().empty() &&
         (step.inputs_size() > 0 || step.outputs_size() > 0);
}

Tolerance ToleranceFor(DType dtype, int64_t terms) {
  int mantissa = 0;
  int min_exponent = 0;  // of the smallest subnormal
  switch (dtype) {
    case DType::kFloat16:
      mantissa = 10, min_exponent = -24;
      break;
    case DType::kBFloat16:
      mantissa = 7, min_exponent = -133;
      break;
    case DType::kFloat32:
      mantissa = 23, min_exponent = -149;
      break;
    case DType::kFloat64:
      mantissa = 52, min_exponent = -1074;
      break;
    default:
      return Tolerance{0, 0};
  }
  const double t = static_cast<double>(std::max<int64_t>(terms, 0));
  return Tolerance{t * std::ldexp(1.0, min_exponent),
                   t * std::ldexp(1.0, -(mantissa + 1)) * 1.125};
}

absl::StatusOr<std::unique_ptr<Reference>> Reference::Create(
    const v1::Plan& plan) {
  std::unique_ptr<Reference> ref(new Reference());
  RETURN_IF_ERROR(ref->Build(plan));
  return ref;
}

absl::Status Reference::Build(const v1::Plan& plan) {
  for (int t = 0; t < plan.tensors_size(); ++t) {
    TensorSpec spec;
    spec.shape.assign(plan.tensors(t).shape().begin(),
                      plan.tensors(t).shape().end());
    ASSIGN_OR_RETURN(spec.dtype,
                     DTypeFromProto(plan.tensors(t).dtype(),
                                    absl::StrCat("plan.tensors[", t, "].dtype")));
    for (int64_t extent : spec.shape) {
      if (extent < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan.tensors[", t, "] has a negative extent ", extent));
      }
    }
    tensors_.push_back(std::move(spec));
    v1::Initializer init;
    if (t < plan.tensor_inits_size()) init = plan.tensor_inits(t);
    RETURN_IF_ERROR(CheckInitializer(init, t));
    inits_.push_back(init);
  }
  defs_.resize(tensors_.size());

  struct BufferInfo {
    int tensor;
    Box box;
  };
  absl::flat_hash_map<int, BufferInfo> buffers;
  for (const v1::Buffer& b : plan.buffers()) {
    if (b.tensor() < 0 || b.tensor() >= num_tensors()) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", b.id(), " names tensor ", b.tensor(),
                       "; the plan has ", num_tensors()));
    }
    Box box = BoxFromProto(b.box());
    const TensorSpec& spec = tensors_[b.tensor()];
    if (box.size() != spec.shape.size() || !Contains(spec.full_box(), box)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", b.id(), " box ", BoxToString(box),
          " is not inside tensor ", b.tensor(), " ",
          BoxToString(spec.full_box())));
    }
    buffers[b.id()] = BufferInfo{b.tensor(), std::move(box)};
  }

  // An operand's tensor and box (the slice, or the whole buffer).
  auto operand = [&](const v1::Step& s, const v1::Operand& o,
                     const char* what, int index, int* tensor,
                     Box* box) -> absl::Status {
    auto it = buffers.find(o.buffer());
    if (it == buffers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", s.id(), " ", what, "[", index,
                       "] names buffer ", o.buffer(), ", not in the plan"));
    }
    *tensor = it->second.tensor;
    if (o.slice().empty()) {
      *box = it->second.box;
      return absl::OkStatus();
    }
    *box = BoxFromProto(o.slice());
    if (box->size() != it->second.box.size() ||
        !Contains(it->second.box, *box)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", s.id(), " ", what, "[", index, "] slice ",
          BoxToString(*box), " is not inside buffer ", o.buffer(), " box ",
          BoxToString(it->second.box)));
    }
    return absl::OkStatus();
  };

  // Dependency order of the value-defining steps (ties by plan position);
  // deps on steps outside the plan (or on moves) only order what they can.
  ASSIGN_OR_RETURN(const std::vector<int> order,
                   StepsInDependencyOrder(
                       plan, StepOrderOptions{.skip_unknown_deps = true}));

  for (int i : order) {
    const v1::Step& s = plan.steps(i);
    switch (s.op()) {
      case v1::Step::OP_ALL_REDUCE:
      case v1::Step::OP_REDUCE_SCATTER:
      case v1::Step::OP_ALL_TO_ALL:
      case v1::Step::OP_COMPUTE:
        break;
      case v1::Step::OP_SEND_RECV:
        if (IsOperandCopy(s)) break;
        continue;  // the tensor form moves values within a tensor
      default:
        continue;  // moves do not change values
    }
    StepInfo info;
    info.id = s.id();
    info.index = static_cast<int>(steps_.size());
    info.op = s.op();
    if (s.outputs().empty() || s.inputs().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", s.id(), " (", v1::Step::Op_Name(s.op()),
                       ") needs inputs and outputs"));
    }
    std::vector<Box> out_boxes;
    for (int o = 0; o < s.outputs_size(); ++o) {
      int tensor;
      Box box;
      RETURN_IF_ERROR(operand(s, s.outputs(o), "outputs", o, &tensor, &box));
      if (info.out_tensor >= 0 && tensor != info.out_tensor) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), " outputs name tensors ", info.out_tensor,
            " and ", tensor, "; all outputs must be of one tensor"));
      }
      info.out_tensor = tensor;
      out_boxes.push_back(std::move(box));
    }
    for (int o = 0; o < s.inputs_size(); ++o) {
      int tensor;
      Box box;
      RETURN_IF_ERROR(operand(s, s.inputs(o), "inputs", o, &tensor, &box));
      info.in_tensors.push_back(tensor);
      info.in_boxes.push_back(std::move(box));
    }
    const TensorSpec& out = tensors_[info.out_tensor];
    const TensorSpec& in = tensors_[info.in_tensors[0]];
    if (s.op() == v1::Step::OP_ALL_REDUCE ||
        s.op() == v1::Step::OP_REDUCE_SCATTER) {
      if (s.reduction() != v1::REDUCTION_SUM &&
          s.reduction() != v1::REDUCTION_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), " reduction ", static_cast<int>(s.reduction()),
            " is unknown; allowed: REDUCTION_SUM, REDUCTION_MAX"));
      }
      info.reduction = s.reduction();
      if (in.shape.size() != out.shape.size() + 1 ||
          !std::equal(out.shape.begin(), out.shape.end(),
                      in.shape.begin() + 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), ": input tensor ", info.in_tensors[0], " [",
            absl::StrJoin(in.shape, ","), "] must be [n] + output tensor ",
            info.out_tensor, "'s shape [", absl::StrJoin(out.shape, ","), "]"));
      }
    } else if (s.op() == v1::Step::OP_ALL_TO_ALL) {
      const int64_t cells = s.counts_size();
      int n = static_cast<int>(std::llround(std::sqrt(double(cells))));
      if (int64_t{n} * n != cells || n == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), ": all-to-all counts has ", cells,
            " entries; it must be n x n for a group of n"));
      }
      info.n = n;
      int64_t total = 0;
      info.in_start.resize(cells);
      for (int64_t b = 0; b < cells; ++b) {
        if (s.counts(b) < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": all-to-all counts[", b, "] is negative"));
        }
        info.in_start[b] = total;  // sender-major: b = r * n + s
        total += s.counts(b);
      }
      info.out_prefix.assign(cells + 1, 0);
      for (int dst = 0; dst < n; ++dst) {
        for (int src = 0; src < n; ++src) {
          const int64_t b = int64_t{dst} * n + src;
          info.out_prefix[b + 1] = info.out_prefix[b] + s.counts(src * n + dst);
        }
      }
      if (in.num_elements() != total || out.num_elements() != total) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), ": all-to-all counts sum to ", total,
            " elements but tensor ", info.in_tensors[0], " has ",
            in.num_elements(), " and tensor ", info.out_tensor, " has ",
            out.num_elements()));
      }
    } else if (s.op() == v1::Step::OP_SEND_RECV) {
      if (s.inputs_size() != 1 || s.outputs_size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("step ", s.id(),
                         ": OP_SEND_RECV (operand form) takes 1 input and "
                         "1 output, got ",
                         s.inputs_size(), " and ", s.outputs_size()));
      }
      if (NumElements(info.in_boxes[0]) != NumElements(out_boxes[0]) ||
          in.dtype != out.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", s.id(), ": OP_SEND_RECV input ",
            BoxToString(info.in_boxes[0]), " of tensor ", info.in_tensors[0],
            " (", DTypeName(in.dtype), ") and output ",
            BoxToString(out_boxes[0]), " of tensor ", info.out_tensor, " (",
            DTypeName(out.dtype), ") differ in elements or dtype"));
      }
    } else {  // OP_COMPUTE
      if (s.compute().has_gemm()) {
        info.gemm = true;
        info.gemm_attrs = s.compute().gemm();
        const v1::GemmAttrs& g = info.gemm_attrs;
        if (IsIntegerDType(out.dtype)) {
          return absl::UnimplementedError(absl::StrCat(
              "step ", s.id(), ": gemm on ", DTypeName(out.dtype),
              " is not supported; allowed: float16, bfloat16, float32, "
              "float64"));
        }
        if (s.inputs_size() != 2 || s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": gemm takes inputs [A, B] and outputs [C]; "
              "got ", s.inputs_size(), " inputs and ", s.outputs_size(),
              " outputs"));
        }
        const int64_t want[3] = {g.m() * g.k(), g.k() * g.n(), g.m() * g.n()};
        const Box* boxes[3] = {&info.in_boxes[0], &info.in_boxes[1],
                               &out_boxes[0]};
        const char* names[3] = {"A", "B", "C"};
        for (int o = 0; o < 3; ++o) {
          if (g.m() < 0 || g.n() < 0 || g.k() < 0 ||
              NumElements(*boxes[o]) != want[o]) {
            return absl::InvalidArgumentError(absl::StrCat(
                "step ", s.id(), " gemm m=", g.m(), " n=", g.n(), " k=",
                g.k(), ": operand ", names[o], " ", BoxToString(*boxes[o]),
                " has ", NumElements(*boxes[o]), " elements, needs ",
                want[o]));
          }
        }
        info.cache = std::make_unique<GemmCache>(g.m(), g.n());
      } else if (s.compute().has_elementwise()) {
        info.elementwise = s.compute().elementwise();
        const auto kind = info.elementwise.kind();
        const int want = ElementwiseInputs(kind);
        if (want == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": elementwise kind ", static_cast<int>(kind),
              " is unknown; allowed: ", kElementwiseKinds));
        }
        if (s.inputs_size() != want) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": elementwise takes ", want,
                           " inputs, got ", s.inputs_size()));
        }
        if (ElementwiseNeedsFloat(kind) && IsIntegerDType(out.dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": elementwise ",
              v1::ElementwiseAttrs::Kind_Name(kind), " on ",
              DTypeName(out.dtype),
              " is not defined; allowed dtypes: float16, bfloat16, float32, "
              "float64"));
        }
        for (const Box& out_box : out_boxes) {
          for (size_t o = 0; o < info.in_boxes.size(); ++o) {
            if (NumElements(info.in_boxes[o]) != NumElements(out_box)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "step ", s.id(), ": elementwise input ", o, " ",
                  BoxToString(info.in_boxes[o]), " and output ",
                  BoxToString(out_box), " differ in size"));
            }
          }
        }
      } else if (s.compute().has_gather()) {
        info.gather = true;
        info.gather_attrs = s.compute().gather();
        if (s.inputs_size() > 2 || s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(),
              ": gather takes inputs [X] or [X, W] and outputs [Y]; got ",
              s.inputs_size(), " inputs and ", s.outputs_size(), " outputs"));
        }
        const bool weighted = s.inputs_size() == 2;
        const absl::Status valid =
            CheckGather(info.gather_attrs, NumElements(info.in_boxes[0]),
                        weighted ? NumElements(info.in_boxes[1]) : -1,
                        NumElements(out_boxes[0]));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": ", valid.message()));
        }
        if (weighted && IsIntegerDType(out.dtype)) {
          return absl::UnimplementedError(absl::StrCat(
              "step ", s.id(), ": gather with weights on ",
              DTypeName(out.dtype),
              " is not supported; allowed: float16, bfloat16, float32, "
              "float64 (integer dtypes gather without W)"));
        }
      } else if (s.compute().has_row_dot()) {
        info.row_dot = true;
        info.row_dot_attrs = s.compute().row_dot();
        if (s.inputs_size() != 2 || s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(),
              ": row_dot takes inputs [A, B] and outputs [D]; got ",
              s.inputs_size(), " inputs and ", s.outputs_size(), " outputs"));
        }
        if (IsIntegerDType(out.dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": row_dot on ", DTypeName(out.dtype),
              " is not defined; allowed dtypes: float16, bfloat16, float32, "
              "float64"));
        }
        const absl::Status valid = CheckRowDot(
            info.row_dot_attrs, NumElements(info.in_boxes[0]),
            NumElements(info.in_boxes[1]), NumElements(out_boxes[0]));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": ", valid.message()));
        }
      } else if (s.compute().has_attention_block()) {
        info.attention_block = true;
        info.attention_attrs = s.compute().attention_block();
        const v1::AttentionBlockAttrs& a = info.attention_attrs;
        if (s.inputs_size() < 3 || s.inputs_size() > 4 ||
            s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(),
              ": attention_block takes inputs [Q, K, V] or [Q, K, V, S] and "
              "outputs [S']; got ",
              s.inputs_size(), " inputs and ", s.outputs_size(), " outputs"));
        }
        if (IsIntegerDType(out.dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": attention_block on ", DTypeName(out.dtype),
              " is not defined; allowed dtypes: float16, bfloat16, float32, "
              "float64"));
        }
        const absl::Status valid = CheckAttentionBlock(
            a, NumElements(info.in_boxes[0]), NumElements(info.in_boxes[1]),
            NumElements(info.in_boxes[2]),
            s.inputs_size() == 4 ? NumElements(info.in_boxes[3]) : -1,
            NumElements(out_boxes[0]));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": ", valid.message()));
        }
        info.attention = std::make_unique<AttentionCache>(
            a.batch() * a.kv_heads(), a.batch() * a.heads() * a.q_rows());
      } else if (s.compute().has_attention_finish()) {
        info.attention_finish = true;
        info.finish_attrs = s.compute().attention_finish();
        if (s.inputs_size() != 1 || s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(),
              ": attention_finish takes inputs [S] and outputs [O]; got ",
              s.inputs_size(), " inputs and ", s.outputs_size(), " outputs"));
        }
        if (IsIntegerDType(out.dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": attention_finish on ", DTypeName(out.dtype),
              " is not defined; allowed dtypes: float16, bfloat16, float32, "
              "float64"));
        }
        const absl::Status valid =
            CheckAttentionFinish(info.finish_attrs, NumElements(info.in_boxes[0]),
                                 NumElements(out_boxes[0]));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": ", valid.message()));
        }
      } else if (s.compute().has_attention_backward()) {
        info.attention_backward = true;
        info.backward_attrs = s.compute().attention_backward();
        if (s.inputs_size() != 6 || s.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(),
              ": attention_backward takes inputs [Q, K, V, dO, O, S] and "
              "outputs [dQ] or [dKV]; got ",
              s.inputs_size(), " inputs and ", s.outputs_size(), " outputs"));
        }
        if (IsIntegerDType(out.dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step ", s.id(), ": attention_backward on ",
              DTypeName(out.dtype),
              " is not defined; allowed dtypes: float16, bfloat16, float32, "
              "float64"));
        }
        auto n = [&](int i) { return NumElements(info.in_boxes[i]); };
        const absl::Status valid =
            CheckAttentionBackward(info.backward_attrs, n(0), n(1), n(2), n(3),
                                   n(4), n(5), NumElements(out_boxes[0]));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("step ", s.id(), ": ", valid.message()));
        }
        const v1::AttentionBlockAttrs& ba = info.backward_attrs.block();
        info.backward = std::make_unique<BackwardCache>(
            ba.batch() * ba.kv_heads(), NumElements(out_boxes[0]));
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("step ", s.id(),
                         ": OP_COMPUTE without an op; allowed: gemm, "
                         "elementwise, gather, row_dot, attention_block, "
                         "attention_finish, attention_backward"));
      }
    }
    for (Box& box : out_boxes) {
      defs_[info.out_tensor].push_back(Definition{std::move(box), info.index});
    }
    steps_.push_back(std::move(info));
  }
  // Latest step first, so that the first covering definition below a limit
  // is the one that wrote last.
  for (auto& defs : defs_) {
    std::stable_sort(defs.begin(), defs.end(),
                     [](const Definition& a, const Definition& b) {
                       return a.step > b.step;
                     });
  }
  return absl::OkStatus();
}

bool Reference::IsComputed(int tensor) const {
  return tensor >= 0 && tensor < num_tensors() && !defs_[tensor].empty();
}

absl::StatusOr<Expected> Reference::Expect(
    int tensor, absl::Span<const int64_t> coord) const {
  if (tensor < 0 || tensor >= num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, " is not in the plan (", num_tensors(), " tensors)"));
  }
  const TensorSpec& spec = tensors_[tensor];
  bool inside = coord.size() == spec.shape.size();
  for (size_t d = 0; inside && d < coord.size(); ++d) {
    inside = coord[d] >= 0 && coord[d] < spec.shape[d];
  }
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, " element [", absl::StrJoin(coord, ","),
        "] is not inside ", BoxToString(spec.full_box())));
  }
  return Eval(tensor, coord.data(), static_cast<int>(steps_.size()));
}

absl::StatusOr<double> Reference::Value(int tensor,
                                        absl::Span<const int64_t> coord) const {
  ASSIGN_OR_RETURN(Expected e, Expect(tensor, coord));
  return e.value;
}

Expected Reference::Initial(int tensor, const int64_t* coord) const {
  const TensorSpec& spec = tensors_[tensor];
  const int64_t index = GlobalIndex(
      absl::MakeConstSpan(coord, spec.shape.size()), spec.shape);
  Expected e;
  if (IsIntegerDType(spec.dtype)) {
    e.integer = InitialInteger(spec, tensor, inits_[tensor], index);
    e.value = static_cast<double>(e.integer);
  } else {
    e.value = InitialValue(spec, tensor, inits_[tensor], index);
  }
  e.scale = std::abs(e.value);
  return e;
}

Expected Reference::Eval(int tensor, const int64_t* coord, int limit) const {
  const size_t rank = tensors_[tensor].shape.size();
  for (const Definition& def : defs_[tensor]) {
    if (def.step >= limit) continue;
    if (!BoxContains(def.box, absl::MakeConstSpan(coord, rank))) continue;
    return EvalStep(steps_[def.step], def, tensor, coord);
  }
  return Initial(tensor, coord);
}

Expected Reference::EvalStep(const StepInfo& step, const Definition& def,
                             int tensor, const int64_t* coord) const {
  const TensorSpec& out = tensors_[tensor];
  const DType out_dtype = out.dtype;
  const size_t rank = out.shape.size();
  switch (step.op) {
    case v1::Step::OP_ALL_REDUCE:
    case v1::Step::OP_REDUCE_SCATTER: {
      const int in_tensor = step.in_tensors[0];
      const TensorSpec& in = tensors_[in_tensor];
      Coord in_coord(rank + 1);
      for (size_t d = 0; d < rank; ++d) in_coord[d + 1] = coord[d];
      const bool integer = IsIntegerDType(out_dtype);
      const bool max = step.reduction == v1::REDUCTION_MAX;
      Expected result;
      int64_t terms = 0;
      for (int64_t r = 0; r < in.shape[0]; ++r) {
        in_coord[0] = r;
        const Expected x = ConvertTo(Eval(in_tensor, in_coord.data(), step.index),
                                     in.dtype, out_dtype);
        if (r == 0) {
          result = x;
        } else if (integer) {
          result.integer = WrapInteger(
              out_dtype,
              max ? std::max(result.integer, x.integer)
                  : static_cast<int64_t>(static_cast<uint64_t>(result.integer) +
                                         static_cast<uint64_t>(x.integer)));
        } else if (max) {
          if (x.value > result.value) result.value = x.value;
          result.scale = std::max(result.scale, x.scale);
        } else {
          result.value += x.value;
          result.scale += x.scale;
        }
        terms = std::max(terms, x.terms);
      }
      if (integer) {
        result.value = static_cast<double>(result.integer);
        result.scale = std::abs(result.value);
        result.terms = 0;
      } else {
        result.terms = terms + (max ? 0 : std::max<int64_t>(in.shape[0] - 1, 0));
      }
      // A combination of ranks is no RELU output (one rank is a copy).
      if (in.shape[0] > 1) result.clamped_from = 0;
      return result;
    }
    case v1::Step::OP_ALL_TO_ALL: {
      const int64_t x = GlobalIndex(absl::MakeConstSpan(coord, rank), out.shape);
      const auto it = std::upper_bound(step.out_prefix.begin(),
                                       step.out_prefix.end(), x);
      const int64_t b = (it - step.out_prefix.begin()) - 1;  // s * n + r
      const int64_t dst = b / step.n, src = b % step.n;
      const int64_t in_index =
          step.in_start[src * step.n + dst] + (x - step.out_prefix[b]);
      const int in_tensor = step.in_tensors[0];
      const TensorSpec& in = tensors_[in_tensor];
      Coord in_coord(in.shape.size());
      CoordOfIndex(in_index, in.shape, in_coord.data());
      return ConvertTo(Eval(in_tensor, in_coord.data(), step.index), in.dtype,
                       out_dtype);
    }
    case v1::Step::OP_SEND_RECV: {
      // A copy: the same row-major position in the input's region.
      const int64_t e = OffsetInBox(absl::MakeConstSpan(coord, rank), def.box);
      const int in_tensor = step.in_tensors[0];
      const TensorSpec& in = tensors_[in_tensor];
      Coord in_coord(in.shape.size());
      CoordInBox(e, step.in_boxes[0], in_coord.data());
      return ConvertTo(Eval(in_tensor, in_coord.data(), step.index), in.dtype,
                       out_dtype);
    }
    default:
      break;
  }
  // OP_COMPUTE.
  const int64_t e = OffsetInBox(absl::MakeConstSpan(coord, rank), def.box);
  if (step.gemm) {
    const int64_t n = step.gemm_attrs.n();
    Expected result = EvalGemm(step, e / n, e % n);
    if (step.gemm_attrs.accumulate()) {
      const Expected prev = Eval(tensor, coord, step.index);
      result.value += prev.value;
      result.scale += prev.scale;
      result.terms = std::max(result.terms, prev.terms) + 1;
    }
    return result;
  }
  if (step.gather) return EvalGather(step, e);
  if (step.row_dot) return EvalRowDot(step, e);
  if (step.attention_block) return EvalAttentionBlock(step, e);
  if (step.attention_finish) return EvalAttentionFinish(step, e);
  if (step.attention_backward) {
    Expected result = EvalAttentionBackward(step, e);
    if (step.backward_attrs.accumulate()) {
      const Expected prev = Eval(tensor, coord, step.index);
      result.value += prev.value;
      result.scale += prev.scale;
      result.terms = std::max(result.terms, prev.terms) + 1;
    }
    return result;
  }
  std::vector<Expected> in(step.in_tensors.size());
  for (size_t o = 0; o < in.size(); ++o) {
    const int t = step.in_tensors[o];
    Coord c(tensors_[t].shape.size());
    CoordInBox(e, step.in_boxes[o], c.data());
    in[o] = ConvertTo(Eval(t, c.data(), step.index), tensors_[t].dtype,
                      out_dtype);
  }
  Expected result;
  const bool integer = IsIntegerDType(out_dtype);
  switch (step.elementwise.kind()) {
    case v1::ElementwiseAttrs::KIND_ADD:
      if (integer) {
        result.integer = WrapInteger(
            out_dtype,
            static_cast<int64_t>(static_cast<uint64_t>(in[0].integer) +
                                 static_cast<uint64_t>(in[1].integer)));
      } else {
        result.value = in[0].value + in[1].value;
        result.scale = in[0].scale + in[1].scale;
        result.terms = std::max(in[0].terms, in[1].terms) + 1;
      }
      break;
    case v1::ElementwiseAttrs::KIND_RELU:
      // Exact, and |relu(a) - relu(b)| <= |a - b|: the input's error bound
      // (its scale and terms) carries over unchanged. Floats only (Build).
      // A negative input is remembered for RELU_GRAD (an input that was
      // itself clamped keeps its own).
      result = in[0];
      result.value = std::max(in[0].value, 0.0);
      if (in[0].value < 0) result.clamped_from = in[0].value;
      break;
    case v1::ElementwiseAttrs::KIND_SIGMOID: {
      // sigmoid' = s (1 - s) <= 1/4, so an input off by at most terms_x * u
      // * 1.125 * scale_x (its tolerance) moves the output by at most a
      // quarter of that: 0.25 * scale_x in the scale keeps that part of the
      // bound with the same terms. The device's own roundings (exp, the
      // add, the division, the store to the dtype: 4 at most, each relative
      // to the output, a double exp erring by up to one ulp = 2u) are the
      // four added terms on `value`.
      result.value = 1.0 / (1.0 + std::exp(-in[0].value));
      result.scale = result.value + 0.25 * in[0].scale;
      result.terms = in[0].terms + 4;
      break;
    }
    case v1::ElementwiseAttrs::KIND_RELU_GRAD: {
      // in1 > 0 ? in0 : 0 is discontinuous in in1: where in1's value is
      // within its own error bound of 0, the device's in1 may lie on either
      // side, and which branch it took is unknowable here. For a RELU
      // output of 0 the value measured is the negative input RELU clamped
      // (Expected.clamped_from), with the same bound: the device's RELU
      // gives 0 for sure when that input is farther below 0 than its
      // tolerance, while the 0 itself would be within any. Such an element
      // is expected halfway, at in0 / 2, with its scale widened by |in0| /
      // (2 rel) (rel of its terms, at least 1, so never 0; and a hair more
      // so that the bound's own double roundings cannot cut it short):
      // abs + rel * scale then reaches |in0| / 2 beyond in0's own
      // tolerance, so both in0 (within its bound) and 0 pass. Steps that
      // read it (a GEMM) carry the widened scale on. Everywhere else the
      // branch is certain: in0 with its bound (exact: the device copies
      // in0's bits), or an exact 0. Floats only (Build).
      const Tolerance t1 = ToleranceFor(out_dtype, in[1].terms);
      const double side =
          in[1].clamped_from < 0 ? in[1].clamped_from : in[1].value;
      if (std::abs(side) <= t1.abs + t1.rel * in[1].scale) {
        result.terms = std::max<int64_t>(in[0].terms, 1);
        const double rel = ToleranceFor(out_dtype, result.terms).rel;
        result.value = 0.5 * in[0].value;
        result.scale = in[0].scale + std::abs(in[0].value) / (2 * rel) *
                                         (1 + std::ldexp(1.0, -30));
      } else if (side > 0) {
        result = in[0];
      }  // else masked: an exact 0 (NaN compares false, as on the device)
      break;
    }
    case v1::ElementwiseAttrs::KIND_SIGMOID_GRAD: {
      // out = g s (1 - s), g = in0, s = in1. To first order an error dg on
      // g moves it by s (1 - s) dg, at most dg / 4 for s in [0, 1] (a
      // SIGMOID output), and an error ds on s by g (1 - 2 s) ds, at most |g|
      // ds: the scale holds max(1/4, |s (1 - s)|) scale_g plus max(1,
      // |1 - 2 s|) scale_g scale_s (the larger factors cover any s; scale_g
      // >= |g| also covers the device's g being off, as GEMM's products of
      // scales do), under the larger of the inputs' terms. The device's own
      // roundings, (g * s), (1 - s), their product and the store to the
      // dtype (fp16 / bf16 / float32 round three times in a finer
      // accumulator and once to the dtype, float64 three times), each err
      // by at most u |out| to first order: three terms over |out|, also in
      // the scale.
      const double g = in[0].value, sv = in[1].value;
      result.value = g * sv * (1 - sv);
      result.scale =
          std::abs(result.value) +
          std::max(0.25, std::abs(sv * (1 - sv))) * in[0].scale +
          std::max(1.0, std::abs(1 - 2 * sv)) * in[0].scale * in[1].scale;
      result.terms = std::max(in[0].terms, in[1].terms) + 3;
      break;
    }
    default: {  // KIND_SCALE (Build refused the rest)
      const double alpha = step.elementwise.alpha();
      if (integer) {
        result.integer =
            WrapInteger(out_dtype, ScaleInteger(in[0].integer, alpha));
      } else {
        result.value = alpha * in[0].value;
        result.scale = std::abs(alpha) * in[0].scale;
        // The product's rounding, and alpha's own if the device rounds it
        // to the dtype first.
        result.terms = in[0].terms + 2;
      }
      break;
    }
  }
  if (integer) {
    result.value = static_cast<double>(result.integer);
    result.scale = std::abs(result.value);
  }
  return result;
}

Expected Reference::EvalGather(const StepInfo& step, int64_t e) const {
  const v1::GatherAttrs& g = step.gather_attrs;
  const int64_t row = g.row(), k = GatherK(g);
  const int64_t i = e / row, c = e % row;
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  const int tx = step.in_tensors[0];
  const DType x_dtype = tensors_[tx].dtype;
  const bool weighted = step.in_tensors.size() == 2;
  const int tw = weighted ? step.in_tensors[1] : -1;
  Coord cx(tensors_[tx].shape.size());
  Coord cw(weighted ? tensors_[tw].shape.size() : 0);
  // X row r, column c: element r * row + c of X's box, row-major.
  auto x_at = [&](int64_t r) {
    CoordInBox(r * row + c, step.in_boxes[0], cx.data());
    return ConvertTo(Eval(tx, cx.data(), step.index), x_dtype, out_dtype);
  };
  if (k == 1 && !weighted) {
    // A copy (or zeros): exact, X's own bound, in every dtype.
    const int64_t source = g.index(i);
    return source < 0 ? Expected{} : x_at(source);
  }
  Expected result;
  if (IsIntegerDType(out_dtype)) {  // unweighted (Build): a wrapping sum
    uint64_t sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t source = g.index(i * k + j);
      if (source >= 0) sum += static_cast<uint64_t>(x_at(source).integer);
    }
    result.integer = WrapInteger(out_dtype, static_cast<int64_t>(sum));
    result.value = static_cast<double>(result.integer);
    result.scale = std::abs(result.value);
    return result;
  }
  int64_t terms = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t source = g.index(i * k + j);
    if (source < 0) continue;
    const Expected x = x_at(source);
    if (!weighted) {
      result.value += x.value;
      result.scale += x.scale;
      terms = std::max(terms, x.terms);
      continue;
    }
    CoordInBox(i * k + j, step.in_boxes[1], cw.data());
    const Expected w = ConvertTo(Eval(tw, cw.data(), step.index),
                                 tensors_[tw].dtype, out_dtype);
    result.value += w.value * x.value;
    result.scale += w.scale * x.scale;
    terms = std::max(terms, w.terms + x.terms);
  }
  // As a GEMM row of length k: k products and additions (k roundings along
  // the sum, in the accumulator, no coarser than the dtype) and the final
  // rounding to the dtype; the operands' own errors enter through
  // scale_w * scale_x with their terms added.
  result.terms = terms + k + 1;
  return result;
}

Expected Reference::EvalRowDot(const StepInfo& step, int64_t e) const {
  const v1::RowDotAttrs& r = step.row_dot_attrs;
  const int64_t row = r.row();
  const int64_t ra = r.index(2 * e), rb = r.index(2 * e + 1);
  if (ra < 0 || rb < 0) return Expected{};  // an exact 0
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  const int ta = step.in_tensors[0], tb = step.in_tensors[1];
  Coord ca(tensors_[ta].shape.size()), cb(tensors_[tb].shape.size());
  Expected result;
  int64_t terms = 0;
  for (int64_t c = 0; c < row; ++c) {
    // A row ra, column c: element ra * row + c of A's box, row-major.
    CoordInBox(ra * row + c, step.in_boxes[0], ca.data());
    const Expected a = ConvertTo(Eval(ta, ca.data(), step.index),
                                 tensors_[ta].dtype, out_dtype);
    CoordInBox(rb * row + c, step.in_boxes[1], cb.data());
    const Expected b = ConvertTo(Eval(tb, cb.data(), step.index),
                                 tensors_[tb].dtype, out_dtype);
    result.value += a.value * b.value;
    result.scale += a.scale * b.scale;
    terms = std::max(terms, a.terms + b.terms);
  }
  // As a GEMM element with k = row: row products and additions, and the
  // final rounding to the dtype.
  result.terms = terms + row + 1;
  return result;
}

namespace {

// The amplification of a state's m (reference.h): ceil((2 terms + 1)
// scale), the bound, in units of the dtype's u * 1.125, on how far
// (relatively) the device's exponentials may lie from the reference's; 0
// for an exact m (an initial or empty state). Capped far beyond any useful
// tolerance so that it stays an integer.
int64_t AttentionAmplification(const Expected& m) {
  if (m.terms <= 0) return 0;
  const double x = (2.0 * static_cast<double>(m.terms) + 1.0) * m.scale;
  if (!(x < 1e15)) return static_cast<int64_t>(1e15);
  return static_cast<int64_t>(std::ceil(x));
}

}  // namespace

void Reference::BuildAttentionKv(const StepInfo& step, int64_t b,
                                 int64_t kvh) const {
  const v1::AttentionBlockAttrs& a = step.attention_attrs;
  const int64_t kv_rows = a.kv_rows(), d = a.head_dim();
  AttentionCache::KvHead& kv = step.attention->kv[b * a.kv_heads() + kvh];
  kv.k_value.resize(d * kv_rows);
  kv.k_scale.resize(d * kv_rows);
  kv.v_value.resize(kv_rows * d);
  kv.v_scale.resize(kv_rows * d);
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  const int tk = step.in_tensors[1], tv = step.in_tensors[2];
  Coord ck(tensors_[tk].shape.size()), cv(tensors_[tv].shape.size());
  // K and V are [batch, kv_heads, kv_rows, head_dim], row-major over their
  // boxes.
  const int64_t base = (b * a.kv_heads() + kvh) * kv_rows * d;
  for (int64_t j = 0; j < kv_rows; ++j) {
    for (int64_t c = 0; c < d; ++c) {
      CoordInBox(base + j * d + c, step.in_boxes[1], ck.data());
      const Expected x = ConvertTo(Eval(tk, ck.data(), step.index),
                                   tensors_[tk].dtype, out_dtype);
      kv.k_value[c * kv_rows + j] = x.value;
      kv.k_scale[c * kv_rows + j] = x.scale;
      kv.k_terms = std::max(kv.k_terms, x.terms);
      CoordInBox(base + j * d + c, step.in_boxes[2], cv.data());
      const Expected y = ConvertTo(Eval(tv, cv.data(), step.index),
                                   tensors_[tv].dtype, out_dtype);
      kv.v_value[j * d + c] = y.value;
      kv.v_scale[j * d + c] = y.scale;
      kv.v_terms = std::max(kv.v_terms, y.terms);
    }
  }
}

void Reference::BuildAttentionRow(const StepInfo& step, int64_t row) const {
  const v1::AttentionBlockAttrs& a = step.attention_attrs;
  const int64_t d = a.head_dim(), width = d + 2, kv_rows = a.kv_rows();
  const int64_t q_rows = a.q_rows(), heads = a.heads();
  const int64_t i = row % q_rows, h = (row / q_rows) % heads,
                b = row / (q_rows * heads);
  const int64_t kvh = h / (heads / a.kv_heads());
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  AttentionCache& cache = *step.attention;
  std::vector<AttentionCache::Entry>& out = cache.rows[row];
  out.resize(width);

  // The previous state's row (as of before the step), or the empty state.
  std::vector<Expected> prev(width);
  if (step.in_tensors.size() == 4) {
    const int ts = step.in_tensors[3];
    Coord c(tensors_[ts].shape.size());
    for (int64_t x = 0; x < width; ++x) {
      CoordInBox(row * width + x, step.in_boxes[3], c.data());
      prev[x] = ConvertTo(Eval(ts, c.data(), step.index), tensors_[ts].dtype,
                          out_dtype);
    }
  } else {
    prev[d].value = -std::numeric_limits<double>::infinity();
  }
  auto keep = [&] {
    for (int64_t x = 0; x < width; ++x) {
      out[x] = {prev[x].value, prev[x].scale, prev[x].terms};
    }
  };
  const bool causal = a.causal();
  int64_t kept = 0;
  for (int64_t j = 0; j < kv_rows; ++j) {
    kept += !causal || a.kv_position(j) <= a.q_position(i);
  }
  if (kept == 0) {  // every key masked: the state stays as it was
    keep();
    return;
  }

  // Q's row and the kv head.
  std::vector<double> qv(d), qs(d);
  int64_t q_terms = 0;
  {
    const int tq = step.in_tensors[0];
    Coord c(tensors_[tq].shape.size());
    for (int64_t x = 0; x < d; ++x) {
      CoordInBox(row * d + x, step.in_boxes[0], c.data());
      const Expected e = ConvertTo(Eval(tq, c.data(), step.index),
                                   tensors_[tq].dtype, out_dtype);
      qv[x] = e.value;
      qs[x] = e.scale;
      q_terms = std::max(q_terms, e.terms);
    }
  }
  const int64_t kv_index = b * a.kv_heads() + kvh;
  std::call_once(cache.kv_once[kv_index],
                 [&] { BuildAttentionKv(step, b, kvh); });
  const AttentionCache::KvHead& kv = cache.kv[kv_index];

  // Scores and their scales: s_j = alpha q . k_j, e_j = |alpha| sum_c
  // scale(q_c) scale(k_jc), over c outside so that the loop over j
  // vectorizes.
  std::vector<double> sv(kv_rows, 0.0), se(kv_rows, 0.0);
  for (int64_t x = 0; x < d; ++x) {
    const double* kval = kv.k_value.data() + x * kv_rows;
    const double* ksc = kv.k_scale.data() + x * kv_rows;
    const double qx = qv[x], qsx = qs[x];
    for (int64_t j = 0; j < kv_rows; ++j) {
      sv[j] += qx * kval[j];
      se[j] += qsx * ksc[j];
    }
  }
  const double alpha = AttentionScale(a);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  double mx = neg_inf, e_s = 0;
  for (int64_t j = 0; j < kv_rows; ++j) {
    sv[j] *= alpha;
    se[j] *= std::abs(alpha);
    if (causal && a.kv_position(j) > a.q_position(i)) {
      sv[j] = neg_inf;  // masked: exp(-inf - m') = 0 below
      continue;
    }
    mx = std::max(mx, sv[j]);
    e_s = std::max(e_s, se[j]);
  }

  // m' and its bound; the amplification of the exponentials (reference.h).
  const Expected& m_prev = prev[d];
  const bool prev_empty = m_prev.value == neg_inf;
  Expected m;
  m.value = std::max(m_prev.value, mx);
  const int64_t t_score = d + 2 + q_terms + kv.k_terms;
  m.terms = std::max(t_score, m_prev.terms - 1) + 1;
  m.scale = std::max({e_s, prev_empty ? 0.0 : m_prev.scale, std::abs(m.value)});
  const int64_t amp = AttentionAmplification(m);
  const int64_t amp_prev = prev_empty ? 0 : AttentionAmplification(m_prev);
  const double f = prev_empty ? 0.0 : std::exp(m_prev.value - m.value);

  std::vector<double> ov(d, 0.0), os(d, 0.0);
  double l = 0;
  for (int64_t j = 0; j < kv_rows; ++j) {
    if (sv[j] == neg_inf) continue;
    const double p = std::exp(sv[j] - m.value);
    l += p;
    const double* vval = kv.v_value.data() + j * d;
    const double* vsc = kv.v_scale.data() + j * d;
    for (int64_t x = 0; x < d; ++x) {
      ov[x] += p * vval[x];
      os[x] += p * vsc[x];
    }
  }
  // What the previous state's elements carry beyond the previous
  // amplification, plus this block's multiply by f, add and store.
  auto carried = [&](const Expected& e) {
    return std::max<int64_t>(e.terms - amp_prev, 0) + 4;
  };
  for (int64_t x = 0; x < d; ++x) {
    out[x].value = f * prev[x].value + ov[x];
    out[x].scale = f * prev[x].scale + os[x];
    out[x].terms =
        amp + std::max(carried(prev[x]), kv.v_terms + kv_rows + 8);
  }
  out[d] = {m.value, m.scale, m.terms};
  const Expected& l_prev = prev[d + 1];
  out[d + 1].value = f * l_prev.value + l;
  out[d + 1].scale = f * l_prev.scale + l;
  out[d + 1].terms = amp + std::max(carried(l_prev), kv_rows + 8);
}

Expected Reference::EvalAttentionBlock(const StepInfo& step, int64_t e) const {
  const int64_t width = step.attention_attrs.head_dim() + 2;
  const int64_t row = e / width;
  AttentionCache& cache = *step.attention;
  std::call_once(cache.row_once[row], [&] { BuildAttentionRow(step, row); });
  const AttentionCache::Entry& entry = cache.rows[row][e % width];
  Expected result;
  result.value = entry.value;
  result.scale = entry.scale;
  result.terms = entry.terms;
  return result;
}

Expected Reference::EvalAttentionFinish(const StepInfo& step, int64_t e) const {
  const int64_t d = step.finish_attrs.head_dim();
  const int64_t row = e / d, c = e % d;
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  const int ts = step.in_tensors[0];
  Coord cs(tensors_[ts].shape.size());
  CoordInBox(row * (d + 2) + c, step.in_boxes[0], cs.data());
  const Expected o = ConvertTo(Eval(ts, cs.data(), step.index),
                               tensors_[ts].dtype, out_dtype);
  CoordInBox(row * (d + 2) + d + 1, step.in_boxes[0], cs.data());
  const Expected l = ConvertTo(Eval(ts, cs.data(), step.index),
                               tensors_[ts].dtype, out_dtype);
  if (l.value == 0) return Expected{};  // no key kept: an exact 0
  // d(o / l) = do / l - (o / l) dl / l: o's bound over |l| plus |o / l|
  // times l's relative bound (l's scale is l itself for an attention
  // state's sum of exponentials), under both operands' terms, and the
  // division's and the store's roundings.
  const double abs_l = std::abs(l.value);
  Expected result;
  result.value = o.value / l.value;
  result.scale = std::max(o.scale, std::abs(o.value) * l.scale / abs_l) / abs_l;
  result.terms = o.terms + l.terms + 2;
  return result;
}

namespace {

// `x` as a count of roundings, capped far beyond any useful tolerance so
// that it stays an integer.
int64_t CappedTerms(double x) {
  if (!(x < 1e15)) return static_cast<int64_t>(1e15);
  return static_cast<int64_t>(std::ceil(x));
}

}  // namespace

void Reference::LoadOperand(const StepInfo& step, int input, int64_t first,
                            int64_t count, std::vector<double>* value,
                            std::vector<double>* scale,
                            int64_t* terms) const {
  const DType out_dtype = tensors_[step.out_tensor].dtype;
  const int t = step.in_tensors[input];
  Coord c(tensors_[t].shape.size());
  value->resize(count);
  scale->resize(count);
  for (int64_t x = 0; x < count; ++x) {
    CoordInBox(first + x, step.in_boxes[input], c.data());
    const Expected e = ConvertTo(Eval(t, c.data(), step.index),
                                 tensors_[t].dtype, out_dtype);
    (*value)[x] = e.value;
    (*scale)[x] = e.scale;
    *terms = std::max(*terms, e.terms);
  }
}

void Reference::BuildAttentionBackward(const StepInfo& step, int64_t b,
                                       int64_t kvh) const {
  const v1::AttentionBackwardAttrs& ab = step.backward_attrs;
  const v1::AttentionBlockAttrs& a = ab.block();
  const bool want_dq = ab.target() == v1::AttentionBackwardAttrs::TARGET_DQ;
  const int64_t batch = a.batch(), heads = a.heads(), kv_heads = a.kv_heads();
  const int64_t q_rows = a.q_rows(), kv_rows = a.kv_rows(), d = a.head_dim();
  const int64_t group = heads / kv_heads, kv_block = kv_rows * d;
  const double alpha = AttentionScale(a);
  const bool causal = a.causal();
  BackwardCache& out = *step.backward;
  std::vector<double> kv_, ks, vv, vs, qv, qs, dov, dos, ov, os;
  std::vector<double> p(kv_rows), dsv(kv_rows), dss(kv_rows);
  const int64_t kv0 = (b * kv_heads + kvh) * kv_block;
  int64_t k_terms = 0, v_terms = 0;
  LoadOperand(step, 1, kv0, kv_block, &kv_, &ks, &k_terms);
  LoadOperand(step, 2, kv0, kv_block, &vv, &vs, &v_terms);
  // dK and dV of this kv head: the largest terms of any contribution.
  int64_t dk_terms = 0, dv_terms = 0;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t i = 0; i < q_rows; ++i) {
      const int64_t row = (b * heads + h) * q_rows + i;
      int64_t q_terms = 0, do_terms = 0, o_terms = 0;
      LoadOperand(step, 0, row * d, d, &qv, &qs, &q_terms);
      LoadOperand(step, 3, row * d, d, &dov, &dos, &do_terms);
      LoadOperand(step, 4, row * d, d, &ov, &os, &o_terms);
      // m and l of the row's final state, each with its own terms.
      int64_t m_terms = 0, l_terms = 0;
      std::vector<double> mv, ms, lv, ls;
      LoadOperand(step, 5, row * (d + 2) + d, 1, &mv, &ms, &m_terms);
      LoadOperand(step, 5, row * (d + 2) + d + 1, 1, &lv, &ls, &l_terms);
      const double m = mv[0], l = lv[0];
      if (l == 0) continue;  // the row saw no key: no gradient
      // D = dO . O and its bound.
      double delta = 0, delta_scale = 0;
      for (int64_t c = 0; c < d; ++c) {
        delta += dov[c] * ov[c];
        delta_scale += dos[c] * os[c];
      }
      const int64_t delta_terms = std::max(do_terms, o_terms) + d + 1;
      const int64_t dp_terms = std::max(do_terms, v_terms) + d + 1;
      // P's relative error, in units of 1.125 u: the score's (T terms
      // over e_j), m's and l's relative bounds, and the subtraction,
      // exponential, division and P's own rounding (reference.h).
      const int64_t t_score = d + 2 + q_terms + k_terms;
      double e_max = 0;
      bool any = false;
      for (int64_t j = 0; j < kv_rows; ++j) {
        p[j] = 0;
        if (causal && a.kv_position(j) > a.q_position(i)) continue;
        double dot = 0, e = 0;
        const double* kj = kv_.data() + j * d;
        const double* ksj = ks.data() + j * d;
        for (int64_t c = 0; c < d; ++c) {
          dot += qv[c] * kj[c];
          e += qs[c] * ksj[c];
        }
        p[j] = std::exp(alpha * dot - m) / l;
        e_max = std::max(e_max, std::abs(alpha) * e);
        any = true;
      }
      if (!any) continue;
      const int64_t amp = CappedTerms(
          static_cast<double>(t_score) * e_max +
          static_cast<double>(m_terms) * ms[0] +
          static_cast<double>(l_terms) * ls[0] / std::abs(l) + 4);
      const int64_t ds_terms = std::max({amp, dp_terms, delta_terms}) + 2;
      for (int64_t j = 0; j < kv_rows; ++j) {
        dsv[j] = dss[j] = 0;
        if (p[j] == 0) continue;
        double dp = 0, dp_scale = 0;
        const double* vj = vv.data() + j * d;
        const double* vsj = vs.data() + j * d;
        for (int64_t c = 0; c < d; ++c) {
          dp += dov[c] * vj[c];
          dp_scale += dos[c] * vsj[c];
        }
        dsv[j] = p[j] * (dp - delta);
        dss[j] = p[j] * (std::abs(dp - delta) + dp_scale + delta_scale);
      }
      if (want_dq) {
        double* value = out.value.data() + row * d;
        double* scale = out.scale.data() + row * d;
        for (int64_t j = 0; j < kv_rows; ++j) {
          if (p[j] == 0) continue;
          const double* kj = kv_.data() + j * d;
          const double* ksj = ks.data() + j * d;
          for (int64_t c = 0; c < d; ++c) {
            value[c] += alpha * dsv[j] * kj[c];
            scale[c] += std::abs(alpha) * dss[j] * ksj[c];
          }
        }
        const int64_t terms = std::max(ds_terms, k_terms) + kv_rows + 2;
        for (int64_t c = 0; c < d; ++c) out.terms[row * d + c] = terms;
        continue;
      }
      double* dk = out.value.data() + kv0;
      double* dk_scale = out.scale.data() + kv0;
      double* dv = out.value.data() + batch * kv_heads * kv_block + kv0;
      double* dv_scale =
          out.scale.data() + batch * kv_heads * kv_block + kv0;
      for (int64_t j = 0; j < kv_rows; ++j) {
        if (p[j] == 0) continue;
        for (int64_t c = 0; c < d; ++c) {
          dk[j * d + c] += alpha * dsv[j] * qv[c];
          dk_scale[j * d + c] += std::abs(alpha) * dss[j] * qs[c];
          dv[j * d + c] += p[j] * dov[c];
          dv_scale[j * d + c] += p[j] * dos[c];
        }
      }
      dk_terms = std::max({dk_terms, ds_terms, q_terms});
      dv_terms = std::max({dv_terms, amp, do_terms});
    }
  }
  if (want_dq) return;
  const int64_t sums = group * q_rows + 2;
  for (int64_t x = 0; x < kv_block; ++x) {
    out.terms[kv0 + x] = dk_terms + sums;
    out.terms[batch * kv_heads * kv_block + kv0 + x] = dv_terms + sums;
  }
}

Expected Reference::EvalAttentionBackward(const StepInfo& step,
                                          int64_t e) const {
  const v1::AttentionBlockAttrs& a = step.backward_attrs.block();
  // The (batch, kv head) of the element: dQ [batch, heads, q_rows, d], or
  // dK / dV [2, batch, kv_heads, kv_rows, d].
  int64_t b, kvh;
  if (step.backward_attrs.target() == v1::AttentionBackwardAttrs::TARGET_DQ) {
    const int64_t bh = e / (a.q_rows() * a.head_dim());
    b = bh / a.heads();
    kvh = (bh % a.heads()) / (a.heads() / a.kv_heads());
  } else {
    const int64_t g = (e / (a.kv_rows() * a.head_dim())) %
                      (a.batch() * a.kv_heads());
    b = g / a.kv_heads();
    kvh = g % a.kv_heads();
  }
  BackwardCache& cache = *step.backward;
  std::call_once(cache.once[b * a.kv_heads() + kvh],
                 [&] { BuildAttentionBackward(step, b, kvh); });
  Expected result;
  result.value = cache.value[e];
  result.scale = cache.scale[e];
  result.terms = cache.terms[e];
  return result;
}

namespace {

// Rows of a GEMM's materialized output per task.
constexpr int64_t kRowsPerBlock = 64;

// Threads for materializing a GEMM output of `work` multiply-adds: one for
// small ones (a thread's start costs more), up to 8 for large ones.
int MaterializeThreads(int64_t work) {
  if (work < (int64_t{1} << 22)) return 1;
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

}  // namespace

bool Reference::WrittenBefore(const StepInfo& step, int operand) const {
  const int tensor = step.in_tensors[operand];
  if (IsIntegerDType(tensors_[tensor].dtype)) return true;  // Eval's path
  for (const Definition& def : defs_[tensor]) {
    if (def.step < step.index &&
        !IsEmpty(Intersect(def.box, step.in_boxes[operand]))) {
      return true;
    }
  }
  return false;
}

const Reference::GemmCache& Reference::Operands(const StepInfo& step) const {
  GemmCache& cache = *step.cache;
  std::call_once(cache.once, [&] {
    const v1::GemmAttrs& g = step.gemm_attrs;
    const int64_t m = g.m(), n = g.n(), k = g.k();
    if (m * k + k * n > kMaterializeLimit) return;
    cache.a_value = Doubles(m * k);
    cache.a_scale = Doubles(m * k);
    cache.b_value = Doubles(k * n);
    cache.b_scale = Doubles(k * n);
    // Read from where OperandOffset stores each element, in blocks of
    // elements on a few threads (Eval is thread-safe), each block's largest
    // terms kept apart and combined after.
    const int64_t a_blocks = (m * k + kOperandBlock - 1) / kOperandBlock;
    const int64_t b_blocks = (k * n + kOperandBlock - 1) / kOperandBlock;
    std::vector<int64_t> terms(a_blocks + b_blocks, 0);
    // An operand that no step before this one writes holds its
    // initializer's values: the worker's fill of a whole box gives them,
    // bit for bit what InitialValue gives (initializer_test checks it),
    // far faster than an Eval per element. Terms stay 0, as Initial's.
    std::vector<uint8_t> initial[2];
    for (int operand : {0, 1}) {
      if (WrittenBefore(step, operand)) continue;
      const int tensor = step.in_tensors[operand];
      const TensorSpec& spec = tensors_[tensor];
      initial[operand].resize(NumElements(step.in_boxes[operand]) *
                              DTypeSize(spec.dtype));
      if (!FillInitializer(absl::MakeSpan(initial[operand]),
                           step.in_boxes[operand], spec, tensor, inits_[tensor])
               .ok()) {
        initial[operand].clear();  // an Eval per element, as for the others
      }
    }
    ParallelFor(static_cast<int>(a_blocks + b_blocks),
                MaterializeThreads((m * k + k * n) * 64),
                [&](int block) {
                  const bool is_a = block < a_blocks;
                  const int64_t count = is_a ? m * k : k * n;
                  const int64_t first =
                      (is_a ? block : block - a_blocks) * kOperandBlock;
                  const int64_t last = std::min(count, first + kOperandBlock);
                  const int tensor = step.in_tensors[is_a ? 0 : 1];
                  const Box& box = step.in_boxes[is_a ? 0 : 1];
                  Doubles& value = is_a ? cache.a_value : cache.b_value;
                  Doubles& scale = is_a ? cache.a_scale : cache.b_scale;
                  const std::vector<uint8_t>& filled = initial[is_a ? 0 : 1];
                  const DType dtype = tensors_[tensor].dtype;
                  const int size = DTypeSize(dtype);
                  Coord c(tensors_[tensor].shape.size());
                  for (int64_t at = first; at < last; ++at) {
                    // at: op(A)(i, p) = i * k + p, op(B)(p, j) = p * n + j.
                    const int64_t e = is_a
                                          ? OperandOffset(g, 0, at / k, at % k)
                                          : OperandOffset(g, 1, at % n, at / n);
                    Expected x;
                    if (!filled.empty()) {
                      x.value = LoadElement(dtype, filled.data() + e * size);
                      x.scale = std::abs(x.value);
                    } else {
                      CoordInBox(e, box, c.data());
                      x = Eval(tensor, c.data(), step.index);
                    }
                    value[at] = x.value;
                    scale[at] = x.scale;
                    terms[block] = std::max(terms[block], x.terms);
                  }
                  return absl::OkStatus();
                })
        .IgnoreError();  // the tasks cannot fail
    for (int64_t b = 0; b < a_blocks + b_blocks; ++b) {
      int64_t& into = b < a_blocks ? cache.a_terms : cache.b_terms;
      into = std::max(into, terms[b]);
    }
    cache.materialized = true;
  });
  return cache;
}

Expected Reference::EvalGemm(const StepInfo& step, int64_t i,
                             int64_t j) const {
  const v1::GemmAttrs& g = step.gemm_attrs;
  const int64_t m = g.m(), n = g.n(), k = g.k();
  const double alpha = GemmAlpha(g);
  GemmCache& lazy = *step.cache;
  double sum = 0, scale = 0;
  int64_t terms = 0;
  if (!whole_gemms_.load(std::memory_order_relaxed) &&
      lazy.calls.fetch_add(1, std::memory_order_relaxed) < kLazyGemmCalls) {
    const GemmVector& row = OperandVector(step, 0, i);
    const GemmVector& column = OperandVector(step, 1, j);
    for (int64_t p = 0; p < k; ++p) {
      sum += row.value[p] * column.value[p];
      scale += row.scale[p] * column.scale[p];
    }
    terms = row.terms + column.terms;
    return GemmResult(alpha, sum, scale, terms, k);
  }
  const GemmCache& cache = Operands(step);
  if (cache.materialized) {
    GemmCache& mutable_cache = *step.cache;
    std::call_once(mutable_cache.output_once, [&] {
      if (m * n > kMaterializeLimit) return;
      EnsureBlasArch();
      mutable_cache.c_sum = Doubles(m * n);
      mutable_cache.c_scale = Doubles(m * n);
      mutable_cache.output_block_once.reset(
          new std::once_flag[(m + kRowsPerBlock - 1) / kRowsPerBlock]);
      mutable_cache.output_ready = true;
    });
    if (cache.output_ready) {
      // The block of rows holding i, with the BLAS (float64 GEMMs of the
      // values and of the scales) on first use. Verification checks
      // slices on several threads, which build their blocks at once. The
      // summation order differs from the dot product below by float64
      // roundings, far inside every tolerance.
      const int64_t block = i / kRowsPerBlock;
      std::call_once(mutable_cache.output_block_once[block], [&] {
        const int64_t first = block * kRowsPerBlock;
        const int rows =
            static_cast<int>(std::min(m, first + kRowsPerBlock) - first);
        for (const auto& [left, right, out] :
             {std::tuple(cache.a_value.data(), cache.b_value.data(),
                         mutable_cache.c_sum.data()),
              std::tuple(cache.a_scale.data(), cache.b_scale.data(),
                         mutable_cache.c_scale.data())}) {
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows,
                      static_cast<int>(n), static_cast<int>(k), 1.0,
                      left + first * k, static_cast<int>(k), right,
                      static_cast<int>(n), 0.0, out + first * n,
                      static_cast<int>(n));
        }
      });
      sum = cache.c_sum[i * n + j];
      scale = cache.c_scale[i * n + j];
    } else {
      for (int64_t p = 0; p < k; ++p) {
        sum += cache.a_value[i * k + p] * cache.b_value[p * n + j];
        scale += cache.a_scale[i * k + p] * cache.b_scale[p * n + j];
      }
    }
    terms = cache.a_terms + cache.b_terms;
  } else {
    const int ta = step.in_tensors[0], tb = step.in_tensors[1];
    Coord c(std::max(tensors_[ta].shape.size(),
                                    tensors_[tb].shape.size()) + 1);
    for (int64_t p = 0; p < k; ++p) {
      CoordInBox(g.trans_a() ? p * m + i : i * k + p, step.in_boxes[0],
                 c.data());
      const Expected a = Eval(ta, c.data(), step.index);
      CoordInBox(g.trans_b() ? j * k + p : p * n + j, step.in_boxes[1],
                 c.data());
      const Expected b = Eval(tb, c.data(), step.index);
      sum += a.value * b.value;
      scale += a.scale * b.scale;
      terms = std::max(terms, a.terms + b.terms);
    }
  }
  return GemmResult(alpha, sum, scale, terms, k);
}

Expected Reference::GemmResult(double alpha, double sum, double scale,
                               int64_t terms, int64_t k) {
  Expected result;
  result.value = alpha * sum;
  result.scale = std::abs(alpha) * scale;
  // k products and additions (k roundings along any summation order), the
  // final rounding to the dtype, and alpha's product.
  result.terms = terms + k + 1 + (alpha != 1.0 ? 1 : 0);
  return result;
}

const Reference::GemmVector& Reference::OperandVector(const StepInfo& step,
                                                      int operand,
                                                      int64_t index) const {
  GemmCache& cache = *step.cache;
  const bool is_a = operand == 0;
  GemmVector& vector = is_a ? cache.rows[index] : cache.columns[index];
  std::call_once(is_a ? cache.row_once[index] : cache.column_once[index], [&] {
    const v1::GemmAttrs& g = step.gemm_attrs;
    const int64_t k = g.k();
    const int tensor = step.in_tensors[operand];
    Coord c(tensors_[tensor].shape.size());
    vector.value.resize(k);
    vector.scale.resize(k);
    for (int64_t p = 0; p < k; ++p) {
      CoordInBox(OperandOffset(g, operand, index, p), step.in_boxes[operand],
                 c.data());
      const Expected x = Eval(tensor, c.data(), step.index);
      vector.value[p] = x.value;
      vector.scale[p] = x.scale;
      vector.terms = std::max(vector.terms, x.terms);
    }
  });
  return vector;
}

namespace {

// One of `strata` positions spread over [0, total): stratum s is [s * total
// / strata, (s + 1) * total / strata), the position hashed inside it.
int64_t Stratum(int64_t s, int64_t strata, int64_t total, uint32_t salt) {
  const int64_t begin =
      static_cast<int64_t>(static_cast<unsigned __int128>(s) * total / strata);
  const int64_t end = static_cast<int64_t>(
      static_cast<unsigned __int128>(s + 1) * total / strata);
  return begin +
         static_cast<int64_t>(PatternHash(static_cast<uint64_t>(s), salt) %
                              static_cast<uint64_t>(end - begin));
}

}  // namespace

std::vector<int64_t> SampleOffsets(const Box& box, int tensor) {
  const int64_t count = NumElements(box);
  if (count <= kSamples) {
    std::vector<int64_t> all(count);
    for (int64_t e = 0; e < count; ++e) all[e] = e;
    return all;
  }
  // Columns: the last dimension; rows: the others, flattened. A square
  // grid where both have room, else as many of the narrow side as there
  // are and more of the other.
  const int64_t columns = box.back().end - box.back().begin;
  const int64_t rows = count / columns;
  constexpr int64_t kSide = 64;  // kSide * kSide == kSamples
  int64_t r = std::min(rows, kSide);
  const int64_t c = std::min(columns, kSamples / r);
  r = std::min(rows, kSamples / c);
  std::vector<int64_t> offsets;
  offsets.reserve(r * c);
  for (int64_t y = 0; y < r; ++y) {
    const int64_t row = Stratum(y, r, rows, static_cast<uint32_t>(tensor));
    for (int64_t x = 0; x < c; ++x) {
      offsets.push_back(
          row * columns +
          Stratum(x, c, columns, static_cast<uint32_t>(tensor) ^ 0x9e3779b9u));
    }
  }
  return offsets;
}

absl::StatusOr<ComputedCheck> VerifyComputed(absl::Span<const uint8_t> data,
                                             const Box& box,
                                             const TensorSpec& spec, int tensor,
                                             const Reference& ref,
                                             v1::VerifyMode mode,
                                             const Cancellation& cancel) {
  if (tensor < 0 || tensor >= ref.num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, " is not in the plan (", ref.num_tensors(),
        " tensors)"));
  }
  const TensorSpec& own = ref.spec(tensor);
  if (own.shape != spec.shape || own.dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, ": spec [", absl::StrJoin(spec.shape, ","), "] ",
        DTypeName(spec.dtype), " is not the plan's [",
        absl::StrJoin(own.shape, ","), "] ", DTypeName(own.dtype)));
  }
  if (box.size() != spec.shape.size() || !Contains(spec.full_box(), box)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", tensor, ": box ", BoxToString(box),
                     " is not inside ", BoxToString(spec.full_box())));
  }
  const int size = DTypeSize(spec.dtype);
  const int64_t count = NumElements(box);
  if (static_cast<int64_t>(data.size()) != count * size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, ": buffer has ", data.size(), " bytes but box ",
        BoxToString(box), " of ", DTypeName(spec.dtype), " needs ",
        count * size));
  }
  ComputedCheck check;
  if (mode == v1::VERIFY_MODE_OFF) return check;
  const bool sample = mode == v1::VERIFY_MODE_SAMPLE && count > kSamples;
  // A full check of many elements reads most rows of A and columns of B:
  // build every GEMM whole at once rather than row by row.
  if (mode == v1::VERIFY_MODE_FULL && count > kSamples) {
    ref.whole_gemms_.store(true, std::memory_order_relaxed);
  }
  const std::vector<int64_t> samples =
      sample ? SampleOffsets(box, tensor) : std::vector<int64_t>();
  const int64_t checks = sample ? static_cast<int64_t>(samples.size()) : count;
  const bool integer = IsIntegerDType(spec.dtype);
  const int limit = static_cast<int>(ref.steps_.size());
  std::vector<int64_t> coord(spec.shape.size());
  for (int64_t c = 0; c < checks; ++c) {
    if (c % 1024 == 0) RETURN_IF_ERROR(cancel.status());
    const int64_t offset = sample ? samples[c] : c;
    CoordInBox(offset, box, coord.data());
    const Expected want = ref.Eval(tensor, coord.data(), limit);
    const uint8_t* at = data.data() + offset * size;
    double error = 0;
    bool bad = false;
    std::string expected_text, found_text, tolerance_text;
    if (integer) {
      const int64_t found = LoadInteger(spec.dtype, at);
      bad = found != want.integer;
      error = std::abs(static_cast<double>(found) -
                       static_cast<double>(want.integer));
      if (bad && check.mismatches == 0) {
        expected_text = absl::StrCat(want.integer);
        found_text = absl::StrCat(found);
        tolerance_text = "exact";
      }
    } else {
      const double found = LoadElement(spec.dtype, at);
      const Tolerance tol = ToleranceFor(spec.dtype, want.terms);
      const double bound = tol.abs + tol.rel * want.scale;
      // The expected value itself passes, infinities included (an empty
      // attention state's m is -inf, which no bound reaches).
      error = found == want.value ? 0.0 : std::abs(found - want.value);
      bad = !(error <= bound);  // NaN fails
      if (bad && check.mismatches == 0) {
        expected_text = absl::StrFormat("%.10g", want.value);
        found_text = absl::StrFormat("%.10g", found);
        tolerance_text = absl::StrFormat("tolerance %.3g", bound);
      }
    }
    ++check.elements;
    if (std::isnan(error) || error > check.max_abs_error) {
      check.max_abs_error = error;  // NaN sticks: the worst possible error
    }
    if (bad) {
      if (check.mismatches == 0) {
        check.first_mismatch = absl::StrCat(
            "tensor ", tensor, " element [", absl::StrJoin(coord, ","),
            "]: expected ", expected_text, ", found ", found_text, " (",
            tolerance_text, ")");
      }
      ++check.mismatches;
    }
  }
  return check;
}

}  // namespace meshcast::worker
