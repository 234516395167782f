// Checks that the rules meshctl applies on the controller's behalf before
// starting it (`meshctl up --lease-seconds/--heartbeat-seconds`) are the
// controller's own: the same defaults, and the same verdict on every pair.
// A separate test binary, since it links the controller library.
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/cluster_commands.h"
#include "controller/controller_flags.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

// The timing rules are checked apart from transport security, which the
// daemon requires to be chosen explicitly (TLS flags or --insecure).
ControllerFlags WithTransportChosen(ControllerFlags flags) {
  flags.insecure = true;
  return flags;
}

TEST(ControllerRulesTest, DefaultsAreTheControllers) {
  const ControllerFlags defaults;
  EXPECT_EQ(defaults.lease_seconds, kControllerDefaultLeaseSeconds);
  EXPECT_EQ(defaults.heartbeat_seconds, kControllerDefaultHeartbeatSeconds);
  EXPECT_TRUE(ConfigFromFlags(WithTransportChosen(defaults)).ok());
  // Chosen by nobody, it is refused.
  EXPECT_FALSE(ConfigFromFlags(defaults).ok());
}

TEST(ControllerRulesTest, LeaseAndHeartbeatVerdictsMatch) {
  // 0 is `up`'s "the controller's default": the flag is not passed.
  const double values[] = {0, 0.1, 0.5, 1, 2, 4.99, 5, 5.01, 10, 60};
  for (double lease : values) {
    for (double heartbeat : values) {
      ControllerFlags flags;
      if (lease > 0) flags.lease_seconds = lease;
      if (heartbeat > 0) flags.heartbeat_seconds = heartbeat;
      const bool controller_ok =
          ConfigFromFlags(WithTransportChosen(flags)).ok();
      const absl::Status meshctl =
          CheckLeaseAndHeartbeat(lease, heartbeat, "");
      EXPECT_EQ(meshctl.ok(), controller_ok)
          << "lease " << lease << ", heartbeat " << heartbeat << ": "
          << meshctl;
    }
  }
}

}  // namespace
}  // namespace meshcast::cli
