#include "controller/controller_metrics.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/support/interceptor.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "planner/kinds/job_kind.h"

#ifndef MESHCAST_VERSION
#define MESHCAST_VERSION "unknown"
#endif

namespace meshcast {
namespace {

constexpr v1::JobState kAllStates[] = {
    v1::JOB_STATE_QUEUED,    v1::JOB_STATE_PLANNING, v1::JOB_STATE_RUNNING,
    v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,   v1::JOB_STATE_CANCELLED};
constexpr v1::JobState kFinalStates[] = {
    v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED};

prometheus::Labels TypeStateLabels(absl::string_view type,
                                   v1::JobState state) {
  return {{"type", std::string(type)},
          {"state", ControllerMetrics::StateLabel(state)}};
}

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// Planning is milliseconds for small meshes and can reach seconds for
// large ones: 100 us .. ~26 s.
const prometheus::Histogram::BucketBoundaries& PlanningBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries(
          ExponentialBuckets(1e-4, 4, 10));
  return *buckets;
}
// Jobs run from milliseconds (tiny, local) to an hour (a 2 GiB tensor on a
// slow link with a queue ahead): 10 ms .. ~2.9 h.
const prometheus::Histogram::BucketBoundaries& JobDurationBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries(
          ExponentialBuckets(0.01, 4, 10));
  return *buckets;
}
// 1 is "as predicted"; the alert fires above 2. Fine steps around 1, coarse
// ones for CPU clusters whose links are far from the modelled ones.
const prometheus::Histogram::BucketBoundaries& RatioBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries(
          {0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, 30, 100, 1000});
  return *buckets;
}

// Every method of the services the controller serves, as gRPC names them.
absl::flat_hash_set<std::string> KnownMethods() {
  absl::flat_hash_set<std::string> methods = {
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
  };
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Controller::service_full_name());
  if (service != nullptr) {
    for (int i = 0; i < service->method_count(); ++i) {
      methods.insert(absl::StrCat("/", service->full_name(), "/",
                                  service->method(i)->name()));
    }
  }
  return methods;
}

class RpcCountingInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcCountingInterceptor(ControllerMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->RpcServed(method_, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  ControllerMetrics* const metrics_;
  const std::string method_;
};

class RpcCountingInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcCountingInterceptorFactory(ControllerMetrics* metrics)
      : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcCountingInterceptor(
        metrics_, info->method() != nullptr ? info->method() : "");
  }

 private:
  ControllerMetrics* const metrics_;
};

}  // namespace

ControllerMetrics::ControllerMetrics()
    : metrics_(std::make_shared<MetricsCollection>()),
      workers_(metrics_->AddGauge("meshcast_controller_workers", "Registered workers by state (ready, busy, lost).")),
      devices_(metrics_->AddGauge("meshcast_controller_devices", "Devices of live workers: free, or busy (held by a "
"started job).")),
      jobs_(metrics_->AddGauge("meshcast_controller_jobs", "Jobs known to the controller, by type and state.")),
      jobs_finished_(metrics_->AddCounter("meshcast_controller_jobs_finished_total", "Jobs that reached a final state (succeeded, "
"failed, cancelled).")),
      queue_depth_(metrics_->AddGauge("meshcast_controller_queue_depth", "Jobs waiting for devices.")
                       .Add({})),
      planning_seconds_(metrics_->AddHistogram("meshcast_controller_planning_seconds", "Wall time to plan a job (plan, plan IR, "
"per-worker programs).")),
      job_duration_seconds_(
          metrics_->AddHistogram("meshcast_controller_job_duration_seconds", "Time from submission to the final state, by final "
"state.")),
      measured_over_predicted_(
          metrics_->AddHistogram("meshcast_controller_measured_over_predicted_ratio", "Measured data-plane time of a succeeded job over the "
"simulator's prediction.")),
      measured_seconds_(
          metrics_->AddCounter("meshcast_controller_dataplane_measured_seconds_total", "Measured data-plane time of succeeded jobs that had a "
"prediction.")),
      predicted_seconds_(
          metrics_->AddCounter("meshcast_controller_dataplane_predicted_seconds_total", "The simulator's predicted data-plane time of the same "
"jobs.")),
      rpcs_(metrics_->AddCounter("meshcast_controller_rpcs_total", "RPCs the controller answered, by method and gRPC "
"status code.")),
      known_methods_(KnownMethods()) {
  metrics_->AddGauge("meshcast_build_info", "Build identity of this process (always 1).")
      .Add({{"component", "controller"}, {"version", MESHCAST_VERSION}})
      .Set(1);
  // Every label set the alerts take increase() of exists from the start, at
  // 0, so that the first increment is seen (docs/monitoring.md).
  for (const JobKind* kind : AllJobKinds()) {
    for (v1::JobState state : kFinalStates) {
      jobs_finished_.Add(TypeStateLabels(kind->name(), state));
    }
    measured_seconds_.Add({{"type", kind->name()}});
    predicted_seconds_.Add({{"type", kind->name()}});
  }
  metrics_->SetRefresh([this] { RefreshState(); });
  RefreshState();
}

