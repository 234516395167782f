// TlsTerminator: serves TLS on a public address and forwards each
// decrypted connection to a plaintext HTTP server on 127.0.0.1 — how a
// daemon's /metrics endpoint speaks HTTPS (web_config.h's
// tls_server_config).
//
//   ASSIGN_OR_RETURN(auto front,
//                    TlsTerminator::Start("10.0.0.5:9401", tls, backend_port));
//   int port = front->port();   // the bound port, also when 0 was asked
//
// Why a separate front instead of the HTTP library's own TLS: Debian's
// civetweb (1.15) loads OpenSSL at run time and looks up
// SSL_get_peer_certificate, which OpenSSL 3 no longer exports, so its HTTPS
// server crashes on the first connection. Terminating TLS here with the
// OpenSSL 3 API keeps HTTP in the library and TLS correct.
//
// Contract: the handshake follows `tls` (certificate chain and key,
// minimum version, client certificates as client_auth_type says: verified
// against client_ca_file where it asks for verification). A handshake that
// fails, or takes longer than kHandshakeTimeout, closes the connection; a
// connection idle for kIdleTimeout is closed; at most kMaxConnections are
// served at once (more are closed at once), so a slow or hostile client
// cannot pin the daemon's threads.
// Errors: INVALID_ARGUMENT when the certificate, key or CA cannot be
// loaded or do not match (naming the file); UNAVAILABLE when the address
// cannot be bound.
// Thread safety: Start/port/destructor from one thread; connections are
// served on the front's own threads. The destructor closes every
// connection and joins its threads.
#ifndef MESHCAST_UTIL_TLS_TERMINATOR_H_
#define MESHCAST_UTIL_TLS_TERMINATOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/web_config.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace meshcast {

class TlsTerminator {
 public:
  static constexpr int kMaxConnections = 32;
  static constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(60);

  // `listen` is "host:port", ":port" or "port" (port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<TlsTerminator>> Start(
      const std::string& listen, const TlsServerConfig& tls, int backend_port);
  ~TlsTerminator();

  TlsTerminator(const TlsTerminator&) = delete;
  TlsTerminator& operator=(const TlsTerminator&) = delete;

  int port() const { return port_; }

 private:
  TlsTerminator(SSL_CTX* ctx, int listen_fd, int port, int backend_port);
  void AcceptLoop();
  void Serve(int client_fd);
  void Forget(int fd);
  // Joins the threads of connections that ended (a scraper connects every
  // few seconds; their threads must not pile up).
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  SSL_CTX* const ctx_;
  const int listen_fd_;
  const int port_;
  const int backend_port_;
  int wake_[2] = {-1, -1};  // a pipe: written once to stop every loop
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  absl::flat_hash_set<int> open_fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace meshcast

#endif  // MESHCAST_UTIL_TLS_TERMINATOR_H_
