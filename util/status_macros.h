// Status propagation macros for absl::Status / absl::StatusOr.
//
// Debian's Abseil (20220623) ships neither RETURN_IF_ERROR nor ASSIGN_OR_RETURN,
// so meshcast defines its own, with the usual meaning:
//
//   RETURN_IF_ERROR(DoThing());                 // returns the status if not ok
//   ASSIGN_OR_RETURN(auto plan, MakePlan(...)); // unwraps or returns the status
#ifndef MESHCAST_UTIL_STATUS_MACROS_H_
#define MESHCAST_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MESHCAST_CONCAT_INNER_(a, b) a##b
#define MESHCAST_CONCAT_(a, b) MESHCAST_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status meshcast_status_ = (expr);          \
    if (!meshcast_status_.ok()) return meshcast_status_; \
  } while (0)

#define MESHCAST_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                    \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(*tmp)

#define ASSIGN_OR_RETURN(lhs, rexpr)                                         \
  MESHCAST_ASSIGN_OR_RETURN_IMPL_(                                           \
      MESHCAST_CONCAT_(meshcast_statusor_, __LINE__), lhs, rexpr)

#endif  // MESHCAST_UTIL_STATUS_MACROS_H_
