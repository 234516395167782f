// Fuzz target: the controller's request handling, end to end through gRPC.
// A real controller (in-memory SQLite, fake workers) runs in this process on
// 127.0.0.1; each input is sent as the raw bytes of one request to the
// method its first byte picks, through a generic stub, so protobuf's
// parsing (including invalid UTF-8 in string fields) and every handler see
// exactly what a network client could send. Invariant: the daemon never
// crashes and answers every call (with an error status where the bytes are
// bad) within the deadline.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>

#include "controller/controller_server.h"
#include "controller/fake_worker_client.h"
#include "util/log.h"

namespace {

constexpr const char* kMethods[] = {
    "/meshcast.v1.Controller/SubmitJob",
    "/meshcast.v1.Controller/GetJob",
    "/meshcast.v1.Controller/ListJobs",
    "/meshcast.v1.Controller/CancelJob",
    "/meshcast.v1.Controller/Plan",
    "/meshcast.v1.Controller/GetCluster",
    "/meshcast.v1.Controller/RegisterWorker",
    "/meshcast.v1.Controller/Heartbeat",
    "/meshcast.v1.Controller/KvSet",
    "/meshcast.v1.Controller/KvGet",
    "/meshcast.v1.Controller/ReportProgress",
};

struct Harness {
  std::unique_ptr<meshcast::ControllerServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
};

Harness& Get() {
  static Harness* harness = [] {
    meshcast::SetLogQuiet(true);
    meshcast::ControllerConfig config;
    config.listen = "127.0.0.1:0";
    config.db_path = ":memory:";
    config.registry.lease = absl::Seconds(30);
    auto* h = new Harness;
    absl::StatusOr<std::unique_ptr<meshcast::ControllerServer>> server =
        meshcast::ControllerServer::Start(
            config, std::make_unique<meshcast::FakeWorkerClient>());
    if (!server.ok()) std::abort();
    h->server = *std::move(server);
    h->channel = grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(h->server->port()),
        grpc::InsecureChannelCredentials());
    h->stub = std::make_unique<grpc::GenericStub>(h->channel);
    return h;
  }();
  return *harness;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Harness& harness = Get();
  const char* method = kMethods[data[0] % std::size(kMethods)];
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  // KvGet may wait for a key: a short deadline keeps the fuzzer moving.
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  harness.stub->UnaryCall(&context, method, grpc::StubOptions(), &request,
                          &response, [&](grpc::Status s) {
                            std::lock_guard<std::mutex> lock(mu);
                            status = std::move(s);
                            done = true;
                            cv.notify_one();
                          });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  // The daemon answered; a transport failure here means it went away.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) std::abort();
  return 0;
}
