#include "util/metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshcast {
namespace {

// A series parsed into its name and label set: `name{a="x",b="y"}`.
struct Series {
  std::string name;
  std::map<std::string, std::string> labels;
};

// Reads one quoted label value starting after the opening quote; undoes
// the exposition format's escapes (\\, \", \n).
bool ConsumeQuoted(absl::string_view* text, std::string* value) {
  value->clear();
  while (!text->empty()) {
    const char c = text->front();
    text->remove_prefix(1);
    if (c == '"') return true;
    if (c == '\\' && !text->empty()) {
      const char e = text->front();
      text->remove_prefix(1);
      value->push_back(e == 'n' ? '\n' : e);
      continue;
    }
    value->push_back(c);
  }
  return false;
}

// Parses `name` or `name{k="v",...}` from the front of `text`, leaving the
// rest (" value ..." on a sample line).
std::optional<Series> ConsumeSeries(absl::string_view* text) {
  Series series;
  const size_t end = text->find_first_of("{ ");
  series.name = std::string(text->substr(0, end));
  if (series.name.empty()) return std::nullopt;
  text->remove_prefix(end == absl::string_view::npos ? text->size() : end);
  if (!absl::ConsumePrefix(text, "{")) return series;
  while (!absl::ConsumePrefix(text, "}")) {
    absl::ConsumePrefix(text, ",");
    if (absl::ConsumePrefix(text, "}")) break;  // a trailing comma
    const size_t eq = text->find("=\"");
    if (eq == absl::string_view::npos) return std::nullopt;
    std::string key(text->substr(0, eq));
    text->remove_prefix(eq + 2);
    std::string value;
    if (!ConsumeQuoted(text, &value)) return std::nullopt;
    series.labels[std::move(key)] = std::move(value);
  }
  return series;
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor,
                                       int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

void MetricsCollection::Declare(const std::string& name,
                                const std::string& help,
                                prometheus::MetricType type) {
  for (const prometheus::MetricFamily& family : declared_) {
    if (family.name != name) continue;
    if (family.type != type) {
      throw std::invalid_argument(
          absl::StrCat("metric ", name, " declared with two types"));
    }
    return;
  }
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  declared_.push_back(std::move(family));
}

prometheus::Family<prometheus::Counter>& MetricsCollection::AddCounter(
    const std::string& name, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Counter);
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Gauge>& MetricsCollection::AddGauge(
    const std::string& name, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Gauge);
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Histogram>& MetricsCollection::AddHistogram(
    const std::string& name, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Histogram);
  return prometheus::BuildHistogram().Name(name).Help(help).Register(
      *registry_);
}

void MetricsCollection::SetRefresh(std::function<void()> refresh) {
  absl::MutexLock lock(&mu_);
  refresh_ = std::move(refresh);
}

std::vector<prometheus::MetricFamily> MetricsCollection::Collect() const {
  std::function<void()> refresh;
  std::vector<prometheus::MetricFamily> declared;
  {
    absl::MutexLock lock(&mu_);
    refresh = refresh_;
    declared = declared_;
  }
  if (refresh) refresh();
  std::vector<prometheus::MetricFamily> collected = registry_->Collect();
  for (prometheus::MetricFamily& family : declared) {
    for (prometheus::MetricFamily& with_samples : collected) {
      if (with_samples.name == family.name) {
        family.metric = std::move(with_samples.metric);
        break;
      }
    }
  }
  return declared;
}

std::string RenderMetrics(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

std::optional<double> FindSample(absl::string_view text,
                                 absl::string_view series) {
  absl::string_view wanted_text = series;
  const std::optional<Series> wanted = ConsumeSeries(&wanted_text);
  if (!wanted.has_value() || !wanted_text.empty()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const std::optional<Series> found = ConsumeSeries(&line);
    if (!found.has_value() || found->name != wanted->name ||
        found->labels != wanted->labels || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    // A sample may carry a timestamp after its value.
    const absl::string_view value_text = line.substr(0, line.find(' '));
    double value = 0;
    if (absl::SimpleAtod(value_text, &value)) return value;
  }
  return std::nullopt;
}

}  // namespace meshcast
