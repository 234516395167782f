#include "worker/machine_identity.h"

#include <sched.h>

#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

TEST(MachineIdentityTest, ParsesTheFirstLineTrimmed) {
  EXPECT_EQ(ParseBootId("0b1f-42\n"), "0b1f-42");
  EXPECT_EQ(ParseBootId("  0b1f-42  \nsecond line\n"), "0b1f-42");
  EXPECT_EQ(ParseBootId(""), "");
  EXPECT_EQ(ParseBootId("\n0b1f\n"), "");
  EXPECT_EQ(ParseBootId(std::string("ab\x01"
                                    "cd\n")),
            "");
  EXPECT_EQ(ParseBootId("a b\n"), "");
}

// On Linux both fields are known: the kernel's boot id, as the file has
// it, and the CPUs of this process's affinity.
TEST(MachineIdentityTest, ReadsTheBootIdAndTheAffinity) {
  const MachineIdentity machine = ReadMachineIdentity();
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string line;
  ASSERT_TRUE(std::getline(file, line));
  EXPECT_EQ(machine.machine_id, line);
  EXPECT_EQ(machine.machine_id.size(), 36u);  // a UUID
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(machine.cpu_cores, CPU_COUNT(&set));
  EXPECT_GE(machine.cpu_cores, 1);
  // A second read agrees: one machine, one id.
  EXPECT_EQ(ReadMachineIdentity().machine_id, machine.machine_id);
}

}  // namespace
}  // namespace meshcast::worker
