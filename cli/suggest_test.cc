#include "cli/suggest.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(EditDistanceTest, CountsEditsAndSwaps) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("", "ab"), 2);
  EXPECT_EQ(EditDistance("get", "get"), 0);
  EXPECT_EQ(EditDistance("gte", "get"), 1);  // a swap is one edit
  EXPECT_EQ(EditDistance("meshcats", "meshcast"), 1);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("JSON", "json"), 0);  // case is ignored
  EXPECT_EQ(EditDistance("flaot32", "float32"), 1);
  EXPECT_EQ(EditDistance("ca", "abc"), 3);  // optimal string alignment
}

TEST(ClosestWordsTest, NamesTheCloseOnes) {
  const std::vector<std::string> strategies = {"send_recv", "local_allgather",
                                               "broadcast", "broadcast_lb",
                                               "meshcast",  "auto"};
  EXPECT_THAT(ClosestWords("meshcats", strategies), ElementsAre("meshcast"));
  EXPECT_THAT(ClosestWords("brodcast", strategies), ElementsAre("broadcast"));
  // Too far, too short, or already allowed: nothing.
  EXPECT_THAT(ClosestWords("ring", strategies), IsEmpty());
  EXPECT_THAT(ClosestWords("x", {"y", "up"}), IsEmpty());
  EXPECT_THAT(ClosestWords("auto", strategies), IsEmpty());
  EXPECT_THAT(ClosestWords("", strategies), IsEmpty());
  // A unique start, and ties listed together.
  EXPECT_THAT(ClosestWords("subm", {"submit", "get"}), ElementsAre("submit"));
  EXPECT_THAT(ClosestWords("ca", {"cancel", "calibrate"}), IsEmpty());
  EXPECT_THAT(ClosestWords("lst", {"list", "last", "get"}),
              ElementsAre("list", "last"));
}

TEST(DidYouMeanTest, Phrases) {
  EXPECT_EQ(DidYouMean("plna", {"plan", "list"}), "did you mean plan?");
  EXPECT_EQ(DidYouMean("jsn", {"json", "yaml", "jsn2"}),
            "did you mean json or jsn2?");
  EXPECT_EQ(DidYouMean("zzz", {"plan"}), "");
}

TEST(AppendSuggestionTest, ReadsAllowedLists) {
  EXPECT_EQ(AppendSuggestion("--strategy: strategy: unknown strategy "
                             "'meshcats'; allowed: send_recv, meshcast, auto"),
            "--strategy: strategy: unknown strategy 'meshcats'; allowed: "
            "send_recv, meshcast, auto; did you mean meshcast?");
  // The list ends at a note in parentheses.
  EXPECT_EQ(AppendSuggestion("unknown dtype 'flaot32'; allowed: int8, "
                             "float32, float64 (also fp32, float)"),
            "unknown dtype 'flaot32'; allowed: int8, float32, float64 (also "
            "fp32, float); did you mean float32?");
  EXPECT_EQ(AppendSuggestion("unknown device kind \"h10\"; allowed: cpu, "
                             "v100, h100, h200"),
            "unknown device kind \"h10\"; allowed: cpu, v100, h100, h200; did "
            "you mean h100?");
}

TEST(AppendSuggestionTest, LeavesOtherMessagesAlone) {
  for (const std::string message : {
           std::string("job nope not found"),
           std::string("unknown value 'zzz'; allowed: table, json"),
           std::string("unknown token 'X' at position 3; allowed: R "
                       "(replicated) or S<axes>"),
           std::string("points is 1; allowed: 2..64"),
           std::string("unknown value 'jsn'; allowed: table, json; did you "
                       "mean json?"),
           std::string("no quoted value; allowed: table, json"),
       }) {
    EXPECT_EQ(AppendSuggestion(message), message);
  }
}

}  // namespace
}  // namespace meshcast::cli
