// attention_kernel_bench: the CPU attention kernel (worker/kernels/
// attention.h RunAttentionBlock, one block of flash attention, forward)
// against the GEMM rate it is planned with, on one core.
//
//   attention_kernel_bench                      # the default grid
//   attention_kernel_bench --seq-lens 4096,8192 --head-dims 64,128 --repeat 5
//
// For every (rows, head_dim, mask) it prints the kernel's time and FLOP
// rate (4 x rows^2 x head_dim FLOPs per head, half the pairs when causal)
// beside two bounds measured in the same run:
//  - gemms: the same FLOPs as two plain GEMMs of the block's shapes (S =
//    Q K^T, then O = S V, no softmax), i.e. what the block would take if
//    its exponentials, maxima and sums were free;
//  - probe: the rate the worker's start-up probe measures (RunGemm of
//    256^3, worker/rate_probe.h), which is the device_flops that the
//    planner's compute-only ideal of an attention job divides by.
// kernel/probe is the fraction of that ideal one device can reach with no
// communication at all: the ceiling of a ring's ideal/t on this host.
//
// Every figure is the median of --repeat runs after one warm-up. Exit
// status is non-zero only on errors (bad flags, a kernel error).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/command_errors.h"
#include "cli/flags.h"
#include "cli/text_table.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"
#include "util/status_macros.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/compute.h"

namespace meshcast::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `repeat` runs of `run` after one warm-up.
template <typename Fn>
absl::StatusOr<double> MedianSeconds(int repeat, Fn run) {
  RETURN_IF_ERROR(run());
  std::vector<double> seconds;
  for (int i = 0; i < repeat; ++i) {
    const auto start = Clock::now();
    RETURN_IF_ERROR(run());
    seconds.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

std::vector<uint8_t> RandomFloats(int64_t n, uint32_t seed) {
  std::vector<uint8_t> bytes(n * sizeof(float));
  float* f = reinterpret_cast<float*>(bytes.data());
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    f[i] = static_cast<float>(x >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }
  return bytes;
}

// Seconds of one float32 GEMM m x n x k (B transposed when trans_b).
absl::StatusOr<double> GemmSeconds(int64_t m, int64_t n, int64_t k,
                                   bool trans_b, int repeat) {
  v1::GemmAttrs g;
  g.set_m(m);
  g.set_n(n);
  g.set_k(k);
  g.set_trans_b(trans_b);
  const std::vector<uint8_t> a = RandomFloats(m * k, 1);
  const std::vector<uint8_t> b = RandomFloats(k * n, 2);
  std::vector<uint8_t> c(m * n * sizeof(float));
  return MedianSeconds(repeat, [&] {
    return worker::RunGemm(g, DType::kFloat32, a, b, absl::MakeSpan(c));
  });
}

struct Row {
  int64_t rows = 0;
  int64_t head_dim = 0;
  bool causal = false;
};

absl::Status RunRow(const Row& row, int64_t heads, int repeat,
                    double probe_flops, cli::TextTable& table,
                    std::vector<double>& kernel_over_probe) {
  const int64_t n = row.rows, d = row.head_dim;
  v1::AttentionBlockAttrs a;
  a.set_batch(1);
  a.set_heads(heads);
  a.set_kv_heads(heads);
  a.set_q_rows(n);
  a.set_kv_rows(n);
  a.set_head_dim(d);
  a.set_causal(row.causal);
  for (int64_t i = 0; i < n; ++i) {
    a.add_q_position(i);
    a.add_kv_position(i);
  }
  const std::vector<uint8_t> q = RandomFloats(heads * n * d, 3);
  const std::vector<uint8_t> k = RandomFloats(heads * n * d, 4);
  const std::vector<uint8_t> v = RandomFloats(heads * n * d, 5);
  std::vector<uint8_t> state(heads * n * (d + 2) * sizeof(float));
  ASSIGN_OR_RETURN(const double kernel, MedianSeconds(repeat, [&] {
                     return worker::RunAttentionBlock(a, DType::kFloat32, q, k,
                                                      v, {},
                                                      absl::MakeSpan(state));
                   }));
  // Q K^T (n x n x d, K transposed), then S V (n x d x n), per head.
  ASSIGN_OR_RETURN(const double scores, GemmSeconds(n, n, d, true, repeat));
  ASSIGN_OR_RETURN(const double values, GemmSeconds(n, d, n, false, repeat));
  const double pairs = row.causal ? 0.5 : 1.0;
  const double flops = 4.0 * n * n * d * heads * pairs;
  const double gemms = (scores + values) * heads * pairs;
  const double probe = flops / probe_flops;
  kernel_over_probe.push_back(probe / kernel);
  table.AddRow({absl::StrCat(n), absl::StrCat(d),
                row.causal ? "causal" : "full", absl::StrFormat("%.4f", kernel),
                absl::StrFormat("%.1f", flops / kernel / 1e9),
                absl::StrFormat("%.4f", gemms),
                absl::StrFormat("%.1f", flops / gemms / 1e9),
                absl::StrFormat("%.4f", probe),
                absl::StrFormat("%.2f", gemms / kernel),
                absl::StrFormat("%.2f", probe / kernel)});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag,
                                               const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1 || value > (1 << 16)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s: '%s' is not a count from 1 to 65536", flag, part));
    }
    out.push_back(value);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: want N[,N...]", flag));
  }
  return out;
}