void ControllerMetrics::SetStateSource(
    std::function<ControllerState()> source) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(source);
}

void ControllerMetrics::RefreshState() {
  std::function<ControllerState()> source;
  {
    absl::MutexLock lock(&mu_);
    source = source_;
  }
  const ControllerState state = source ? source() : ControllerState();
  workers_.Add({{"state", "ready"}}).Set(state.workers_ready);
  workers_.Add({{"state", "busy"}}).Set(state.workers_busy);
  workers_.Add({{"state", "lost"}}).Set(state.workers_lost);
  devices_.Add({{"state", "free"}}).Set(state.devices_free);
  devices_.Add({{"state", "busy"}}).Set(state.devices_busy);
  for (v1::JobState job_state : kAllStates) {
    auto it = state.jobs.find(job_state);
    jobs_.Add(TypeStateLabels(kReshard, job_state))
        .Set(it == state.jobs.end() ? 0 : static_cast<double>(it->second));
  }
  queue_depth_.Set(state.queue_depth);
}

void ControllerMetrics::JobPlanned(absl::string_view type, double seconds) {
  planning_seconds_.Add({{"type", std::string(type)}}, PlanningBuckets())
      .Observe(seconds);
}

void ControllerMetrics::JobFinished(absl::string_view type, v1::JobState state,
                                    double seconds) {
  if (!IsFinal(state)) return;
  const prometheus::Labels labels = TypeStateLabels(type, state);
  jobs_finished_.Add(labels).Increment();
  job_duration_seconds_.Add(labels, JobDurationBuckets())
      .Observe(std::max(0.0, seconds));
}

void ControllerMetrics::JobMeasured(absl::string_view type,
                                    double measured_seconds,
                                    double predicted_seconds) {
  if (!(measured_seconds > 0) || !(predicted_seconds > 0)) return;
  const prometheus::Labels labels = {{"type", std::string(type)}};
  measured_over_predicted_.Add(labels, RatioBuckets())
      .Observe(measured_seconds / predicted_seconds);
  measured_seconds_.Add(labels).Increment(measured_seconds);
  predicted_seconds_.Add(labels).Increment(predicted_seconds);
}

void ControllerMetrics::RpcServed(absl::string_view full_method,
                                  grpc::StatusCode code) {
  rpcs_.Add({{"method", MethodLabel(full_method)}, {"code", CodeLabel(code)}})
      .Increment();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ControllerMetrics::NewRpcInterceptorFactory() {
  return std::make_unique<RpcCountingInterceptorFactory>(this);
}

std::string ControllerMetrics::MethodLabel(
    absl::string_view full_method) const {
  if (!known_methods_.contains(full_method)) return "other";
  return std::string(full_method.substr(full_method.rfind('/') + 1));
}

std::string ControllerMetrics::StateLabel(v1::JobState state) {
  if (!v1::JobState_IsValid(state)) return "unspecified";
  std::string name = v1::JobState_Name(state);
  constexpr absl::string_view kPrefix = "JOB_STATE_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return absl::AsciiStrToLower(name);
}

std::string ControllerMetrics::CodeLabel(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace meshcast
