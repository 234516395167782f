#include "util/metrics_http_server.h"

#include <prometheus/exposer.h>

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace meshcast {

std::string MetricsListenAddress(const std::string& metrics_address,
                                 const std::string& grpc_listen, int port) {
  std::string host = metrics_address;
  if (host.empty()) {
    const size_t colon = grpc_listen.rfind(':');
    host = colon == std::string::npos ? grpc_listen
                                      : grpc_listen.substr(0, colon);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen,
    std::shared_ptr<prometheus::Collectable> collectable,
    const WebConfig& web) {
  if (listen.empty()) {
    return absl::InvalidArgumentError(
        "metrics listen address is empty; use host:port or port");
  }
  if (collectable == nullptr) {
    return absl::InvalidArgumentError("no metrics to serve");
  }
  auto server = std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(collectable), web));
  // The Exposer takes civetweb's "host:port" or "port"; behind TLS, HTTP
  // stays on loopback and the front takes `listen`.
  const std::string ports = web.tls ? "127.0.0.1:0" : listen;
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", ports, "num_threads", "2"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on '", listen,
                     "' (address in use or invalid): ", e.what()));
  }
  const std::vector<int> bound = server->exposer_->GetListeningPorts();
  if (bound.empty() || bound.front() <= 0) {
    return absl::InternalError("metrics server started but reports no port");
  }
  server->port_ = bound.front();
  if (server->auth_.enabled()) {
    // prometheus-cpp decodes the header and answers 401 with a challenge
    // for this realm; `server` outlives the exposer that calls back.
    const BasicAuth* auth = &server->auth_;
    server->exposer_->RegisterAuth(
        [auth](const std::string& user, const std::string& password) {
          return auth->Allows(user, password);
        },
        "meshcast");
  }
  server->exposer_->RegisterCollectable(server->collectable_);
  if (web.tls) {
    absl::StatusOr<std::unique_ptr<TlsTerminator>> front =
        TlsTerminator::Start(listen, *web.tls, server->port_);
    if (!front.ok()) return front.status();
    server->tls_front_ = *std::move(front);
    server->port_ = server->tls_front_->port();
  }
  return server;
}

MetricsHttpServer::MetricsHttpServer(
    std::shared_ptr<prometheus::Collectable> collectable, const WebConfig& web)
    : collectable_(std::move(collectable)), auth_(web.basic_auth_users) {}

MetricsHttpServer::~MetricsHttpServer() {
  tls_front_.reset();
  exposer_.reset();
}

}  // namespace meshcast
