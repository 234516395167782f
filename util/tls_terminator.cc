#include "util/tls_terminator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace meshcast {
namespace {

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

int MinVersionOf(const std::string& name) {
  if (name == "TLS10") return TLS1_VERSION;
  if (name == "TLS11") return TLS1_1_VERSION;
  if (name == "TLS13") return TLS1_3_VERSION;
  return TLS1_2_VERSION;
}

// Accepts any certificate: for client_auth_type values that ask for one
// without verifying it.
int AcceptAnyCertificate(int, X509_STORE_CTX*) { return 1; }

absl::StatusOr<SSL_CTX*> MakeContext(const TlsServerConfig& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslError()));
  }
  auto fail = [ctx](std::string message) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(std::move(message));
  };
  SSL_CTX_set_min_proto_version(ctx, MinVersionOf(tls.min_version));
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1) {
    return fail(absl::StrCat("tls_server_config.cert_file ", tls.cert_file,
                             ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1) {
    return fail(absl::StrCat("tls_server_config.key_file ", tls.key_file,
                             ": ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return fail(absl::StrCat("tls_server_config.key_file ", tls.key_file,
                             " does not match cert_file ", tls.cert_file));
  }
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(),
                                      nullptr) != 1) {
      return fail(absl::StrCat("tls_server_config.client_ca_file ",
                               tls.client_ca_file, ": ", OpenSslError()));
    }
    SSL_CTX_set_client_CA_list(ctx,
                               SSL_load_client_CA_file(tls.client_ca_file.c_str()));
  }
  switch (tls.client_auth) {
    case ClientAuth::kNone:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequest:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, AcceptAnyCertificate);
      break;
    case ClientAuth::kRequireAny:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         AcceptAnyCertificate);
      break;
    case ClientAuth::kVerifyIfGiven:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      break;
    case ClientAuth::kRequireAndVerify:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         nullptr);
      break;
  }
  return ctx;
}

// "host:port", "[v6]:port", ":port" or "port".
absl::StatusOr<std::pair<std::string, std::string>> SplitListen(
    const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host =
      colon == std::string::npos ? "" : listen.substr(0, colon);
  std::string port =
      colon == std::string::npos ? listen : listen.substr(colon + 1);
  host = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
  int number = 0;
  if (!absl::SimpleAtoi(port, &number) || number < 0 || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", listen, "' needs a port 0..65535"));
  }
  return std::make_pair(host, port);
}

absl::StatusOr<int> Listen(const std::string& listen) {
  auto parts = SplitListen(listen);
  if (!parts.ok()) return parts.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string& host = parts->first;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), parts->second.c_str(),
                  &hints, &found) != 0 ||
      found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve metrics address '", listen, "'"));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", listen, "' (address in use or invalid)"));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

int ConnectBackend(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SetTimeouts(int fd, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Moves bytes both ways until either side closes, the front stops or the
// connection idles for kIdleTimeout.
void Pump(SSL* ssl, int client_fd, int backend_fd, int wake_fd) {
  char buffer[16384];
  const int idle_ms =
      static_cast<int>(absl::ToInt64Milliseconds(TlsTerminator::kIdleTimeout));
  while (true) {
    // Decrypted bytes OpenSSL already holds do not show on the socket.
    if (SSL_pending(ssl) == 0) {
      pollfd fds[3] = {{client_fd, POLLIN, 0},
                       {backend_fd, POLLIN, 0},
                       {wake_fd, POLLIN, 0}};
      const int ready = poll(fds, 3, idle_ms);
      if (ready <= 0 || fds[2].revents != 0) return;
      if (fds[1].revents != 0) {
        const ssize_t n = recv(backend_fd, buffer, sizeof(buffer), 0);
        if (n <= 0) return;
        if (SSL_write(ssl, buffer, static_cast<int>(n)) <= 0) return;
        continue;
      }
      if (fds[0].revents == 0) continue;
    }
    const int n = SSL_read(ssl, buffer, sizeof(buffer));
    if (n <= 0) {
      const int error = SSL_get_error(ssl, n);
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        continue;
      }
      return;
    }
    if (!WriteAll(backend_fd, buffer, static_cast<size_t>(n))) return;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsTerminator>> TlsTerminator::Start(
    const std::string& listen, const TlsServerConfig& tls, int backend_port) {
  auto ctx = MakeContext(tls);
  if (!ctx.ok()) return ctx.status();
  auto fd = Listen(listen);
  if (!fd.ok()) {
    SSL_CTX_free(*ctx);
    return fd.status();
  }
  auto front = std::unique_ptr<TlsTerminator>(
      new TlsTerminator(*ctx, *fd, BoundPort(*fd), backend_port));
  if (pipe2(front->wake_, O_CLOEXEC) != 0) {
    return absl::InternalError("cannot create the metrics front's wake pipe");
  }
  front->acceptor_ = std::thread([f = front.get()] { f->AcceptLoop(); });
  return front;
}

TlsTerminator::TlsTerminator(SSL_CTX* ctx, int listen_fd, int port,
                             int backend_port)
    : ctx_(ctx), listen_fd_(listen_fd), port_(port),
      backend_port_(backend_port) {}

TlsTerminator::~TlsTerminator() {
  stopping_ = true;
  if (wake_[1] >= 0) {
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    // Unblock a handshake or write stuck on a slow peer.
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& connection : connections) connection->thread.join();
  close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
  SSL_CTX_free(ctx_);
}

void TlsTerminator::AcceptLoop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(open_fds_.size()) >= kMaxConnections) {
      close(client);
      continue;
    }
    ReapFinished();
    open_fds_.insert(client);
    auto connection = std::make_unique<Connection>();
    Connection* raw = connection.get();
    connection->thread = std::thread([this, client, raw] {
      Serve(client);
      raw->done = true;
    });
    connections_.push_back(std::move(connection));
  }
}

void TlsTerminator::ReapFinished() {
  auto finished = [](const std::unique_ptr<Connection>& c) {
    if (!c->done) return false;
    c->thread.join();
    return true;
  };
  connections_.erase(
      std::remove_if(connections_.begin(), connections_.end(), finished),
      connections_.end());
}

void TlsTerminator::Forget(int fd) {
  absl::MutexLock lock(&mu_);
  open_fds_.erase(fd);
  close(fd);
}

void TlsTerminator::Serve(int client_fd) {
  SetTimeouts(client_fd, kHandshakeTimeout);
  SSL* ssl = SSL_new(ctx_);
  if (ssl != nullptr && SSL_set_fd(ssl, client_fd) == 1 &&
      SSL_accept(ssl) == 1) {
    SetTimeouts(client_fd, kIdleTimeout);
    const int backend = ConnectBackend(backend_port_);
    if (backend >= 0) {
      Pump(ssl, client_fd, backend, wake_[0]);
      close(backend);
    }
    SSL_shutdown(ssl);
  }
  ERR_clear_error();
  if (ssl != nullptr) SSL_free(ssl);
  Forget(client_fd);
}

}  // namespace meshcast
