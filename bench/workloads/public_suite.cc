#include "bench/workloads/public_suite.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

#ifndef MESHCAST_PUBLIC_SUITE_FILE
#error "MESHCAST_PUBLIC_SUITE_FILE must name the source tree's suite file"
#endif

namespace meshcast {
namespace {

constexpr const char* kColumns[] = {"name",     "tags",     "shape",
                                    "src_mesh", "src_spec", "dst_mesh",
                                    "dst_spec", "small_shape"};
constexpr int kNumColumns = sizeof(kColumns) / sizeof(kColumns[0]);

// One line's position and fields, for error messages.
struct Line {
  absl::string_view file;
  int number = 0;
  std::vector<std::string> fields;

  absl::Status Error(int column, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: column '%s': %s", file, number,
                        kColumns[column], what));
  }
};

// "1024x1024x512": at least one positive extent.
absl::StatusOr<std::vector<int64_t>> ParseShape(const Line& line, int column) {
  const std::string& text = line.fields[column];
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t extent = 0;
    if (!absl::SimpleAtoi(part, &extent) || extent <= 0) {
      return line.Error(column, absl::StrCat("'", text,
                                             "' is not a shape such as "
                                             "1024x1024x512 (positive "
                                             "extents joined by x)"));
    }
    shape.push_back(extent);
  }
  return shape;
}

// "2x4": hosts x devices per host, both positive.
absl::StatusOr<SuiteMesh> ParseMeshField(const Line& line, int column) {
  const std::string& text = line.fields[column];
  const std::vector<absl::string_view> parts = absl::StrSplit(text, 'x');
  SuiteMesh mesh;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &mesh.hosts) ||
      !absl::SimpleAtoi(parts[1], &mesh.devices_per_host) || mesh.hosts <= 0 ||
      mesh.devices_per_host <= 0) {
    return line.Error(column,
                      absl::StrCat("'", text,
                                   "' is not a mesh HOSTSxDEVICES such as 2x4"));
  }
  return mesh;
}

absl::StatusOr<std::vector<std::string>> ParseTags(const Line& line) {
  constexpr int kTags = 1;
  std::vector<std::string> tags = absl::StrSplit(line.fields[kTags], ',');
  for (const std::string& tag : tags) {
    if (tag.empty()) {
      return line.Error(kTags, absl::StrCat("'", line.fields[kTags],
                                            "' has an empty tag"));
    }
  }
  return tags;
}

absl::StatusOr<PublicSuiteCase> ParseCase(const Line& line) {
  if (static_cast<int>(line.fields.size()) != kNumColumns) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d: %d fields, want %d (%s)", line.file, line.number,
        line.fields.size(), kNumColumns, absl::StrJoin(kColumns, " ")));
  }
  PublicSuiteCase c;
  c.name = line.fields[0];
  ASSIGN_OR_RETURN(c.tags, ParseTags(line));
  ASSIGN_OR_RETURN(c.shape, ParseShape(line, 2));
  ASSIGN_OR_RETURN(c.src_mesh, ParseMeshField(line, 3));
  c.src_spec = line.fields[4];
  ASSIGN_OR_RETURN(c.dst_mesh, ParseMeshField(line, 5));
  c.dst_spec = line.fields[6];
  ASSIGN_OR_RETURN(c.small_shape, ParseShape(line, 7));
  if (c.small_shape.size() != c.shape.size()) {
    return line.Error(7, absl::StrFormat("%d dimensions, but shape has %d",
                                         c.small_shape.size(), c.shape.size()));
  }
  return c;
}

}  // namespace

std::string SuiteMesh::ToString() const {
  return absl::StrCat(hosts, "x", devices_per_host);
}

std::string SuiteMesh::At(int first_host) const {
  return absl::StrCat(ToString(), "@", first_host);
}

bool PublicSuiteCase::HasTag(absl::string_view tag) const {
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

int64_t PublicSuiteCase::num_bytes() const {
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return elements * 4;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrJoin(shape, "x");
}

std::string DefaultPublicSuitePath() {
  const char* env = std::getenv(kPublicSuiteEnv);
  if (env != nullptr && *env != '\0') return env;
  return MESHCAST_PUBLIC_SUITE_FILE;
}

absl::StatusOr<std::vector<PublicSuiteCase>> ParsePublicSuite(
    absl::string_view text, absl::string_view file) {
  std::vector<PublicSuiteCase> cases;
  absl::flat_hash_set<std::string> names;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    const absl::string_view stripped = absl::StripAsciiWhitespace(raw);
    if (stripped.empty() || absl::StartsWith(stripped, "#")) continue;
    Line line{file, number,
              absl::StrSplit(stripped, absl::ByAnyChar(" \t"),
                             absl::SkipEmpty())};
    ASSIGN_OR_RETURN(PublicSuiteCase c, ParseCase(line));
    if (!names.insert(c.name).second) {
      return line.Error(0, absl::StrCat("'", c.name, "' appears twice"));
    }
    cases.push_back(std::move(c));
  }
  if (cases.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": no cases (every line is blank or a comment)"));
  }
  return cases;
}

absl::StatusOr<std::vector<PublicSuiteCase>> LoadPublicSuite(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read the public suite file ", path, " (point ",
        kPublicSuiteEnv, " or the benchmark's public suite flag at "
        "bench/workloads/public_suite.txt)"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParsePublicSuite(text.str(), path);
}

absl::StatusOr<std::vector<PublicSuiteCase>> LoadPublicSuite() {
  return LoadPublicSuite(DefaultPublicSuitePath());
}

std::vector<PublicSuiteCase> CasesTagged(
    const std::vector<PublicSuiteCase>& cases, absl::string_view tag) {
  std::vector<PublicSuiteCase> tagged;
  for (const PublicSuiteCase& c : cases) {
    if (c.HasTag(tag)) tagged.push_back(c);
  }
  return tagged;
}

}  // namespace meshcast
