// ControllerKvStore: the KvStore served by the controller's KvSet/KvGet
// RPCs, through which the workers of a job bootstrap their communicators.
//
//   ControllerKvStore kv(grpc::CreateChannel(controller,
//                        grpc::InsecureChannelCredentials()));
//   ASSIGN_OR_RETURN(std::string v, kv.Get("job/j1/gloo/1", absl::Seconds(5)));
//
// Every call names this worker (the `worker` field: the name it registered
// with): the controller lets only a running job's workers set and get the
// job's keys ("job/<job_id>/...", see controller/kv_service.h).
//
// KvGet waits on the controller side up to the timeout; the RPC deadline is
// that timeout plus `rpc_slack`, so a dead controller cannot hang a caller.
// gRPC errors map to absl codes (NOT_FOUND / DEADLINE_EXCEEDED from the
// controller both mean "not set in time": DEADLINE_EXCEEDED).
// Thread safety: thread-safe (gRPC stubs are).
#ifndef MESHCAST_WORKER_CONTROLLER_KV_STORE_H_
#define MESHCAST_WORKER_CONTROLLER_KV_STORE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

class ControllerKvStore : public KvStore {
 public:
  // `worker`: this worker's registered name, sent with every call.
  ControllerKvStore(std::shared_ptr<grpc::Channel> channel, std::string worker,
                    absl::Duration rpc_slack = absl::Seconds(5));
  // A caller without a name (a controller that checks none, e.g. tests').
  explicit ControllerKvStore(std::shared_ptr<grpc::Channel> channel,
                             absl::Duration rpc_slack = absl::Seconds(5))
      : ControllerKvStore(std::move(channel), std::string(), rpc_slack) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

 private:
  const std::unique_ptr<v1::Controller::Stub> stub_;
  const std::string worker_;
  const absl::Duration rpc_slack_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_CONTROLLER_KV_STORE_H_
