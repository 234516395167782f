// FakeHttpServer: a tiny HTTP server on 127.0.0.1 for meshctl's tests,
// standing in for Prometheus's HTTP API. Each request is answered by a
// handler from its path (with the query string) and the connection is
// closed, as for an HTTP/1.0 client.
//
//   FakeHttpServer server([](const std::string& path) {
//     return path == "/-/ready" ? FakeHttpServer::Reply{200, "ready"}
//                               : FakeHttpServer::Reply{404, ""};
//   });
//   HttpGet(server.address(), "/-/ready", absl::Seconds(1));
//   EXPECT_EQ(server.requests(), 1);
//
// A handler may also return raw bytes to send as they are (not HTTP), or
// ask for silence (the server reads the request and answers nothing until
// it stops), to test clients' error paths.
//
// Thread safety: thread-safe. The handler runs on the server's thread.
#ifndef MESHCAST_CLI_FAKE_HTTP_SERVER_H_
#define MESHCAST_CLI_FAKE_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace meshcast::cli {

class FakeHttpServer {
 public:
  struct Reply {
    int status_code = 200;
    std::string body;
    // If non-empty, sent instead of an HTTP reply.
    std::string raw;
    // Send nothing and keep the connection open until the server stops.
    bool silent = false;
  };
  using Handler = std::function<Reply(const std::string& path)>;

  // Starts serving on 127.0.0.1:<free port>, or on `port` when non-zero.
  explicit FakeHttpServer(Handler handler, int port = 0);
  ~FakeHttpServer();

  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:<port>"
  int requests() const { return requests_.load(); }
  // The request paths, in order.
  std::vector<std::string> paths() const;

 private:
  void Serve();
  void Answer(int connection);

  const Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  mutable absl::Mutex mu_;
  std::vector<std::string> paths_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_FAKE_HTTP_SERVER_H_
