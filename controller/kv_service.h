// KvService: the rules and the plumbing behind Controller.KvSet and KvGet.
//
// Access rule (CheckKvWrite / CheckKvRead): a key "job/<job_id>/<name>" may
// be written or read only
//   - while job <job_id> is RUNNING: not before (a queued or unknown job's
//     keys cannot be pre-seeded to break it when it starts), not after (its
//     keys are deleted when it ends, see kv_store.h);
//   - by a worker the job was placed on (JobManager::Members), named by the
//     caller's identity.
// Errors: PERMISSION_DENIED for a key outside every job namespace, a caller
// without a worker name, or a worker the job does not use (naming the key's
// prefix and the worker); FAILED_PRECONDITION naming the prefix and the
// job's state for a job that is not running. Quotas: kv_store.h.
//
// The caller's identity: the `worker` field of KvSetRequest / KvGetRequest,
// which the worker fills with the name it registered with.
// ControllerService::KvSet / KvGet pass it in after the call guard has
// matched it with the CN of the worker's client certificate (TLS on); with
// --insecure it is the caller's word.
//
// KvGet does not hold a thread while it waits: Get returns a gRPC callback
// reactor whose wait is a KvStore waiter; it finishes when the key is set,
// on timeout, when the job ends, when the client cancels (OnCancel removes
// the waiter) or on Shutdown.
//
//   KvService kv_service(&jobs, &kv);
//   absl::Status s = kv_service.Set(request->worker(), request->key(),
//                                    request->value());
//   return kv_service.Get(context, request->worker(), *request, response);
//
// Thread safety: thread-safe.
#ifndef MESHCAST_CONTROLLER_KV_SERVICE_H_
#define MESHCAST_CONTROLLER_KV_SERVICE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "controller/job_manager.h"
#include "controller/kv_store.h"
#include "grpcpp/support/server_callback.h"
#include "meshcast/v1/controller.pb.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast {

// The access rule for writing `key` by worker `writer`, given the state of
// the key's job and the workers it was placed on. The job id must be the
// one KvJobOf(key) names. JOB_STATE_UNSPECIFIED stands for "no such job
// queued or running" (unknown, or finished and forgotten).
absl::Status CheckKvWrite(v1::JobState job_state,
                          absl::Span<const std::string> job_workers,
                          absl::string_view writer, absl::string_view key);
// The same rule for reading.
absl::Status CheckKvRead(v1::JobState job_state,
                         absl::Span<const std::string> job_workers,
                         absl::string_view reader, absl::string_view key);

class KvService {
 public:
  // KvGet waits at most this long whatever the client asks.
  static constexpr double kMaxWaitSeconds = 600;

  // Both must outlive the service.
  KvService(JobManager* jobs, KvStore* kv);

  // Controller.KvSet by worker `writer`.
  absl::Status Set(absl::string_view writer, absl::string_view key,
                   absl::string_view value);

  // Controller.KvGet by worker `reader`: the reactor gRPC drives.
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                absl::string_view reader,
                                const v1::KvGetRequest& request,
                                v1::KvGetResponse* response);

 private:
  enum class Access { kRead, kWrite };
  // Looks up the key's job and applies the rule.
  absl::Status Check(Access access, absl::string_view who,
                     absl::string_view key) const;

  JobManager* const jobs_;
  KvStore* const kv_;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_KV_SERVICE_H_
