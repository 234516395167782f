#include "planner/ir/group_parents.h"

#include <initializer_list>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

v1::CommGroup Group(int devices, std::initializer_list<int> parents) {
  v1::CommGroup group;
  group.set_id(7);
  for (int d = 0; d < devices; ++d) group.add_devices(d);
  for (int p : parents) group.add_parents(p);
  return group;
}

TEST(GroupParentsTest, AcceptsChainsAndTreesListedParentsFirst) {
  EXPECT_TRUE(CheckGroupParents(Group(4, {})).ok());
  EXPECT_TRUE(CheckGroupParents(Group(4, {-1, 0, 1, 2})).ok());
  EXPECT_TRUE(CheckGroupParents(Group(5, {-1, 0, 0, 1, 1})).ok());
}

TEST(GroupParentsTest, NamesTheGroupTheFieldAndTheAllowedValues) {
  absl::Status count = CheckGroupParents(Group(3, {-1, 0}));
  EXPECT_TRUE(absl::IsInvalidArgument(count));
  EXPECT_THAT(count.message(),
              HasSubstr("group 7 has 3 devices but 2 parents"));
  EXPECT_THAT(CheckGroupParents(Group(3, {0, 0, 1})).message(),
              HasSubstr("parents[0] is 0; rank 0 is the sender, so -1"));
  EXPECT_THAT(CheckGroupParents(Group(3, {-1, 0, 2})).message(),
              HasSubstr("parents[2] is 2; must be a rank in [0, 1]"));
  EXPECT_THAT(CheckGroupParents(Group(3, {-1, -1, 0})).message(),
              HasSubstr("parents[1] is -1; must be a rank in [0, 0]"));
}

}  // namespace
}  // namespace meshcast
