// FakeController: an in-process Controller service for worker tests: the
// rendezvous key-value API (backed by InMemoryKvStore), RegisterWorker and
// Heartbeat with counters, Forget() to simulate a controller that lost
// its registry, and ReportProgress that records every report (it can be
// held to simulate a slow controller, or answer UNIMPLEMENTED like an older
// one). Other RPCs are UNIMPLEMENTED.
//
//   FakeController controller;
//   ASSERT_TRUE(controller.Start().ok());
//   ControllerKvStore kv(grpc::CreateChannel(controller.address(), ...));
//
// Thread safety: thread-safe.
#ifndef MESHCAST_WORKER_TESTING_FAKE_CONTROLLER_H_
#define MESHCAST_WORKER_TESTING_FAKE_CONTROLLER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "worker/in_memory_kv_store.h"

namespace meshcast::worker::testing {

class FakeController : public v1::Controller::Service {
 public:
  ~FakeController() override { Stop(); }

  // Serves on 127.0.0.1:`port` (0 = any free port).
  absl::Status Start(int port = 0);
  void Stop();
  std::string address() const { return address_; }
  int port() const { return port_; }

  // Drops every registered worker: the next Heartbeat says known=false.
  void Forget();
  int registrations() const;
  int heartbeats() const;
  // The last WorkerInfo registered under `name` (empty name if none).
  v1::WorkerInfo worker(const std::string& name) const;
  void set_heartbeat_seconds(double seconds);

  // The worker field of every KvSet and KvGet received, in order.
  std::vector<std::string> kv_callers() const;

  // Every ReportProgress request received, in order.
  std::vector<v1::ReportProgressRequest> progress_reports() const;
  // While held, ReportProgress calls wait (until released or cancelled by
  // the caller) before they are recorded.
  void HoldProgressReports(bool hold);
  // ReportProgress answers UNIMPLEMENTED (a controller without it).
  void set_progress_unimplemented(bool unimplemented);

  grpc::Status RegisterWorker(grpc::ServerContext*,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext*,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse*) override;
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest* request,
                     v1::KvSetResponse*) override;
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest* request,
                     v1::KvGetResponse* response) override;

 private:
  InMemoryKvStore kv_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, v1::WorkerInfo> workers_
      ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> kv_callers_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  double heartbeat_seconds_ ABSL_GUARDED_BY(mu_) = 0.05;
  std::vector<v1::ReportProgressRequest> progress_reports_
      ABSL_GUARDED_BY(mu_);
  bool hold_progress_ ABSL_GUARDED_BY(mu_) = false;
  bool progress_unimplemented_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshcast::worker::testing

#endif  // MESHCAST_WORKER_TESTING_FAKE_CONTROLLER_H_
