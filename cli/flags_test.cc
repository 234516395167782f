#include "cli/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct Options {
  std::string name = "default";
  int count = 3;
  double rate = 1.5;
  bool verbose = false;
  std::string mode = "table";
};

class FlagSetTest : public ::testing::Test {
 protected:
  FlagSetTest() : flags_("meshctl test", "Tests the flag parser.") {
    flags_.String("name", &options_.name, "NAME", "a name");
    flags_.Int("count", &options_.count, "N", "a count");
    flags_.Double("rate", &options_.rate, "GBPS", "a rate");
    flags_.Bool("verbose", &options_.verbose, "talk more");
    flags_.Choice("mode", &options_.mode, {"table", "json"}, "output mode");
  }
  Options options_;
  FlagSet flags_;
};

TEST_F(FlagSetTest, DefaultsStayWhenUnset) {
  ASSERT_TRUE(flags_.Parse({}).ok());
  EXPECT_EQ(options_.name, "default");
  EXPECT_EQ(options_.count, 3);
  EXPECT_FALSE(flags_.IsSet("name"));
  EXPECT_FALSE(flags_.help_requested());
}

TEST_F(FlagSetTest, SpaceAndEqualsForms) {
  ASSERT_TRUE(flags_
                  .Parse({"--name", "x", "--count=7", "-rate", "2.5",
                          "--verbose", "--mode=json"})
                  .ok());
  EXPECT_EQ(options_.name, "x");
  EXPECT_EQ(options_.count, 7);
  EXPECT_DOUBLE_EQ(options_.rate, 2.5);
  EXPECT_TRUE(options_.verbose);
  EXPECT_EQ(options_.mode, "json");
  EXPECT_TRUE(flags_.IsSet("name"));
  EXPECT_TRUE(flags_.IsSet("verbose"));
  EXPECT_FALSE(flags_.IsSet("unknown"));
}

TEST_F(FlagSetTest, ValuesMayLookLikeFlagsOrBeNegative) {
  ASSERT_TRUE(flags_.Parse({"--count", "-4", "--name", "--x"}).ok());
  EXPECT_EQ(options_.count, -4);
  EXPECT_EQ(options_.name, "--x");
}

TEST_F(FlagSetTest, BoolExplicitValues) {
  options_.verbose = true;
  ASSERT_TRUE(flags_.Parse({"--verbose=false"}).ok());
  EXPECT_FALSE(options_.verbose);
  absl::Status status = flags_.Parse({"--verbose=maybe"});
  EXPECT_THAT(status.message(), HasSubstr("--verbose: 'maybe'"));
  EXPECT_THAT(status.message(), HasSubstr("true, false"));
}

TEST_F(FlagSetTest, PositionalAndDoubleDash) {
  ASSERT_TRUE(flags_.Parse({"a", "--count", "1", "b", "--", "--name"}).ok());
  EXPECT_THAT(flags_.positional(), ElementsAre("a", "b", "--name"));
  EXPECT_EQ(options_.name, "default");
}

TEST_F(FlagSetTest, ErrorsNameTheFlagAndWhatIsAllowed) {
  EXPECT_THAT(flags_.Parse({"--nope", "1"}).message(),
              HasSubstr("unknown flag --nope; run 'meshctl test --help'"));
  EXPECT_THAT(flags_.Parse({"--count", "x"}).message(),
              HasSubstr("--count: 'x' is not an integer"));
  EXPECT_THAT(flags_.Parse({"--rate=fast"}).message(),
              HasSubstr("--rate: 'fast' is not a finite number"));
  EXPECT_THAT(flags_.Parse({"--rate=inf"}).message(), HasSubstr("--rate"));
  EXPECT_THAT(flags_.Parse({"--name"}).message(),
              HasSubstr("--name: needs a value (NAME)"));
  EXPECT_THAT(flags_.Parse({"--mode", "xml"}).message(),
              HasSubstr("--mode: unknown value 'xml'; allowed: table, json"));
}

