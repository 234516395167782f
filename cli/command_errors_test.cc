#include "cli/command_errors.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

TEST(CommandErrorsTest, AServerMessageBecomesOneEscapedLine) {
  const CommandResult result = Fail("meshctl status", kExitFailure,
                                    "line one\nline two\r\n\x1b[2Jgone\xFF");
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_EQ(result.err,
            "meshctl status: line one; line two; \\x1B[2Jgone\\xFF\n");
}

}  // namespace
}  // namespace meshcast::cli
