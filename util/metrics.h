// Metrics: counters, gauges and histograms with labels, rendered in the
// Prometheus text exposition format (version 0.0.4) and served over HTTP by
// MetricsHttpServer (util/metrics_http_server.h).
//
// Usage:
//   MetricsRegistry registry;
//   CounterFamily& bytes = registry.AddCounter(
//       "meshcast_worker_bytes_sent_total", "Bytes sent.", {"link", "backend"});
//   bytes.WithLabels({"inter", "gloo"}).Increment(n);
//   HistogramFamily& secs = registry.AddHistogram(
//       "meshcast_worker_step_duration_seconds", "Step time.", {"op"},
//       ExponentialBuckets(1e-4, 4, 10));
//   std::string text = registry.Render();
//
// Names follow Prometheus conventions (meshcast_ prefix, base units, _total
// for counters); label values must come from small fixed sets (never job ids).
//
// Thread safety: everything is safe to use from any thread. Children returned
// by WithLabels live as long as the registry; callers may keep the reference.
#ifndef MESHCAST_UTIL_METRICS_H_
#define MESHCAST_UTIL_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace meshcast {

class Counter {
 public:
  void Increment(double amount = 1.0);  // amount must be >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> bucket_counts_ ABSL_GUARDED_BY(mu_);  // +Inf last
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// A metric family: one child per distinct tuple of label values.
template <typename T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::function<std::unique_ptr<T>()> make)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(labels)),
        make_(std::move(make)) {}

  // The child for these label values (one per label name, in order); a
  // wrong count of values is a programming error and returns a shared
  // "invalid" child that is never rendered.
  T& WithLabels(const std::vector<std::string>& values) {
    absl::MutexLock lock(&mu_);
    if (values.size() != label_names_.size()) {
      if (!invalid_) invalid_ = make_();
      return *invalid_;
    }
    auto& slot = children_[values];
    if (!slot) slot = make_();
    return *slot;
  }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Calls fn(label values, child) for every child, in label order.
  void ForEach(const std::function<void(const std::vector<std::string>&,
                                        const T&)>& fn) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [labels, child] : children_) fn(labels, *child);
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<T> invalid_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class MetricsRegistry {
 public:
  // Adding a name twice returns the existing family (labels of the first
  // registration win).
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  HistogramFamily& AddHistogram(const std::string& name,
                                const std::string& help,
                                std::vector<std::string> labels,
                                std::vector<double> upper_bounds);

  // Called at the start of every Render(), e.g. to refresh gauges that
  // mirror state held elsewhere (workers by state, queue depth).
  void AddCollectHook(std::function<void()> hook);

  // The whole registry in the Prometheus text format.
  std::string Render() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<CounterFamily>> counters_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<GaugeFamily>> gauges_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<HistogramFamily>> histograms_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
};

// The value of sample `series` (a metric name with its labels exactly as
// Render writes them, e.g. `meshcast_jobs{state="running"}`) in Prometheus
// text `text`, if present. For tests and tools that read /metrics.
std::optional<double> FindSample(absl::string_view text,
                                 absl::string_view series);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_METRICS_H_
