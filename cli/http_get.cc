#include "cli/http_get.h"

#include <arpa/inet.h>
#include <civetweb.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshcast::cli {
namespace {

void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

struct ConnectionCloser {
  void operator()(mg_connection* connection) const {
    mg_close_connection(connection);
  }
};
using Connection = std::unique_ptr<mg_connection, ConnectionCloser>;

absl::Status Unavailable(const std::string& address, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("http://", address, ": ", what));
}

// civetweb's timeout argument: milliseconds, at least 1 (0 would not wait).
int TimeoutMillis(absl::Duration timeout) {
  return static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(timeout), 1, int64_t{1} << 30));
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& address,
                                     const std::string& path,
                                     absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  int port = 0;
  in_addr ipv4{};
  const std::string host =
      colon == std::string::npos ? address : address.substr(0, colon);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535 || inet_pton(AF_INET, host.c_str(), &ipv4) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", address,
                     "': expected IPv4:PORT, e.g. 127.0.0.1:9090"));
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP path '", path, "': must start with '/'"));
  }
  InitCivetwebOnce();
  char error[256] = "";
  Connection connection(
      mg_connect_client(host.c_str(), port, /*use_ssl=*/0, error,
                        sizeof(error)));
  if (connection == nullptr) return Unavailable(address, error);
  // HTTP/1.0 with "Connection: close": the body ends where the connection
  // does, whatever the server's framing.
  if (mg_printf(connection.get(),
                "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: */*\r\n"
                "Connection: close\r\n\r\n",
                path.c_str(), address.c_str()) <= 0) {
    return Unavailable(address, "cannot send the request");
  }
  error[0] = '\0';
  if (mg_get_response(connection.get(), error, sizeof(error),
                      TimeoutMillis(timeout)) < 0) {
    // civetweb says "No data received" when the server stayed silent (or
    // closed) until the timeout; anything else is a reply it cannot parse.
    if (absl::string_view(error) == "No data received") {
      return Unavailable(address, "no reply in time");
    }
    return absl::InternalError(absl::StrCat("http://", address, path,
                                            ": not an HTTP reply (", error,
                                            ")"));
  }
  const mg_response_info* info = mg_get_response_info(connection.get());
  if (info == nullptr || info->status_code <= 0) {
    return absl::InternalError(
        absl::StrCat("http://", address, path, ": not an HTTP reply"));
  }
  HttpResponse response;
  response.status_code = info->status_code;
  char buffer[16384];
  int n = 0;
  while ((n = mg_read(connection.get(), buffer, sizeof(buffer))) > 0) {
    response.body.append(buffer, static_cast<size_t>(n));
  }
  if (n < 0) return Unavailable(address, "the reply broke off");
  return response;
}

}  // namespace meshcast::cli
