#include "controller/clock.h"

namespace meshcast {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

}  // namespace meshcast
