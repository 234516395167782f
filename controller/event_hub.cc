#include "controller/event_hub.h"

namespace meshcast {

EventHub::~EventHub() { Shutdown(); }

std::unique_ptr<EventHub::Subscription> EventHub::Subscribe(
    const std::string& job_id) {
  std::unique_ptr<Subscription> sub(new Subscription(this, job_id));
  absl::MutexLock lock(&mu_);
  subscribers_[job_id].insert(sub.get());
  return sub;
}

void EventHub::Publish(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(event.job_id());
  if (it == subscribers_.end()) return;
  for (Subscription* sub : it->second) {
    sub->queue_.push_back(event);
    if (sub->queue_.size() > kMaxQueued) sub->queue_.pop_front();
  }
}

void EventHub::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

EventHub::Subscription::~Subscription() {
  absl::MutexLock lock(&hub_->mu_);
  auto it = hub_->subscribers_.find(job_id_);
  if (it == hub_->subscribers_.end()) return;
  it->second.erase(this);
  if (it->second.empty()) hub_->subscribers_.erase(it);
}

std::optional<v1::JobEvent> EventHub::Subscription::Next(
    absl::Duration timeout) {
  absl::MutexLock lock(&hub_->mu_);
  // Reads hub state under the hub's lock; the analysis cannot see through
  // the lambda, hence the assertion.
  auto ready = [this]() {
    hub_->mu_.AssertHeld();
    return !queue_.empty() || hub_->shutdown_;
  };
  hub_->mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  v1::JobEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

bool EventHub::Subscription::closed() const {
  absl::MutexLock lock(&hub_->mu_);
  return hub_->shutdown_;
}

}  // namespace meshcast
