// Tensor metadata and index boxes: TensorSpec (shape, dtype) and Box, a
// half-open range per tensor dimension in global tensor coordinates.
//
// Thread safety: plain value types.
#ifndef MESHCAST_PLANNER_TENSOR_H_
#define MESHCAST_PLANNER_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

enum class DType {
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

// Size of one element in bytes.
int DTypeSize(DType dtype);
// Lower-case name as written on command lines: int8, uint8, int32, int64,
// float16, bfloat16, float32, float64 (also accepted: fp16, bf16, fp32,
// fp64, f32, half, float, double).
std::string DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view text);

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool operator==(const Interval&) const = default;
};

// One interval per tensor dimension.
using Box = std::vector<Interval>;

int64_t NumElements(const Box& box);
bool IsEmpty(const Box& box);
// Intersection; empty (some size()==0) if the boxes do not overlap.
Box Intersect(const Box& a, const Box& b);
std::string BoxToString(const Box& box);  // e.g. "[0:512,0:1024,0:512]"
// True if every element of `inner` lies in `outer` (an empty `inner` is
// contained in anything of the same rank).
bool Contains(const Box& outer, const Box& inner);
// `a` minus `b` as at most 2*rank disjoint non-empty boxes.
std::vector<Box> SubtractBox(const Box& a, const Box& b);

struct TensorSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;

  int64_t num_elements() const;
  int64_t num_bytes() const { return num_elements() * DTypeSize(dtype); }
  Box full_box() const;
};

// Parses "1024x1024x512" (every extent >= 1).
absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_TENSOR_H_
