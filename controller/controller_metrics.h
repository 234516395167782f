// ControllerMetrics: the controller's Prometheus metrics, exactly the
// controller table of docs/metrics.md, in a MetricsCollection (prometheus-cpp) that
// MetricsHttpServer serves at /metrics.
//
// Two kinds of figures:
// - events, recorded as they happen by the job manager and the gRPC layer:
//   JobPlanned, JobFinished, JobMeasured, RpcServed (the latter through the
//   server interceptor from NewRpcInterceptorFactory(), so every handler is
//   counted without touching it);
// - state, read at scrape time from a snapshot source (SetStateSource):
//   workers by state, devices free/busy, jobs by state, queue depth. Reading
//   state when Prometheus asks keeps the gauges exact without hooking every
//   transition.
//
//   ControllerMetrics metrics;
//   metrics.SetStateSource([&] { return SnapshotOfTheCluster(); });
//   builder.experimental().SetInterceptorCreators(...
//       metrics.NewRpcInterceptorFactory() ...);
//   metrics.JobFinished("reshard", v1::JOB_STATE_SUCCEEDED, 1.5);
//   std::string text = RenderMetrics(*metrics.collectable());
//
// Label values come from fixed sets (job states, job types, the gRPC status
// names, the methods of the services the controller serves: any other method
// is counted as "other"), never job ids or worker names.
//
// Thread safety: every method is thread-safe. The state source runs on the
// scraping thread and must not call back into this object.
#ifndef MESHCAST_CONTROLLER_CONTROLLER_METRICS_H_
#define MESHCAST_CONTROLLER_CONTROLLER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "meshcast/v1/job.pb.h"
#include "util/metrics.h"

namespace meshcast {

// What the controller looks like right now (gauges).
struct ControllerState {
  int workers_ready = 0;
  int workers_busy = 0;  // a device of its host is held by a started job
  int workers_lost = 0;
  int devices_free = 0;  // devices of live (not lost) workers
  int devices_busy = 0;
  // Jobs the controller knows (database), by state; missing states are 0.
  std::map<v1::JobState, int64_t> jobs;
  int queue_depth = 0;  // QUEUED jobs waiting for devices
};

class ControllerMetrics {
 public:
  // The `type` label of job metrics is the job kind's name (JobKind::name);
  // the jobs-by-state gauge, which the store counts without kinds, still
  // reports every job under this one.
  static constexpr absl::string_view kReshard = "reshard";

  ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  // What /metrics serves (MetricsHttpServer::Start): the registry, with
  // the state gauges read from the state source at every scrape.
  std::shared_ptr<prometheus::Collectable> collectable() const {
    return metrics_;
  }

  // Called at every scrape; without a source the state gauges read 0.
  void SetStateSource(std::function<ControllerState()> source)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Wall time the planner (plan, plan IR, per-worker programs) took.
  void JobPlanned(absl::string_view type, double seconds);
  // A job reached a final state, `seconds` after it was submitted. Other
  // states are ignored.
  void JobFinished(absl::string_view type, v1::JobState state, double seconds);
  // A job's measured data-plane time against the simulator's prediction;
  // ignored unless both are positive. Feeds the ratio histogram and the two
  // seconds counters whose rates divide into the time-weighted ratio the
  // bandwidth alert uses (a large job weighs more than a tiny one).
  void JobMeasured(absl::string_view type, double measured_seconds,
                   double predicted_seconds);
  // One RPC answered with `code`; `full_method` as gRPC names it
  // ("/meshcast.v1.Controller/SubmitJob").
  void RpcServed(absl::string_view full_method, grpc::StatusCode code);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators: counts
  // every RPC the server answers (RpcServed). This object must outlive the
  // server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewRpcInterceptorFactory();

  // The `method` label of a gRPC method name: the method's short name for
  // the services the controller serves (Controller, health, reflection),
  // "other" for anything else.
  std::string MethodLabel(absl::string_view full_method) const;

  // "queued", "succeeded", ... ("unspecified" for anything unknown).
  static std::string StateLabel(v1::JobState state);
  // "OK", "NOT_FOUND", ... ("UNKNOWN" for codes outside the enum).
  static std::string CodeLabel(grpc::StatusCode code);

 private:
  // Refreshes the state gauges from the state source.
  void RefreshState() ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<MetricsCollection> metrics_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Gauge>& devices_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Counter>& jobs_finished_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Histogram>& planning_seconds_;
  prometheus::Family<prometheus::Histogram>& job_duration_seconds_;
  prometheus::Family<prometheus::Histogram>& measured_over_predicted_;
  prometheus::Family<prometheus::Counter>& measured_seconds_;
  prometheus::Family<prometheus::Counter>& predicted_seconds_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  // Full names ("/pkg.Service/Method") of the methods counted by name.
  const absl::flat_hash_set<std::string> known_methods_;

  absl::Mutex mu_;
  std::function<ControllerState()> source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_CONTROLLER_METRICS_H_
