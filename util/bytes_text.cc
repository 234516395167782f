#include "util/bytes_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

struct Unit {
  const char* name;
  double factor;
};

constexpr Unit kUnits[] = {
    {"", 1},         {"b", 1},
    {"k", 1024.0},   {"kib", 1024.0},  {"kb", 1e3},
    {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
    {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
    {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
};

absl::Status BadBytes(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "size ", QuotePrefix(text), " ", why,
      "; write a byte count with an optional unit: B, KiB, MiB, GiB, TiB "
      "(binary; also K, M, G, T) or KB, MB, GB, TB (decimal), e.g. 256MiB"));
}

}  // namespace

absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t number_end = 0;
  while (number_end < trimmed.size() &&
         (absl::ascii_isdigit(trimmed[number_end]) ||
          trimmed[number_end] == '.')) {
    ++number_end;
  }
  const absl::string_view number = trimmed.substr(0, number_end);
  const std::string unit = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(trimmed.substr(number_end)));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) {
    return BadBytes(text, "is not a number");
  }
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    const double bytes = value * u.factor;
    if (bytes > 4.6e18) return BadBytes(text, "is too large");
    if (bytes != static_cast<double>(static_cast<int64_t>(bytes))) {
      return BadBytes(text, "is not a whole number of bytes");
    }
    return static_cast<int64_t>(bytes);
  }
  return BadBytes(text, absl::StrCat("has an unknown unit \"", unit, "\""));
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB",
                                           "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < 6) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace meshcast
