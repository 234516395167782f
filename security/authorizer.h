// Authorizer: every rule of who may call which RPC, in one table, as pure
// functions of (method, principal). The services call them through the
// call guard (security/call_guard.h); tests drive them directly.
//
//   RETURN_IF_ERROR(Authorize("/meshcast.v1.Controller/CancelJob", caller));
//   if (!CanAccessJob(caller, job.owner())) return NotFound(...);
//
// Rules (docs/security.md):
// - kAnonymous (only under --insecure) may call everything.
// - Controller: RegisterWorker, Heartbeat, ReportProgress, KvSet, KvGet:
//   workers only. SubmitJob, GetJob, ListJobs, WatchJob, CancelJob, Plan:
//   admins and users (a user's job calls are narrowed to its own jobs by
//   CanAccessJob). GetCluster: admins only.
// - Worker: RunTask, AbortTask, GetStatus: the controller only.
// - Any method not in the table is denied.
//
// Errors: PERMISSION_DENIED naming the method and the caller's kind.
//
// Thread safety: pure functions.
#ifndef MESHCAST_SECURITY_AUTHORIZER_H_
#define MESHCAST_SECURITY_AUTHORIZER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "security/principal.h"

namespace meshcast::security {

// `method` is the full gRPC name, "/meshcast.v1.Controller/GetJob".
absl::Status Authorize(absl::string_view method, const Principal& principal);

// Whether `principal` may see, watch and cancel a job of `owner`: admins
// and anonymous callers every job, a user only its own (a job without an
// owner belongs to no user), nobody else.
bool CanAccessJob(const Principal& principal, absl::string_view owner);
// Whether CanAccessJob holds for every owner (admins, anonymous callers).
bool CanAccessEveryJob(const Principal& principal);

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_AUTHORIZER_H_