TEST_F(FlagSetTest, Help) {
  ASSERT_TRUE(flags_.Parse({"--count", "1", "--help", "--bogus"}).ok());
  EXPECT_TRUE(flags_.help_requested());
  const std::string usage = flags_.Usage();
  EXPECT_THAT(usage, HasSubstr("usage: meshctl test [flags]"));
  EXPECT_THAT(usage, HasSubstr("Tests the flag parser."));
  EXPECT_THAT(usage, HasSubstr("--name NAME"));
  EXPECT_THAT(usage, HasSubstr("(default: default)"));
  EXPECT_THAT(usage, HasSubstr("--mode table|json"));
  EXPECT_THAT(usage, HasSubstr("--verbose"));
  EXPECT_THAT(usage, HasSubstr("-h, --help"));
  FlagSet other("x", "");
  ASSERT_TRUE(other.Parse({"-h"}).ok());
  EXPECT_TRUE(other.help_requested());
}

// A one-letter flag is shown and reported as -f, and parses either way.
TEST_F(FlagSetTest, OneLetterFlagsHaveOneDash) {
  std::string file;
  FlagSet flags("meshctl submit", "");
  flags.String("f", &file, "FILE", "job file");
  const std::string usage = flags.Usage();
  EXPECT_THAT(usage, HasSubstr("  -f FILE "));
  EXPECT_THAT(usage, Not(HasSubstr("--f")));
  EXPECT_THAT(flags.Parse({"-f"}).message(), HasSubstr("-f: needs a value"));
  EXPECT_THAT(flags.Parse({"-f"}).message(), Not(HasSubstr("--f")));
  EXPECT_THAT(flags.Parse({"-g"}).message(), HasSubstr("unknown flag -g;"));
  ASSERT_TRUE(flags.Parse({"-f", "a.yaml"}).ok());
  EXPECT_EQ(file, "a.yaml");
  FlagSet again("meshctl submit", "");
  again.String("f", &file, "FILE", "job file");
  ASSERT_TRUE(again.Parse({"--f=b.yaml"}).ok());
  EXPECT_EQ(file, "b.yaml");
}

}  // namespace
}  // namespace meshcast::cli

namespace meshcast::cli {
namespace {

TEST_F(FlagSetTest, UnknownFlagSuggestsTheClosest) {
  EXPECT_EQ(flags_.Parse({"--verbsoe"}).message(),
            "unknown flag --verbsoe; did you mean --verbose? run 'meshctl "
            "test --help' for the list of flags");
  EXPECT_EQ(flags_.Parse({"--nme=x"}).message(),
            "unknown flag --nme; did you mean --name? run 'meshctl test "
            "--help' for the list of flags");
  // Nothing close: the message as before.
  EXPECT_EQ(flags_.Parse({"--zzzzzz"}).message(),
            "unknown flag --zzzzzz; run 'meshctl test --help' for the list of "
            "flags");
}

TEST_F(FlagSetTest, AliasIsTheSameFlag) {
  flags_.Alias("m", "mode");
  ASSERT_TRUE(flags_.Parse({"-m", "json"}).ok());
  EXPECT_EQ(options_.mode, "json");
  EXPECT_TRUE(flags_.IsSet("mode"));
  EXPECT_THAT(flags_.Usage(), HasSubstr("  -m, --mode table|json"));
  EXPECT_THAT(flags_.Parse({"-m", "xml"}).message(),
              HasSubstr("--mode: unknown value 'xml'"));
}

// --help=flags lists the flags for programs (meshctl completion).
TEST_F(FlagSetTest, FlagTableForPrograms) {
  flags_.Alias("m", "mode");
  ASSERT_TRUE(flags_.Parse({"--help=flags"}).ok());
  EXPECT_TRUE(flags_.help_requested());
  const std::string table = flags_.Usage();
  EXPECT_EQ(table, flags_.FlagTable());
  EXPECT_EQ(table,
            "--name\tNAME\t\n"
            "--count\tN\t\n"
            "--rate\tGBPS\t\n"
            "--verbose\t\t\n"
            "--mode\ttable|json\ttable json\n"
            "-m\ttable|json\ttable json\n"
            "--help\t\t\n");
  // Plain --help is still the human text.
  FlagSet plain("meshctl test", "");
  ASSERT_TRUE(plain.Parse({"--help"}).ok());
  EXPECT_THAT(plain.Usage(), HasSubstr("usage: meshctl test"));
}

}  // namespace
}  // namespace meshcast::cli
