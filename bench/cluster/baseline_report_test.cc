#include "bench/cluster/baseline_report.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

using ::testing::HasSubstr;

BaselineResult Sample() {
  BaselineResult r;
  r.op = "all_reduce";
  r.algorithm = "ring";
  r.ranks = 4;
  r.bytes = 1048576;
  r.count = 262144;
  r.iters = 10;
  r.median_seconds = 0.00123456789;
  r.min_seconds = 0.0011;
  r.max_seconds = 0.0031;
  return r;
}

TEST(BaselineReportTest, RoundTripsEveryField) {
  const BaselineResult r = Sample();
  const std::string line = FormatBaselineLine(r);
  EXPECT_EQ(line,
            "gloo_baseline op=all_reduce algorithm=ring ranks=4 "
            "bytes=1048576 count=262144 type=float32 iters=10 "
            "median_s=0.00123456789 min_s=0.0011 max_s=0.0031 status=ok");
  absl::StatusOr<BaselineResult> back = ParseBaselineLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->op, r.op);
  EXPECT_EQ(back->algorithm, r.algorithm);
  EXPECT_EQ(back->ranks, r.ranks);
  EXPECT_EQ(back->bytes, r.bytes);
  EXPECT_EQ(back->count, r.count);
  EXPECT_EQ(back->type, r.type);
  EXPECT_EQ(back->iters, r.iters);
  // %.9g keeps 9 significant digits.
  EXPECT_NEAR(back->median_seconds, r.median_seconds, 1e-9 * r.median_seconds);
  EXPECT_DOUBLE_EQ(back->min_seconds, r.min_seconds);
  EXPECT_DOUBLE_EQ(back->max_seconds, r.max_seconds);
  EXPECT_TRUE(back->ok());
}

TEST(BaselineReportTest, UnsupportedOpHasNoTimes) {
  BaselineResult r;
  r.op = "reduce_scatter";
  r.ranks = 4;
  r.status = "unsupported";
  absl::StatusOr<BaselineResult> back =
      ParseBaselineLine(FormatBaselineLine(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->ok());
  EXPECT_EQ(back->status, "unsupported");
  EXPECT_TRUE(std::isnan(back->median_seconds));
}

TEST(BaselineReportTest, FieldsInAnyOrderUnknownKeysIgnored) {
  absl::StatusOr<BaselineResult> r = ParseBaselineLine(
      "  gloo_baseline status=ok median_s=2e-3 future=1 ranks=2 "
      "op=broadcast\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->op, "broadcast");
  EXPECT_EQ(r->ranks, 2);
  EXPECT_DOUBLE_EQ(r->median_seconds, 0.002);
}

TEST(BaselineReportTest, RejectsMalformedLinesNamingTheField) {
  absl::StatusOr<BaselineResult> r =
      ParseBaselineLine("gloo_baseline op=all_reduce ranks=four status=ok");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ranks='four'"));
  // ok needs a positive time; op, ranks and status are required.
  EXPECT_FALSE(
      ParseBaselineLine("gloo_baseline op=all_reduce ranks=2 status=ok").ok());
  EXPECT_FALSE(ParseBaselineLine("gloo_baseline ranks=2 status=ok "
                                 "median_s=1")
                   .ok());
  EXPECT_FALSE(ParseBaselineLine("gloo_baseline op=x ranks=2 median_s=1").ok());
  EXPECT_FALSE(ParseBaselineLine("nccl op=x ranks=2 status=ok").ok());
  EXPECT_FALSE(ParseBaselineLine("gloo_baseline op=x ranks=2 status=ok "
                                 "median_s=fast")
                   .ok());
}

TEST(BaselineReportTest, OutputKeepsOnlyBaselineLinesInOrder) {
  BaselineResult a = Sample();
  BaselineResult b = Sample();
  b.op = "broadcast";
  b.bytes = 16 << 20;
  const std::string output = "# gloo_collective_baseline: 4 ranks\n" +
                             FormatBaselineLine(a) + "\nsome log line\n" +
                             FormatBaselineLine(b) + "\n";
  absl::StatusOr<std::vector<BaselineResult>> all = ParseBaselineOutput(output);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].op, "all_reduce");
  EXPECT_EQ((*all)[1].op, "broadcast");
  EXPECT_EQ((*all)[1].bytes, 16 << 20);
  EXPECT_FALSE(
      ParseBaselineOutput("gloo_baseline op=all_reduce ranks=x\n").ok());
  absl::StatusOr<std::vector<BaselineResult>> none = ParseBaselineOutput("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace meshcast::bench
