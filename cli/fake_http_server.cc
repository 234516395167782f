#include "cli/fake_http_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace meshcast::cli {
namespace {

constexpr int kPollMillis = 20;

const char* ReasonPhrase(int status_code) {
  switch (status_code) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

FakeHttpServer::FakeHttpServer(Handler handler, int port)
    : handler_(std::move(handler)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  if (listen_fd_ < 0 ||
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&address),
           sizeof(address)) != 0 ||
      listen(listen_fd_, 16) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) !=
          0) {
    std::perror("FakeHttpServer: cannot listen on 127.0.0.1");
    std::abort();
  }
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

FakeHttpServer::~FakeHttpServer() {
  stop_ = true;
  thread_.join();
  close(listen_fd_);
}

std::string FakeHttpServer::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::vector<std::string> FakeHttpServer::paths() const {
  absl::MutexLock lock(&mu_);
  return paths_;
}

void FakeHttpServer::Serve() {
  while (!stop_) {
    pollfd entry{listen_fd_, POLLIN, 0};
    if (poll(&entry, 1, kPollMillis) <= 0) continue;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void FakeHttpServer::Answer(int connection) {
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && !stop_) {
    pollfd entry{connection, POLLIN, 0};
    if (poll(&entry, 1, kPollMillis) <= 0) continue;
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  // "GET /path HTTP/1.0"
  const size_t first = request.find(' ');
  const size_t second = request.find(' ', first + 1);
  const std::string path =
      first == std::string::npos || second == std::string::npos
          ? ""
          : request.substr(first + 1, second - first - 1);
  {
    absl::MutexLock lock(&mu_);
    paths_.push_back(path);
  }
  ++requests_;
  const Reply reply = handler_(path);
  if (reply.silent) {
    while (!stop_) {
      pollfd entry{connection, POLLIN, 0};
      if (poll(&entry, 1, kPollMillis) > 0 &&
          recv(connection, buffer, sizeof(buffer), 0) <= 0) {
        return;  // the client gave up
      }
    }
    return;
  }
  const std::string bytes =
      !reply.raw.empty()
          ? reply.raw
          : absl::StrCat("HTTP/1.0 ", reply.status_code, " ",
                         ReasonPhrase(reply.status_code),
                         "\r\nContent-Type: text/plain\r\nContent-Length: ",
                         reply.body.size(), "\r\n\r\n", reply.body);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(connection, bytes.data() + sent, bytes.size() - sent,
                           MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace meshcast::cli
