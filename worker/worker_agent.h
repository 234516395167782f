// WorkerAgent: keeps this worker registered with the controller.
//
// A background thread registers (RegisterWorker with name, Worker-service
// address, device count and kind, data-plane address), then heartbeats.
// It registers again when a heartbeat answers known=false (the controller
// restarted or dropped the lease) and when the controller was unreachable
// and answers again. Each state change is logged once, not every retry.
//
//   WorkerAgent agent(channel, options);
//   agent.Start();
//   ...
//   agent.Stop();  // also in the destructor
//
// Thread safety: thread-safe.
#ifndef MESHCAST_WORKER_WORKER_AGENT_H_
#define MESHCAST_WORKER_WORKER_AGENT_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::worker {

struct WorkerAgentOptions {
  std::string name;
  std::string address;       // host:port of this worker's Worker service
  std::string data_address;  // host for data-plane connections
  int num_devices = 0;
  std::string device_kind = "cpu";
  // WorkerInfo.memory_bytes: host memory (cpu) or the GPUs' memory (cuda);
  // 0 = not reported.
  int64_t memory_bytes = 0;
  // WorkerInfo.incarnation: this process's run; empty = a random one chosen
  // when the agent is made.
  std::string incarnation;
  // WorkerInfo.probed_*: the host's measured rates (rate_probe.h); 0 = not
  // measured.
  double probed_host_copy_bytes_per_second = 0;
  double probed_device_flops = 0;
  // WorkerInfo.machine_id and cpu_cores (machine_identity.h); ""/0 = not
  // known.
  std::string machine_id;
  int cpu_cores = 0;
  // Heartbeat period; zero means what the controller's RegisterWorker
  // response says (1 s if it says nothing).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // Deadline of each RPC to the controller.
  absl::Duration rpc_timeout = absl::Seconds(3);
};

class WorkerAgent {
 public:
  WorkerAgent(std::shared_ptr<grpc::Channel> controller,
              WorkerAgentOptions options);
  ~WorkerAgent();

  void Start();
  // Stops the loop promptly (no further RPCs start).
  void Stop();

  bool registered() const;
  int registrations() const;  // successful RegisterWorker calls
  // Blocks until registered or `timeout` passed; returns registered().
  bool WaitUntilRegistered(absl::Duration timeout) const;

 private:
  void Loop();
  bool Register();
  // False if the controller must be registered with again.
  bool Heartbeat();

  const std::unique_ptr<v1::Controller::Stub> stub_;
  const WorkerAgentOptions options_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  // Whether the last RPC failed, so a down controller is logged once.
  bool unreachable_logged_ = false;  // agent thread only
  std::thread thread_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_WORKER_AGENT_H_