int Main(const std::vector<std::string>& args) {
  std::string seq_lens = "1024,4096,8192";
  std::string head_dims = "64,128";
  int heads = 1;
  int repeat = 3;
  cli::FlagSet flags(
      "attention_kernel_bench",
      "The CPU attention kernel (one forward block of flash attention, one\n"
      "core) against two plain GEMMs of the same FLOPs and against the GEMM\n"
      "rate the worker's probe reports, which the planner's compute-only\n"
      "ideal divides by.");
  flags.String("seq-lens", &seq_lens, "N[,N...]",
               "query rows = key rows of the block");
  flags.String("head-dims", &head_dims, "D[,D...]", "head_dim");
  flags.Int("heads", &heads, "H", "heads (one kv head each)");
  flags.Int("repeat", &repeat, "R", "timed runs per figure (median)");
  if (auto done = cli::ParseCommandFlags(flags, args, "attention_kernel_bench",
                                         0, "see --help")) {
    std::cout << done->out;
    std::cerr << done->err;
    return done->exit_code;
  }
  absl::StatusOr<std::vector<int64_t>> ns = ParseList("seq-lens", seq_lens);
  absl::StatusOr<std::vector<int64_t>> ds = ParseList("head-dims", head_dims);
  for (const absl::Status& s : {ns.status(), ds.status()}) {
    if (!s.ok()) {
      std::cerr << "attention_kernel_bench: " << s.message() << "\n";
      return 2;
    }
  }
  if (heads < 1 || repeat < 1) {
    std::cerr << "attention_kernel_bench: --heads and --repeat must be >= 1\n";
    return 2;
  }
  // The probe's GEMM: 256^3 float32 (worker/rate_probe.h ProbeOptions).
  absl::StatusOr<double> probe = GemmSeconds(256, 256, 256, false, 20);
  if (!probe.ok()) {
    std::cerr << "attention_kernel_bench: " << probe.status() << "\n";
    return 1;
  }
  const double probe_flops = 2.0 * 256 * 256 * 256 / *probe;
  std::cout << absl::StrFormat(
      "# attention_kernel_bench: float32, %d head(s), one core; probe GEMM "
      "256^3: %.1f GFLOP/s; median of %d\n",
      heads, probe_flops / 1e9, repeat);
  cli::TextTable table(
      {"rows", "head_dim", "mask", "kernel s", "GFLOP/s", "gemms s", "GFLOP/s",
       "probe s", "gemms/kernel", "probe/kernel"},
      {cli::TextTable::kRight, cli::TextTable::kRight, cli::TextTable::kLeft});
  std::vector<double> ratios;
  for (int64_t d : *ds) {
    for (int64_t n : *ns) {
      for (bool causal : {false, true}) {
        absl::Status status =
            RunRow({n, d, causal}, heads, repeat, probe_flops, table, ratios);
        if (!status.ok()) {
          std::cerr << "attention_kernel_bench: " << status << "\n";
          return 1;
        }
      }
    }
  }
  std::cout << table.Render();
  double log_sum = 0;
  for (double r : ratios) log_sum += std::log(r);
  std::cout << absl::StrFormat(
      "# Summary: the kernel reaches %.2f of the probe's GEMM rate (geomean "
      "of %d rows; min %.2f, max %.2f)\n",
      std::exp(log_sum / ratios.size()), static_cast<int>(ratios.size()),
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()));
  return 0;
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) {
  return meshcast::bench::Main(std::vector<std::string>(argv + 1, argv + argc));
}
