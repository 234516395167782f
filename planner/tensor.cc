#include "planner/tensor.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshcast {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  int size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kInt8, "int8", 1},       {DType::kUInt8, "uint8", 1},
    {DType::kInt32, "int32", 4},     {DType::kInt64, "int64", 8},
    {DType::kFloat16, "float16", 2}, {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4}, {DType::kFloat64, "float64", 8},
};

struct DTypeAlias {
  const char* alias;
  DType dtype;
};

constexpr DTypeAlias kAliases[] = {
    {"fp16", DType::kFloat16},  {"half", DType::kFloat16},
    {"bf16", DType::kBFloat16}, {"fp32", DType::kFloat32},
    {"f32", DType::kFloat32},   {"float", DType::kFloat32},
    {"fp64", DType::kFloat64},  {"double", DType::kFloat64},
};

// Tensors beyond 2^62 elements would overflow byte counts of 8-byte types.
constexpr int64_t kMaxElements = int64_t{1} << 59;

}  // namespace

int DTypeSize(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

std::string DTypeName(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (const DTypeInfo& info : kDTypes) {
    if (lower == info.name) return info.dtype;
  }
  for (const DTypeAlias& alias : kAliases) {
    if (lower == alias.alias) return alias.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", text,
      "'; allowed: int8, uint8, int32, int64, float16, bfloat16, float32, "
      "float64 (also fp16, half, bf16, fp32, f32, float, fp64, double)"));
}

int64_t NumElements(const Box& box) {
  int64_t count = 1;
  for (const Interval& interval : box) count *= interval.size();
  return count;
}

bool IsEmpty(const Box& box) {
  for (const Interval& interval : box) {
    if (interval.size() == 0) return true;
  }
  return false;
}

Box Intersect(const Box& a, const Box& b) {
  const size_t rank = std::min(a.size(), b.size());
  Box result(rank);
  for (size_t d = 0; d < rank; ++d) {
    result[d].begin = std::max(a[d].begin, b[d].begin);
    result[d].end = std::max(result[d].begin, std::min(a[d].end, b[d].end));
  }
  return result;
}

std::string BoxToString(const Box& box) {
  return absl::StrCat(
      "[",
      absl::StrJoin(box, ",",
                    [](std::string* out, const Interval& interval) {
                      absl::StrAppend(out, interval.begin, ":", interval.end);
                    }),
      "]");
}

bool Contains(const Box& outer, const Box& inner) {
  if (outer.size() != inner.size()) return false;
  if (IsEmpty(inner)) return true;
  for (size_t d = 0; d < inner.size(); ++d) {
    if (inner[d].begin < outer[d].begin || inner[d].end > outer[d].end) {
      return false;
    }
  }
  return true;
}

std::vector<Box> SubtractBox(const Box& a, const Box& b) {
  std::vector<Box> pieces;
  if (IsEmpty(a)) return pieces;
  if (a.size() != b.size() || IsEmpty(Intersect(a, b))) {
    pieces.push_back(a);
    return pieces;
  }
  // Peel off the parts of `a` below and above `b` one dimension at a time,
  // narrowing the remainder to b's range in that dimension.
  Box rest = a;
  for (size_t d = 0; d < a.size(); ++d) {
    if (rest[d].begin < b[d].begin) {
      Box below = rest;
      below[d].end = b[d].begin;
      pieces.push_back(std::move(below));
      rest[d].begin = b[d].begin;
    }
    if (rest[d].end > b[d].end) {
      Box above = rest;
      above[d].begin = b[d].end;
      pieces.push_back(std::move(above));
      rest[d].end = b[d].end;
    }
  }
  return pieces;
}

int64_t TensorSpec::num_elements() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

Box TensorSpec::full_box() const {
  Box box;
  box.reserve(shape.size());
  for (int64_t extent : shape) box.push_back(Interval{0, extent});
  return box;
}

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse shape \"", text, "\": ", why,
                     "; expected extents >= 1 joined by 'x', e.g. "
                     "1024x1024x512"));
  };
  if (text.empty()) return bad("empty");
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t extent = 0;
    if (!absl::SimpleAtoi(part, &extent) || extent < 1) {
      return bad(absl::StrCat("bad extent '", part, "'"));
    }
    if (extent > kMaxElements / elements) {
      return bad("more than 2^59 elements");
    }
    elements *= extent;
    shape.push_back(extent);
  }
  return shape;
}

}  // namespace meshcast
