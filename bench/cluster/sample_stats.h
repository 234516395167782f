// Sample statistics for benchmark figures: median and percentiles of
// measured times, as the cluster benchmark reports them (p50, p99 of job
// latencies; the median of repeated runs).
//
//   SampleSummary s = Summarize(latencies_seconds);
//   std::cout << s.p50 << " " << s.p99 << "\n";
//
// Percentiles interpolate linearly between the two closest ranks (numpy's
// default), so p50 of an even-sized sample is the mean of the middle two and
// p99 of fewer than 100 samples lies between the two largest.
//
// Thread safety: pure functions on values; thread-safe.
#ifndef MESHCAST_BENCH_CLUSTER_SAMPLE_STATS_H_
#define MESHCAST_BENCH_CLUSTER_SAMPLE_STATS_H_

#include <vector>

namespace meshcast::bench {

// The p-th percentile (0 <= p <= 100, clamped) of `values` in any order;
// NaN for an empty sample.
double Percentile(std::vector<double> values, double p);

// Percentile(values, 50).
double Median(std::vector<double> values);

struct SampleSummary {
  int count = 0;
  // NaN when count is 0.
  double min = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

SampleSummary Summarize(const std::vector<double>& values);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_SAMPLE_STATS_H_
