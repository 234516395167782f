// Clock: the source of "now" for leases, timestamps and timeouts, injectable
// so that tests can move time by hand instead of sleeping.
//
//   Clock* clock = Clock::Real();        // production
//   FakeClock fake(absl::FromUnixSeconds(1000));
//   fake.Advance(absl::Seconds(5));      // tests
//
// Thread safety: Now() and Advance() may be called from any thread.
#ifndef MESHCAST_CONTROLLER_CLOCK_H_
#define MESHCAST_CONTROLLER_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace meshcast {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process-wide wall clock; never deleted.
  static Clock* Real();
};

// A clock that only moves when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// Seconds since the Unix epoch as the API's timestamps carry them.
inline double UnixSecondsOf(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_CLOCK_H_
