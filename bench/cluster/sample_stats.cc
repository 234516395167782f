#include "bench/cluster/sample_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace meshcast::bench {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double clamped = std::clamp(p, 0.0, 100.0);
  // Rank on a 0..n-1 scale; the value lies between its floor and ceiling.
  const double rank = clamped / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double weight = rank - static_cast<double>(below);
  return values[below] + (values[above] - values[below]) * weight;
}

double Median(std::vector<double> values) {
  return Percentile(std::move(values), 50);
}

SampleSummary Summarize(const std::vector<double>& values) {
  SampleSummary summary;
  summary.count = static_cast<int>(values.size());
  if (values.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    summary.min = summary.p50 = summary.p99 = summary.max = summary.mean = nan;
    return summary;
  }
  summary.min = *std::min_element(values.begin(), values.end());
  summary.max = *std::max_element(values.begin(), values.end());
  summary.p50 = Percentile(values, 50);
  summary.p99 = Percentile(values, 99);
  summary.mean = std::accumulate(values.begin(), values.end(), 0.0) /
                 static_cast<double>(values.size());
  return summary;
}

}  // namespace meshcast::bench
