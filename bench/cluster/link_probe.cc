#include "bench/cluster/link_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/cluster/sample_stats.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

BandwidthSample MakeSample(std::vector<double> runs) {
  BandwidthSample sample;
  sample.median_bytes_per_second = Median(runs);
  sample.best_bytes_per_second = *std::max_element(runs.begin(), runs.end());
  sample.runs = std::move(runs);
  return sample;
}

absl::Status ErrnoStatus(const std::string& what) {
  return absl::InternalError(
      absl::StrCat("loopback TCP probe: ", what, ": ", std::strerror(errno)));
}

// Owns a file descriptor; closes it once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Connection {
  Fd sender;
  Fd receiver;
};

absl::StatusOr<Fd> Listen(sockaddr_in& address) {
  Fd listener(socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return ErrnoStatus("socket");
  address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;  // any free port
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&address),
           sizeof(address)) != 0) {
    return ErrnoStatus("bind 127.0.0.1:0");
  }
  if (listen(listener.get(), 16) != 0) return ErrnoStatus("listen");
  socklen_t length = sizeof(address);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address),
                  &length) != 0) {
    return ErrnoStatus("getsockname");
  }
  return listener;
}

absl::StatusOr<Connection> Connect(int listener, const sockaddr_in& address) {
  Connection connection;
  connection.sender = Fd(socket(AF_INET, SOCK_STREAM, 0));
  if (connection.sender.get() < 0) return ErrnoStatus("socket");
  if (connect(connection.sender.get(),
              reinterpret_cast<const sockaddr*>(&address),
              sizeof(address)) != 0) {
    return ErrnoStatus("connect");
  }
  // The backlog holds the connection, so accept does not block.
  connection.receiver = Fd(accept(listener, nullptr, nullptr));
  if (connection.receiver.get() < 0) return ErrnoStatus("accept");
  return connection;
}

// Sends `bytes` by repeating the `chunk_bytes` at `chunk`, one send() call
// per chunk (or the rest of one after a partial send), as a framework
// sending fixed-size pieces would.
absl::Status SendAll(int fd, const char* chunk, int64_t chunk_bytes,
                     int64_t bytes) {
  int64_t sent = 0;
  while (sent < bytes) {
    const int64_t offset = sent % chunk_bytes;
    const int64_t length = std::min(chunk_bytes - offset, bytes - sent);
    const ssize_t n =
        send(fd, chunk + offset, static_cast<size_t>(length), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("send");
    }
    sent += n;
  }
  return absl::OkStatus();
}

absl::Status ReceiveAll(int fd, char* buffer, int64_t buffer_bytes,
                        int64_t bytes) {
  int64_t received = 0;
  while (received < bytes) {
    const int64_t length = std::min(buffer_bytes, bytes - received);
    const ssize_t n = recv(fd, buffer, static_cast<size_t>(length), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("recv");
    }
    if (n == 0) {
      return absl::InternalError(
          absl::StrCat("loopback TCP probe: connection closed after ", received,
                       " of ", bytes, " bytes"));
    }
    received += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BandwidthSample> MeasureMemcpy(int64_t bytes, int repeats) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memcpy probe: bytes must be >= 1, got ", bytes));
  }
  if (repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memcpy probe: repeats must be >= 1, got ", repeats));
  }
  const size_t size = static_cast<size_t>(bytes);
  std::unique_ptr<char[]> source(new char[size]);
  std::unique_ptr<char[]> destination(new char[size]);
  // Distinct contents, and every page of both buffers touched before timing.
  for (size_t i = 0; i < size; ++i) source[i] = static_cast<char>(i * 131);
  std::memset(destination.get(), 0, size);
  std::memcpy(destination.get(), source.get(), size);

  std::vector<double> runs;
  for (int r = 0; r < repeats; ++r) {
    // A different byte each repeat so the copy cannot be skipped.
    source[static_cast<size_t>(r) % size] ^= 1;
    const Clock::time_point start = Clock::now();
    std::memcpy(destination.get(), source.get(), size);
    const double seconds = SecondsSince(start);
    if (std::memcmp(destination.get(), source.get(),
                    std::min<size_t>(size, 64)) != 0) {
      return absl::InternalError(
          "memcpy probe: copy does not match its source");
    }
    runs.push_back(static_cast<double>(bytes) / std::max(seconds, 1e-9));
  }
  return MakeSample(std::move(runs));
}

absl::StatusOr<BandwidthSample> MeasureLoopbackTcp(
    const TcpProbeOptions& options) {
  if (options.bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loopback TCP probe: bytes must be >= 1, got ", options.bytes));
  }
  if (options.send_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loopback TCP probe: send_bytes must be >= 1, got ",
                     options.send_bytes));
  }
  if (options.streams < 1 || options.streams > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loopback TCP probe: streams must be 1..64, got ", options.streams));
  }
  if (options.repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loopback TCP probe: repeats must be >= 1, got ", options.repeats));
  }
  sockaddr_in address;
  ASSIGN_OR_RETURN(Fd listener, Listen(address));
  std::vector<Connection> connections;
  for (int s = 0; s < options.streams; ++s) {
    ASSIGN_OR_RETURN(Connection connection, Connect(listener.get(), address));
    connections.push_back(std::move(connection));
  }
  listener.Reset();

  const int64_t chunk = std::min(options.send_bytes, options.bytes);
  std::vector<char> payload(static_cast<size_t>(chunk), 'm');
  std::vector<double> runs;
  for (int r = 0; r < options.repeats; ++r) {
    absl::Notification go;
    std::vector<absl::Status> results(2 * connections.size());
    std::vector<std::thread> threads;
    for (size_t s = 0; s < connections.size(); ++s) {
      threads.emplace_back([&, s] {
        std::vector<char> buffer(static_cast<size_t>(chunk));
        go.WaitForNotification();
        results[2 * s] = ReceiveAll(connections[s].receiver.get(),
                                    buffer.data(), chunk, options.bytes);
      });
      threads.emplace_back([&, s] {
        go.WaitForNotification();
        results[2 * s + 1] = SendAll(connections[s].sender.get(),
                                     payload.data(), chunk, options.bytes);
      });
    }
    const Clock::time_point start = Clock::now();
    go.Notify();
    for (std::thread& t : threads) t.join();
    const double seconds = SecondsSince(start);
    for (const absl::Status& status : results) RETURN_IF_ERROR(status);
    runs.push_back(static_cast<double>(options.bytes) * options.streams /
                   std::max(seconds, 1e-9));
  }
  return MakeSample(std::move(runs));
}

}  // namespace meshcast::bench
