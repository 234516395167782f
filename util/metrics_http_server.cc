#include "util/metrics_http_server.h"

#include <civetweb.h>

#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace meshcast {
namespace {

void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

int Reply(mg_connection* conn, int code, const char* reason,
          const char* content_type, const std::string& body) {
  std::string head = absl::StrCat(
      "HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  mg_write(conn, head.data(), head.size());
  mg_write(conn, body.data(), body.size());
  return code;
}

}  // namespace

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

int MetricsHttpServer::HandleMetrics(mg_connection* conn, void* self) {
  auto* server = static_cast<MetricsHttpServer*>(self);
  const mg_request_info* info = mg_get_request_info(conn);
  if (server->auth_.enabled()) {
    const char* header = mg_get_header(conn, "Authorization");
    if (!server->auth_.Allows(header == nullptr ? "" : header)) {
      const std::string body = "authentication required\n";
      const std::string head = absl::StrCat(
          "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic "
          "realm=\"meshcast\"\r\nContent-Type: text/plain\r\n"
          "Content-Length: ",
          body.size(), "\r\nConnection: close\r\n\r\n");
      mg_write(conn, head.data(), head.size());
      mg_write(conn, body.data(), body.size());
      return 401;
    }
  }
  if (info == nullptr || std::string(info->request_method) != "GET") {
    return Reply(conn, 405, "Method Not Allowed", "text/plain",
                 "only GET is allowed\n");
  }
  return Reply(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
               server->registry_->Render());
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, MetricsRegistry* registry,
    const WebConfig& web) {
  InitCivetwebOnce();
  // civetweb takes "host:port" or "port"; keep whatever the caller gave.
  // Behind TLS, HTTP stays on loopback and the front takes `listen`.
  std::string ports = web.tls ? "127.0.0.1:0" : listen;
  if (ports.empty()) {
    return absl::InvalidArgumentError(
        "metrics listen address is empty; use host:port or port");
  }
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads",
                           "2", nullptr};
  // The handler needs the server object, which needs the context: create the
  // object first with a null context, then fill it in.
  auto server = std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(registry, web));
  mg_callbacks callbacks{};
  mg_context* context = mg_start(&callbacks, nullptr, options);
  if (context == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", listen, "' (address in use or invalid)"));
  }
  mg_set_request_handler(context, "/metrics$", &MetricsHttpServer::HandleMetrics,
                         server.get());
  mg_server_port bound[4];
  int n = mg_get_server_ports(context, 4, bound);
  if (n <= 0) {
    mg_stop(context);
    return absl::InternalError("metrics server started but reports no port");
  }
  server->context_ = context;
  server->port_ = bound[0].port;
  if (web.tls) {
    absl::StatusOr<std::unique_ptr<TlsTerminator>> front =
        TlsTerminator::Start(listen, *web.tls, server->port_);
    if (!front.ok()) return front.status();
    server->tls_front_ = *std::move(front);
    server->port_ = server->tls_front_->port();
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  tls_front_.reset();
  if (context_ != nullptr) mg_stop(context_);
}

}  // namespace meshcast
