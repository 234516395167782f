// EventHub: fans job events out to WatchJob subscribers. Each subscription
// has its own queue, so a slow reader never blocks the job that publishes.
//
//   std::unique_ptr<EventHub::Subscription> sub = hub.Subscribe("job-000001");
//   hub.Publish(event);                       // from the job manager
//   std::optional<v1::JobEvent> e = sub->Next(absl::Seconds(1));
//
// A subscription holds at most kMaxQueued events; beyond that the oldest
// are dropped (a watcher only needs the latest state).
//
// Thread safety: thread-safe. A Subscription is used by one reader thread and
// must be destroyed before its hub.
#ifndef MESHCAST_CONTROLLER_EVENT_HUB_H_
#define MESHCAST_CONTROLLER_EVENT_HUB_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast {

class EventHub {
 public:
  static constexpr size_t kMaxQueued = 1024;

  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

    // The next event, or nullopt after `timeout` or once the hub shut down
    // (check closed()).
    std::optional<v1::JobEvent> Next(absl::Duration timeout);
    bool closed() const;

   private:
    friend class EventHub;
    Subscription(EventHub* hub, std::string job_id)
        : hub_(hub), job_id_(std::move(job_id)) {}
    EventHub* const hub_;
    const std::string job_id_;
    std::deque<v1::JobEvent> queue_;  // guarded by hub_->mu_
  };

  ~EventHub();

  std::unique_ptr<Subscription> Subscribe(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Publish(const v1::JobEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every subscriber; Next then returns nullopt at once.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<Subscription*>>
      subscribers_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_EVENT_HUB_H_
