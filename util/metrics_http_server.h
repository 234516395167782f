// MetricsHttpServer: serves a MetricsRegistry at GET /metrics over HTTP
// (civetweb), for Prometheus to scrape.
//
//   ASSIGN_OR_RETURN(auto server,
//                    MetricsHttpServer::Start("127.0.0.1:0", &registry));
//   int port = server->port();  // the bound port, also when 0 was asked
//
// Thread safety: Start/port/destructor from one thread; requests are served
// on civetweb's own threads. The registry must outlive the server.
#ifndef MESHCAST_UTIL_METRICS_HTTP_SERVER_H_
#define MESHCAST_UTIL_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "util/metrics.h"

struct mg_context;
struct mg_connection;

namespace meshcast {

class MetricsHttpServer {
 public:
  // `listen` is "host:port" or "port" (port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, MetricsRegistry* registry);
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(mg_context* context, int port, MetricsRegistry* registry)
      : context_(context), port_(port), registry_(registry) {}
  static int HandleMetrics(::mg_connection* conn, void* self);

  mg_context* context_;
  int port_;
  MetricsRegistry* registry_;
};

}  // namespace meshcast

#endif  // MESHCAST_UTIL_METRICS_HTTP_SERVER_H_
