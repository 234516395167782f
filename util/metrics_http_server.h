// MetricsHttpServer: serves a prometheus-cpp Collectable (a daemon's
// metrics, util/metrics.h) at GET /metrics for Prometheus to scrape, through
// prometheus-cpp's Exposer; with a web config (web_config.h, Prometheus' own
// format) over HTTPS and/or behind basic auth.
//
//   ASSIGN_OR_RETURN(auto server,
//                    MetricsHttpServer::Start("127.0.0.1:0", collectable));
//   int port = server->port();  // the bound port, also when 0 was asked
//
//   ASSIGN_OR_RETURN(WebConfig web, LoadWebConfig(path));
//   ASSIGN_OR_RETURN(auto secure,
//                    MetricsHttpServer::Start("10.0.0.5:9401", collectable,
//                                             web));
//
// With tls_server_config, the Exposer serves HTTP on an ephemeral 127.0.0.1
// port and a TlsTerminator (tls_terminator.h) serves TLS on `listen` in
// front of it; port() is the TLS port. With basic_auth_users, a request
// without valid credentials gets 401 and a WWW-Authenticate challenge (on
// both ports).
//
// Errors: INVALID_ARGUMENT for an empty address, UNAVAILABLE when it cannot
// be bound (in use or invalid), the TLS front's errors (tls_terminator.h).
// Thread safety: Start/port/destructor from one thread; requests are served
// on the Exposer's own threads. The server keeps the collectable alive;
// whatever the collectable refers to must outlive the server.
#ifndef MESHCAST_UTIL_METRICS_HTTP_SERVER_H_
#define MESHCAST_UTIL_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "util/basic_auth.h"
#include "util/metrics.h"
#include "util/tls_terminator.h"
#include "util/web_config.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace meshcast {

// The address /metrics binds: `metrics_address` when set, else the host of
// the daemon's gRPC `grpc_listen` ("host:port", "[v6]:port"), so metrics
// are served on the interface the operator chose for the service rather
// than on every interface.
std::string MetricsListenAddress(const std::string& metrics_address,
                                 const std::string& grpc_listen, int port);

class MetricsHttpServer {
 public:
  // `listen` is "host:port" or "port" (port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen,
      std::shared_ptr<prometheus::Collectable> collectable,
      const WebConfig& web = {});
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(std::shared_ptr<prometheus::Collectable> collectable,
                    const WebConfig& web);

  const std::shared_ptr<prometheus::Collectable> collectable_;
  const BasicAuth auth_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::unique_ptr<TlsTerminator> tls_front_;  // destroyed before exposer_
};

}  // namespace meshcast

#endif  // MESHCAST_UTIL_METRICS_HTTP_SERVER_H_
