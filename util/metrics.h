// Metrics: a daemon's metrics on prometheus-cpp, which keeps the registry,
// the families, the text exposition and the /metrics endpoint
// (util/metrics_http_server.h serves it with meshcast's web config).
//
//   auto metrics = std::make_shared<MetricsCollection>();
//   auto& bytes = metrics->AddCounter("meshcast_worker_bytes_sent_total",
//                                     "Bytes sent.");
//   bytes.Add({{"link", "inter"}, {"backend", "gloo"}}).Increment(n);
//   auto& secs = metrics->AddHistogram("meshcast_worker_step_duration_seconds",
//                                      "Step time.");
//   secs.Add({{"op", "broadcast"}}, ExponentialBuckets(1e-4, 4, 10))
//       .Observe(0.25);
//   metrics->SetRefresh([&] { queue_depth.Set(queue.size()); });
//   std::string text = RenderMetrics(*metrics);   // what a scrape returns
//
// MetricsCollection adds two things to a prometheus::Registry: every family
// it declares is in every scrape with its HELP and TYPE, also before its
// first sample (prometheus-cpp leaves an empty family out), so a scrape
// always lists the families docs/metrics.md documents; and a refresh hook
// runs at every scrape, for gauges that mirror state held elsewhere
// (workers by state, queue depth).
//
// Names follow Prometheus conventions (meshcast_ prefix, base units, _total
// for counters); label values come from small fixed sets (never job ids).
//
// Thread safety: prometheus-cpp's families and metrics are thread-safe, and
// so is every method here. The refresh hook runs on the scraping thread,
// possibly concurrently with itself, and must not call back into the
// collection.
#ifndef MESHCAST_UTIL_METRICS_H_
#define MESHCAST_UTIL_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace meshcast {

// start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class MetricsCollection : public prometheus::Collectable {
 public:
  MetricsCollection() = default;
  MetricsCollection(const MetricsCollection&) = delete;
  MetricsCollection& operator=(const MetricsCollection&) = delete;

  // Declaring a name twice returns the existing family (prometheus-cpp's
  // rule); a name declared with another type is a programming error and
  // throws std::invalid_argument, as prometheus-cpp does for a bad name.
  prometheus::Family<prometheus::Counter>& AddCounter(const std::string& name,
                                                      const std::string& help)
      ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::Family<prometheus::Gauge>& AddGauge(const std::string& name,
                                                  const std::string& help)
      ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::Family<prometheus::Histogram>& AddHistogram(
      const std::string& name, const std::string& help)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `refresh` at the start of every Collect (every scrape).
  void SetRefresh(std::function<void()> refresh) ABSL_LOCKS_EXCLUDED(mu_);

  // Every declared family in declaration order; one without samples has
  // only its name, help and type.
  std::vector<prometheus::MetricFamily> Collect() const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Declare(const std::string& name, const std::string& help,
               prometheus::MetricType type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
  mutable absl::Mutex mu_;
  // Name, help and type of each declared family, without samples.
  std::vector<prometheus::MetricFamily> declared_ ABSL_GUARDED_BY(mu_);
  std::function<void()> refresh_ ABSL_GUARDED_BY(mu_);
};

// The Prometheus text exposition (0.0.4) of everything `collectable` holds:
// exactly what a scrape of /metrics returns.
std::string RenderMetrics(const prometheus::Collectable& collectable);

// The value of sample `series` in Prometheus text `text`, if present.
// `series` is a metric name with its labels as Prometheus writes them, e.g.
// `meshcast_jobs{type="reshard",state="running"}`; the labels may come in
// any order but must all match, and no other label may be present.
std::optional<double> FindSample(absl::string_view text,
                                 absl::string_view series);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_METRICS_H_
