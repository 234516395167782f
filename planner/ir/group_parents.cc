#include "planner/ir/group_parents.h"

#include "absl/strings/str_cat.h"

namespace meshcast {

absl::Status CheckGroupParents(const v1::CommGroup& group) {
  const int n = group.devices_size();
  if (group.parents_size() == 0) return absl::OkStatus();
  if (group.parents_size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group.id(), " has ", n, " devices but ", group.parents_size(),
        " parents; need one per device (or none: a chain)"));
  }
  if (group.parents(0) != -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.id(), " parents[0] is ", group.parents(0),
                     "; rank 0 is the sender, so -1"));
  }
  for (int r = 1; r < n; ++r) {
    if (group.parents(r) < 0 || group.parents(r) >= r) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", group.id(), " parents[", r, "] is ", group.parents(r),
          "; must be a rank in [0, ", r - 1, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast
