#include "cli/http_get.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace meshcast::cli {
namespace {

// Closes the socket on every return path.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// Milliseconds left until `deadline`, at least 0, for poll().
int MillisLeft(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, MillisLeft(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

absl::Status Unavailable(const std::string& address, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("http://", address, ": ", what));
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& address,
                                     const std::string& path,
                                     absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in target{};
  target.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535 ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr) !=
          1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", address,
                     "': expected IPv4:PORT, e.g. 127.0.0.1:9090"));
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP path '", path, "': must start with '/'"));
  }
  target.sin_port = htons(static_cast<uint16_t>(port));
  const absl::Time deadline = absl::Now() + timeout;

  Socket socket_fd(
      socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (socket_fd.fd() < 0) {
    return absl::InternalError(absl::StrCat("socket(): ", strerror(errno)));
  }
  if (connect(socket_fd.fd(), reinterpret_cast<const sockaddr*>(&target),
              sizeof(target)) != 0) {
    if (errno != EINPROGRESS) return Unavailable(address, strerror(errno));
    if (!WaitFor(socket_fd.fd(), POLLOUT, deadline)) {
      return Unavailable(address, "connect timed out");
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(socket_fd.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return Unavailable(address, strerror(error));
  }

  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address,
                   "\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(socket_fd.fd(), request.data() + sent,
                           request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return Unavailable(address, strerror(errno));
    }
    if (!WaitFor(socket_fd.fd(), POLLOUT, deadline)) {
      return Unavailable(address, "sending the request timed out");
    }
  }

  std::string reply;
  char buffer[16384];
  while (true) {
    const ssize_t n = recv(socket_fd.fd(), buffer, sizeof(buffer), 0);
    if (n > 0) {
      reply.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;  // the server closed: the reply is complete
    if (errno != EAGAIN && errno != EINTR) {
      return Unavailable(address, strerror(errno));
    }
    if (!WaitFor(socket_fd.fd(), POLLIN, deadline)) {
      return Unavailable(address, "no complete reply in time");
    }
  }

  // "HTTP/1.x NNN reason\r\n" headers "\r\n\r\n" body.
  const size_t header_end = reply.find("\r\n\r\n");
  const size_t first_space = reply.find(' ');
  HttpResponse response;
  if (header_end == std::string::npos || !absl::StartsWith(reply, "HTTP/") ||
      first_space == std::string::npos || first_space > header_end ||
      !absl::SimpleAtoi(absl::string_view(reply).substr(first_space + 1, 3),
                        &response.status_code)) {
    return absl::InternalError(
        absl::StrCat("http://", address, path, ": not an HTTP reply: '",
                     absl::CEscape(reply.substr(0, 80)), "'"));
  }
  response.body = reply.substr(header_end + 4);
  return response;
}

}  // namespace meshcast::cli
