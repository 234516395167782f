#include "worker/rate_probe.h"

#include <algorithm>
#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshcast/v1/plan.pb.h"
#include "worker/kernels/compute.h"

namespace meshcast::worker {
namespace {

// Runs `prepare(thread)` and then `work(thread)` on `threads` threads,
// every work starting once every prepare is done (the buffers are
// allocated and touched outside the timing); returns the longest work's
// seconds.
template <typename Prepare, typename Work>
double RunTogether(int threads, Prepare prepare, Work work) {
  std::vector<double> seconds(threads, 0);
  std::barrier ready(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      prepare(t);
      ready.arrive_and_wait();
      const absl::Time start = absl::Now();
      work(t);
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
  std::vector<std::vector<char>> from(devices), to(devices);
  const double copy_seconds = RunTogether(
      devices,
      [&](int t) {
        from[t].assign(options.copy_bytes, static_cast<char>(t));
        to[t].assign(options.copy_bytes, 0);
      },
      [&](int t) {
        const absl::Time end = absl::Now() + half;
        do {
          std::memcpy(to[t].data(), from[t].data(), options.copy_bytes);
          std::memcpy(from[t].data(), to[t].data(), options.copy_bytes);
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
  std::vector<std::vector<float>> a(devices), b(devices), c(devices);
  auto bytes = [](std::vector<float>& v) {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()),
                          v.size() * sizeof(float));
  };
  RunTogether(
      devices,
      [&](int t) {
        a[t].assign(n * n, 0.5f);
        b[t].assign(n * n, 0.25f);
        c[t].assign(n * n, 0.0f);
      },
      [&](int t) {
        const absl::Time start = absl::Now(), end = start + half;
        int64_t runs = 0;
        do {
          failed[t] = RunGemm(gemm, DType::kFloat32, bytes(a[t]), bytes(b[t]),
                              bytes(c[t]));
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
