#include "bench/workloads/public_suite.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kHeader[] =
    "# name tags shape src_mesh src_spec dst_mesh dst_spec small_shape\n";

std::vector<std::string> Names(const std::vector<PublicSuiteCase>& cases) {
  std::vector<std::string> names;
  for (const PublicSuiteCase& c : cases) names.push_back(c.name);
  return names;
}

TEST(PublicSuiteFileTest, HoldsThePapersCasesAndTheOneToManyTargets) {
  absl::StatusOr<std::vector<PublicSuiteCase>> suite = LoadPublicSuite();
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_THAT(Names(*suite),
              ElementsAre("case1", "case2", "case3", "case4", "case5",
                          "case6", "case7", "case9", "1-to-m(1,1)",
                          "1-to-m(1,2)", "1-to-m(1,3)", "1-to-m(1,4)",
                          "1-to-m(2,2)", "1-to-m(3,2)", "1-to-m(4,2)"));
  EXPECT_THAT(Names(CasesTagged(*suite, "paper")),
              ElementsAre("case1", "case2", "case3", "case4", "case5",
                          "case6", "case7", "case9"));
  EXPECT_THAT(Names(CasesTagged(*suite, "gpu")),
              ElementsAre("case1", "case2", "case3", "case4", "case5",
                          "case9"));
  EXPECT_EQ(CasesTagged(*suite, "1-to-m").size(), 7u);
  for (const PublicSuiteCase& c : *suite) {
    SCOPED_TRACE(c.name);
    // The paper's tensors: 2 GiB, case6 about 2 GiB, 1-to-m 1 GiB.
    if (c.HasTag("1-to-m")) {
      EXPECT_EQ(c.num_bytes(), int64_t{1} << 30);
      EXPECT_EQ(c.src_mesh, (SuiteMesh{1, 1}));
    } else if (c.name != "case6") {
      EXPECT_EQ(c.num_bytes(), int64_t{2} << 30);
    }
    EXPECT_EQ(c.small_shape.size(), c.shape.size());
  }
}

TEST(PublicSuiteFileTest, FieldsOfOneCase) {
  absl::StatusOr<std::vector<PublicSuiteCase>> suite = LoadPublicSuite();
  ASSERT_TRUE(suite.ok()) << suite.status();
  const PublicSuiteCase& case7 = (*suite)[6];
  EXPECT_EQ(case7.name, "case7");
  EXPECT_THAT(case7.tags, ElementsAre("paper"));
  EXPECT_THAT(case7.shape, ElementsAre(1024, 1024, 512));
  EXPECT_EQ(case7.src_mesh.At(0), "1x4@0");
  EXPECT_EQ(case7.src_spec, "S1RR");
  EXPECT_EQ(case7.dst_first_host(), 1);
  EXPECT_EQ(case7.dst_mesh.At(case7.dst_first_host()), "2x4@1");
  EXPECT_EQ(case7.dst_mesh.num_devices(), 8);
  EXPECT_EQ(case7.dst_spec, "RRR");
  EXPECT_EQ(ShapeText(case7.small_shape), "64x64x256");
}

TEST(PublicSuiteParseTest, CommentsBlankLinesAndTabs) {
  absl::StatusOr<std::vector<PublicSuiteCase>> cases = ParsePublicSuite(
      absl::StrCat(kHeader, "\n  # indented comment\n",
                   "a\tx,y  8x4  1x2 S0R 2x1 RS0 2x4\n"),
      "t.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 1u);
  const PublicSuiteCase& c = (*cases)[0];
  EXPECT_EQ(c.name, "a");
  EXPECT_THAT(c.tags, ElementsAre("x", "y"));
  EXPECT_TRUE(c.HasTag("y"));
  EXPECT_FALSE(c.HasTag("z"));
  EXPECT_THAT(c.shape, ElementsAre(8, 4));
  EXPECT_EQ(c.src_mesh.ToString(), "1x2");
  EXPECT_EQ(c.dst_mesh, (SuiteMesh{2, 1}));
  EXPECT_EQ(c.num_bytes(), 8 * 4 * 4);
}

struct BadFile {
  std::string line;
  std::string error;  // substring of the message
};

TEST(PublicSuiteParseTest, ErrorsNameTheFileLineAndColumn) {
  const std::vector<BadFile> bad = {
      {"a t 8x4 1x2 S0R 2x1", "t.txt:2: 6 fields, want 8"},
      {"a t 8xq 1x2 S0R 2x1 RS0 2x4", "t.txt:2: column 'shape': '8xq'"},
      {"a t 8x0 1x2 S0R 2x1 RS0 2x4", "column 'shape': '8x0'"},
      {"a t 8x4 2 S0R 2x1 RS0 2x4", "column 'src_mesh': '2' is not a mesh"},
      {"a t 8x4 1x2 S0R 2x-1 RS0 2x4", "column 'dst_mesh'"},
      {"a t,,u 8x4 1x2 S0R 2x1 RS0 2x4", "column 'tags'"},
      {"a t 8x4 1x2 S0R 2x1 RS0 2x4x1",
       "column 'small_shape': 3 dimensions, but shape has 2"},
  };
  for (const BadFile& b : bad) {
    SCOPED_TRACE(b.line);
    absl::StatusOr<std::vector<PublicSuiteCase>> cases =
        ParsePublicSuite(absl::StrCat(kHeader, b.line, "\n"), "t.txt");
    ASSERT_FALSE(cases.ok());
    EXPECT_EQ(cases.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cases.status().message(), HasSubstr(b.error));
  }
}

TEST(PublicSuiteParseTest, DuplicateNamesAndEmptyFilesAreErrors) {
  absl::StatusOr<std::vector<PublicSuiteCase>> twice = ParsePublicSuite(
      "a t 8 1x1 R 1x1 R 8\na u 8 1x1 R 1x2 R 8\n", "t.txt");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(),
              HasSubstr("t.txt:2: column 'name': 'a' appears twice"));
  absl::StatusOr<std::vector<PublicSuiteCase>> empty =
      ParsePublicSuite(kHeader, "t.txt");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("t.txt: no cases"));
}

TEST(PublicSuiteLoadTest, MissingFileIsNotFoundNamingItAndTheVariable) {
  absl::StatusOr<std::vector<PublicSuiteCase>> cases =
      LoadPublicSuite("/nonexistent/suite.txt");
  ASSERT_FALSE(cases.ok());
  EXPECT_EQ(cases.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(cases.status().message(), HasSubstr("/nonexistent/suite.txt"));
  EXPECT_THAT(cases.status().message(), HasSubstr(kPublicSuiteEnv));
}

TEST(PublicSuiteLoadTest, TheVariableOverridesTheDefaultPath) {
  ASSERT_EQ(unsetenv(kPublicSuiteEnv), 0);
  const std::string built_in = DefaultPublicSuitePath();
  EXPECT_THAT(built_in, HasSubstr("bench/workloads/public_suite.txt"));
  ASSERT_EQ(setenv(kPublicSuiteEnv, "/elsewhere/suite.txt", 1), 0);
  EXPECT_EQ(DefaultPublicSuitePath(), "/elsewhere/suite.txt");
  EXPECT_EQ(LoadPublicSuite().status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(setenv(kPublicSuiteEnv, "", 1), 0);
  EXPECT_EQ(DefaultPublicSuitePath(), built_in);
  ASSERT_EQ(unsetenv(kPublicSuiteEnv), 0);
}

}  // namespace
}  // namespace meshcast
