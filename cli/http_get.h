// HttpGet: a blocking HTTP/1.0 GET through civetweb's client, for loopback
// services: `meshctl up --monitoring` asks the local Prometheus whether it
// is ready (/-/ready) and what its scrape targets are (/api/v1/targets).
//
//   ASSIGN_OR_RETURN(HttpResponse response,
//                    HttpGet("127.0.0.1:9090", "/-/ready",
//                            absl::Seconds(2)));
//   if (response.status_code == 200) ...
//
// Only numeric IPv4 addresses are accepted (no name resolution): the
// services it talks to were started by meshctl on 127.0.0.1. No TLS,
// redirects or keep-alive. `timeout` bounds the wait for the reply's
// headers; the body then arrives within civetweb's own read timeout.
//
// Thread safety: reentrant; each call uses its own socket.
#ifndef MESHCAST_CLI_HTTP_GET_H_
#define MESHCAST_CLI_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshcast::cli {

struct HttpResponse {
  int status_code = 0;
  std::string body;
};

// GET `path` (starting with '/') from `address` ("IPv4:port"). UNAVAILABLE
// when the connection is refused, no reply comes within `timeout` or the
// reply breaks off; INVALID_ARGUMENT for a malformed address or path;
// INTERNAL for a reply that is not HTTP. Any HTTP status code is a
// successful exchange.
absl::StatusOr<HttpResponse> HttpGet(const std::string& address,
                                     const std::string& path,
                                     absl::Duration timeout);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_HTTP_GET_H_
