#include "controller/controller_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "planner/topology.h"
#include "security/tls_credentials.h"
#include "util/metrics_http_server.h"
#include "util/status_macros.h"
#include "util/web_config.h"

namespace meshcast {
namespace {

constexpr double kBytesPerGbit = 1e9 / 8;
constexpr double kSecondsPerMicrosecond = 1e-6;

// `value` in the flag's units must be > 0 and stay finite once converted to
// base units by `scale`.
absl::Status CheckPositive(absl::string_view flag, double value,
                           absl::string_view unit, double scale) {
  if (std::isfinite(value) && value > 0 && std::isfinite(value * scale)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be a positive finite number of ", unit,
                   ", got ", value));
}

// As CheckPositive, but 0 is allowed and `zero_means` says what it does.
absl::Status CheckNonNegative(absl::string_view flag, double value,
                              absl::string_view unit, double scale,
                              absl::string_view zero_means) {
  if (std::isfinite(value) && value >= 0 && std::isfinite(value * scale)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be a finite number of ", unit,
                   " >= 0 (0 = ", zero_means, "), got ", value));
}

}  // namespace

absl::StatusOr<ControllerConfig> ConfigFromFlags(const ControllerFlags& flags) {
  if (flags.listen.empty()) {
    return absl::InvalidArgumentError(
        "--listen must be HOST:PORT, e.g. 127.0.0.1:50051 (port 0: a free "
        "port)");
  }
  if (flags.db.empty()) {
    return absl::InvalidArgumentError(
        "--db must name a SQLite file (or :memory:)");
  }
  RETURN_IF_ERROR(CheckPositive("heartbeat-seconds", flags.heartbeat_seconds,
                                "seconds", 1));
  if (!std::isfinite(flags.lease_seconds) ||
      !(flags.lease_seconds > flags.heartbeat_seconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease-seconds must be a finite number of seconds greater than "
        "--heartbeat-seconds (",
        flags.heartbeat_seconds, "), got ", flags.lease_seconds));
  }
  if (flags.lost_worker_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lost_worker_ttl must be a positive duration (e.g. 10m, 1h, inf "
        "for never), got ",
        absl::FormatDuration(flags.lost_worker_ttl)));
  }
  RETURN_IF_ERROR(CheckPositive("task-timeout-seconds",
                                flags.task_timeout_seconds, "seconds", 1));
  if (!std::isfinite(flags.reserve_after_seconds) ||
      (flags.reserve_after_seconds < 0 && flags.reserve_after_seconds != -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--reserve-after-seconds must be a finite number of seconds >= 0 (0: "
        "jobs start strictly in submission order) or -1 (later jobs may "
        "always overtake), got ",
        flags.reserve_after_seconds));
  }
  if (flags.metrics_port < -1 || flags.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port must be 0..65535 (0: a free port) or -1 "
                     "(off), got ",
                     flags.metrics_port));
  }
  RETURN_IF_ERROR(
      CheckPositive("inter-gbps", flags.inter_gbps, "Gbit/s", kBytesPerGbit));
  RETURN_IF_ERROR(
      CheckPositive("intra-gbps", flags.intra_gbps, "Gbit/s", kBytesPerGbit));
  RETURN_IF_ERROR(CheckNonNegative("inter-latency-us", flags.inter_latency_us,
                                   "microseconds", kSecondsPerMicrosecond,
                                   "none"));
  RETURN_IF_ERROR(CheckNonNegative("intra-latency-us", flags.intra_latency_us,
                                   "microseconds", kSecondsPerMicrosecond,
                                   "none"));
  RETURN_IF_ERROR(CheckNonNegative("host-copy-gbps", flags.host_copy_gbps,
                                   "Gbit/s", kBytesPerGbit, "unlimited"));
  RETURN_IF_ERROR(CheckNonNegative("transfer-setup-us", flags.transfer_setup_us,
                                   "microseconds", kSecondsPerMicrosecond,
                                   "none"));

  const security::TlsFiles tls{flags.tls_cert, flags.tls_key, flags.tls_ca};
  RETURN_IF_ERROR(security::CheckTlsFlags(tls, flags.insecure,
                                          "meshcast-controller",
                                          /*cert_required=*/true));
  if (flags.insecure && !flags.tokens_file.empty()) {
    return absl::InvalidArgumentError(
        "--tokens_file needs TLS (--tls_cert, --tls_key, --tls_ca): tokens "
        "are never accepted in the clear; drop --insecure or --tokens_file");
  }

  ControllerConfig config;
  config.tls = tls;
  config.tokens_file = flags.tokens_file;
  config.listen = flags.listen;
  config.db_path = flags.db;
  config.registry.lease = absl::Seconds(flags.lease_seconds);
  config.registry.heartbeat = absl::Seconds(flags.heartbeat_seconds);
  config.registry.lost_worker_ttl = flags.lost_worker_ttl;
  config.registry.inter_host_bandwidth = flags.inter_gbps * kBytesPerGbit;
  config.registry.intra_host_bandwidth = flags.intra_gbps * kBytesPerGbit;
  config.registry.inter_host_latency =
      flags.inter_latency_us * kSecondsPerMicrosecond;
  config.registry.intra_host_latency =
      flags.intra_latency_us * kSecondsPerMicrosecond;
  config.registry.host_copy_bandwidth = flags.host_copy_gbps * kBytesPerGbit;
  config.registry.transfer_setup_seconds =
      flags.transfer_setup_us * kSecondsPerMicrosecond;
  if (flags.device_rates != "auto") {
    if (absl::Status known = DeviceRatesFor(flags.device_rates).status();
        !known.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device-rates: ", known.message(), " (or auto)"));
    }
  }
  config.registry.device_rates = flags.device_rates;
  config.registry.use_probed_rates = flags.probed_rates;
  config.jobs.task_timeout = absl::Seconds(flags.task_timeout_seconds);
  config.jobs.reserve_after = flags.reserve_after_seconds == -1
                                  ? absl::InfiniteDuration()
                                  : absl::Seconds(flags.reserve_after_seconds);
  if (flags.metrics_port >= 0) {
    config.metrics_listen = MetricsListenAddress(
        flags.metrics_address, flags.listen, flags.metrics_port);
    if (!flags.metrics_web_config.empty()) {
      absl::StatusOr<WebConfig> web = LoadWebConfig(flags.metrics_web_config);
      if (!web.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--metrics-web-config: ", web.status().message()));
      }
      config.metrics_web = *std::move(web);
    }
  }
  return config;
}

}  // namespace meshcast
