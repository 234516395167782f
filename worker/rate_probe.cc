#include "worker/rate_probe.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshcast/v1/plan.pb.h"
#include "worker/kernels/compute.h"

namespace meshcast::worker {
namespace {

// Runs `body(thread)` on `threads` threads started together; returns the
// longest thread's seconds.
template <typename Body>
double RunTogether(int threads, Body body) {
  std::vector<double> seconds(threads, 0);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const absl::Time start = absl::Now();
      body(t);
      seconds[t] = absl::ToDoubleSeconds(absl::Now() - start);
    });
  }
  for (std::thread& thread : pool) thread.join();
  return *std::max_element(seconds.begin(), seconds.end());
}

}  // namespace

absl::StatusOr<ProbedRates> ProbeCpuRates(int devices,
                                          const ProbeOptions& options) {
  if (devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate probe: devices = ", devices, "; must be >= 1"));
  }
  if (options.copy_bytes < 4096 || options.gemm_size < 16 ||
      options.budget <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rate probe: copy_bytes ", options.copy_bytes, " (>= 4096), gemm_size ",
        options.gemm_size, " (>= 16), budget ",
        absl::FormatDuration(options.budget), " (> 0)"));
  }
  const absl::Duration half = options.budget / 2;
  ProbedRates rates;

  // Copies: back and forth between two buffers per thread.
  std::vector<int64_t> copied(devices, 0);
  const double copy_seconds = RunTogether(devices, [&](int t) {
    std::vector<char> a(options.copy_bytes, static_cast<char>(t)),
        b(options.copy_bytes, 0);
    const absl::Time end = absl::Now() + half;
    do {
      std::memcpy(b.data(), a.data(), a.size());
      std::memcpy(a.data(), b.data(), b.size());
      copied[t] += 2 * options.copy_bytes;
    } while (absl::Now() < end);
  });
  int64_t total = 0;
  for (int64_t bytes : copied) total += bytes;
  rates.host_copy_bytes_per_second = total / copy_seconds;

  // GEMMs: the engine's kernel, one per thread at a time.
  const int64_t n = options.gemm_size;
  v1::GemmAttrs gemm;
  gemm.set_m(n);
  gemm.set_n(n);
  gemm.set_k(n);
  std::vector<double> flops(devices, 0);
  std::vector<absl::Status> failed(devices);
  RunTogether(devices, [&](int t) {
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
    auto bytes = [](std::vector<float>& v) {
      return absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()),
                            v.size() * sizeof(float));
    };
    const absl::Time start = absl::Now(), end = start + half;
    int64_t runs = 0;
    do {
      failed[t] = RunGemm(gemm, DType::kFloat32, bytes(a), bytes(b), bytes(c));
      if (!failed[t].ok()) return;
      ++runs;
    } while (absl::Now() < end);
    flops[t] = 2.0 * n * n * n * runs /
               absl::ToDoubleSeconds(absl::Now() - start);
  });
  for (const absl::Status& status : failed) {
    if (!status.ok()) return status;
  }
  rates.device_flops = *std::min_element(flops.begin(), flops.end());
  return rates;
}

}  // namespace meshcast::worker
