#include "util/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshcast {
namespace {

void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount,
                                       std::memory_order_relaxed)) {
  }
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrFormat("%.0f", v);
  }
  // Shortest text that reads back to the same double.
  for (int precision = 6; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} plus an optional extra label (for histogram buckets).
std::string LabelSet(const std::vector<std::string>& names,
                     const std::vector<std::string>& values,
                     const std::string& extra_name = "",
                     const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(
        absl::StrCat(names[i], "=\"", EscapeLabelValue(values[i]), "\""));
  }
  if (!extra_name.empty()) {
    parts.push_back(absl::StrCat(extra_name, "=\"", extra_value, "\""));
  }
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += ",";
    out += parts[i];
  }
  return out + "}";
}

void Header(std::string& out, const std::string& name, const std::string& help,
            const char* type) {
  absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n");
  absl::StrAppend(&out, "# TYPE ", name, " ", type, "\n");
}

}  // namespace

void Counter::Increment(double amount) {
  if (amount < 0) return;  // counters never go down
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_([&] {
        std::sort(upper_bounds.begin(), upper_bounds.end());
        upper_bounds.erase(
            std::unique(upper_bounds.begin(), upper_bounds.end()),
            upper_bounds.end());
        return upper_bounds;
      }()),
      bucket_counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(),
                                   value) -
                  upper_bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : bucket_counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor,
                                       int count) {
  std::vector<double> bounds;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) bounds.push_back(v);
  return bounds;
}

CounterFamily& MetricsRegistry::AddCounter(const std::string& name,
                                           const std::string& help,
                                           std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = counters_[name];
  if (!slot) {
    slot = std::make_unique<CounterFamily>(
        name, help, std::move(labels),
        [] { return std::make_unique<Counter>(); });
  }
  return *slot;
}

GaugeFamily& MetricsRegistry::AddGauge(const std::string& name,
                                       const std::string& help,
                                       std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = gauges_[name];
  if (!slot) {
    slot = std::make_unique<GaugeFamily>(
        name, help, std::move(labels),
        [] { return std::make_unique<Gauge>(); });
  }
  return *slot;
}

HistogramFamily& MetricsRegistry::AddHistogram(
    const std::string& name, const std::string& help,
    std::vector<std::string> labels, std::vector<double> upper_bounds) {
  absl::MutexLock lock(&mu_);
  auto& slot = histograms_[name];
  if (!slot) {
    slot = std::make_unique<HistogramFamily>(
        name, help, std::move(labels), [upper_bounds] {
          return std::make_unique<Histogram>(upper_bounds);
        });
  }
  return *slot;
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::string MetricsRegistry::Render() const {
  std::vector<std::function<void()>> hooks;
  {
    absl::MutexLock lock(&mu_);
    hooks = hooks_;
  }
  for (const auto& hook : hooks) hook();

  std::string out;
  absl::MutexLock lock(&mu_);
  // Not a structured binding: lambdas capture those only from clang 16.
  for (const auto& entry : counters_) {
    const std::string& name = entry.first;
    const auto& family = entry.second;
    Header(out, name, family->help(), "counter");
    family->ForEach([&](const std::vector<std::string>& labels,
                        const Counter& c) {
      absl::StrAppend(&out, name, LabelSet(family->label_names(), labels), " ",
                      FormatValue(c.value()), "\n");
    });
  }
  for (const auto& entry : gauges_) {
    const std::string& name = entry.first;
    const auto& family = entry.second;
    Header(out, name, family->help(), "gauge");
    family->ForEach([&](const std::vector<std::string>& labels,
                        const Gauge& g) {
      absl::StrAppend(&out, name, LabelSet(family->label_names(), labels), " ",
                      FormatValue(g.value()), "\n");
    });
  }
  for (const auto& entry : histograms_) {
    const std::string& name = entry.first;
    const auto& family = entry.second;
    Header(out, name, family->help(), "histogram");
    family->ForEach([&](const std::vector<std::string>& labels,
                        const Histogram& h) {
      Histogram::Snapshot s = h.snapshot();
      const auto& names = family->label_names();
      for (size_t i = 0; i < s.cumulative_counts.size(); ++i) {
        std::string le = i < s.upper_bounds.size()
                             ? FormatValue(s.upper_bounds[i])
                             : std::string("+Inf");
        absl::StrAppend(&out, name, "_bucket",
                        LabelSet(names, labels, "le", le), " ",
                        s.cumulative_counts[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelSet(names, labels), " ",
                      FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", LabelSet(names, labels), " ",
                      s.count, "\n");
    });
  }
  return out;
}

std::optional<double> FindSample(absl::string_view text,
                                 absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line, &value)) return value;
  }
  return std::nullopt;
}

}  // namespace meshcast
