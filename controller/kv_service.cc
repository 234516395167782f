#include "controller/kv_service.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/server_context.h"
#include "util/grpc_status.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

absl::Status CheckKvAccess(absl::string_view verb, v1::JobState job_state,
                           absl::Span<const std::string> job_workers,
                           absl::string_view who, absl::string_view key) {
  ASSIGN_OR_RETURN(absl::string_view job, KvJobOf(key));
  const std::string prefix = QuotePrefix(KvPrefixOf(job));
  if (job_state != v1::JOB_STATE_RUNNING) {
    const std::string state =
        job_state == v1::JOB_STATE_UNSPECIFIED
            ? std::string("not queued or running (finished, or no such job)")
            : absl::StrCat("in state ", v1::JobState_Name(job_state));
    return absl::FailedPreconditionError(
        absl::StrCat("keys under ", prefix, " can be ", verb,
                     " only while that job is RUNNING; it is ", state));
  }
  if (who.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "keys under ", prefix, " can be ", verb,
        " only by that job's workers; the call names no worker (the "
        "request's worker field is empty)"));
  }
  if (std::find(job_workers.begin(), job_workers.end(), who) ==
      job_workers.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("keys under ", prefix, " can be ", verb,
                     " only by that job's workers; worker ", QuotePrefix(who),
                     " is not one of them"));
  }
  return absl::OkStatus();
}

// The reactor of one KvGet. Its wait is a KvStore waiter; whichever comes
// first (the store's answer or OnCancel) finishes the call. The store may
// answer before Start has returned (a key already set, a tiny timeout hit
// by the timer thread); the answer is then held until Start is done with
// the reactor, so that OnDone cannot delete it under Start.
class KvGetReactor : public grpc::ServerUnaryReactor {
 public:
  KvGetReactor(KvStore* kv, v1::KvGetResponse* response)
      : kv_(kv), response_(response) {}

  void Start(absl::string_view key, absl::Duration timeout) {
    KvStore* const kv = kv_;
    const KvStore::WaiterId id =
        kv->GetAsync(key, timeout, [this](absl::StatusOr<std::string> value) {
          Complete(std::move(value));
        });
    std::optional<absl::StatusOr<std::string>> ready;
    bool cancel_now = false;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      started_ = true;
      ready = std::move(pending_);
      cancel_now = !ready.has_value() && cancelled_;
    }
    // Nothing below touches `this` once the call may finish elsewhere.
    if (ready.has_value()) {
      FinishWith(*std::move(ready));
    } else if (cancel_now) {
      kv->CancelWait(id);
    }
  }

  void OnCancel() override {
    KvStore::WaiterId id = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    // Removes the waiter, which finishes the call with CANCELLED; nothing
    // if the store answered already.
    if (id != 0) kv_->CancelWait(id);
  }

  void OnDone() override { delete this; }

 private:
  void Complete(absl::StatusOr<std::string> value) {
    {
      absl::MutexLock lock(&mu_);
      if (!started_) {
        pending_ = std::move(value);
        return;
      }
    }
    FinishWith(std::move(value));
  }

  void FinishWith(absl::StatusOr<std::string> value) {
    if (value.ok()) response_->set_value(*std::move(value));
    Finish(ToGrpcStatus(value.status()));
  }

  KvStore* const kv_;
  v1::KvGetResponse* const response_;
  absl::Mutex mu_;
  KvStore::WaiterId id_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<std::string>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status CheckKvWrite(v1::JobState job_state,
                          absl::Span<const std::string> job_workers,
                          absl::string_view writer, absl::string_view key) {
  return CheckKvAccess("written", job_state, job_workers, writer, key);
}

absl::Status CheckKvRead(v1::JobState job_state,
                         absl::Span<const std::string> job_workers,
                         absl::string_view reader, absl::string_view key) {
  return CheckKvAccess("read", job_state, job_workers, reader, key);
}

KvService::KvService(JobManager* jobs, KvStore* kv) : jobs_(jobs), kv_(kv) {}

absl::Status KvService::Check(Access access, absl::string_view who,
                              absl::string_view key) const {
  if (key.empty() || key.size() > KvStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key must be 1..", KvStore::kMaxKeyBytes, " bytes; got ", key.size()));
  }
  ASSIGN_OR_RETURN(absl::string_view job, KvJobOf(key));
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::vector<std::string> workers;
  absl::StatusOr<JobManager::JobMembers> members = jobs_->Members(job);
  if (members.ok()) {
    state = members->state;
    workers = std::move(members->workers);
  } else if (!absl::IsNotFound(members.status())) {
    return members.status();
  }
  return access == Access::kWrite ? CheckKvWrite(state, workers, who, key)
                                  : CheckKvRead(state, workers, who, key);
}

absl::Status KvService::Set(absl::string_view writer, absl::string_view key,
                            absl::string_view value) {
  RETURN_IF_ERROR(Check(Access::kWrite, writer, key));
  RETURN_IF_ERROR(kv_->Set(key, value));
  // The job may have ended between the check and the Set, its keys deleted
  // before this one landed: check again and delete what would outlive it.
  // (JobManager deletes a job's keys in the same step that ends it, so a
  // job still running now will delete this key itself.)
  absl::Status still = Check(Access::kWrite, writer, key);
  if (!still.ok()) {
    kv_->DeletePrefix(KvPrefixOf(*KvJobOf(key)));
    return still;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvService::Get(grpc::CallbackServerContext* context,
                                         absl::string_view reader,
                                         const v1::KvGetRequest& request,
                                         v1::KvGetResponse* response) {
  absl::Status allowed = Check(Access::kRead, reader, request.key());
  if (!allowed.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  // NaN, negative and huge timeouts are clamped; the client's own deadline
  // bounds the wait too.
  double seconds = request.timeout_seconds();
  if (!(seconds > 0)) seconds = 0;
  seconds = std::min(seconds, kMaxWaitSeconds);
  absl::Duration timeout = absl::Seconds(seconds);
  const absl::Time client_deadline = absl::FromChrono(context->deadline());
  timeout = std::min(
      timeout, std::max(absl::ZeroDuration(), client_deadline - absl::Now()));
  auto* reactor = new KvGetReactor(kv_, response);
  reactor->Start(request.key(), timeout);
  return reactor;
}

}  // namespace meshcast
