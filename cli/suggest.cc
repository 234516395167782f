#include "cli/suggest.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshcast::cli {
namespace {

constexpr size_t kMaxSuggestions = 3;
constexpr absl::string_view kAllowed = "allowed: ";

// A word an "allowed:" list may hold: a name, flag or number-like token.
bool IsPlainWord(absl::string_view word) {
  if (word.empty()) return false;
  for (const char c : word) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// The last 'quoted' or "quoted" text of `text`; empty when there is none.
absl::string_view LastQuoted(absl::string_view text) {
  const size_t end = text.find_last_of("'\"");
  if (end == absl::string_view::npos || end == 0) return "";
  const size_t begin = text.rfind(text[end], end - 1);
  if (begin == absl::string_view::npos) return "";
  return text.substr(begin + 1, end - begin - 1);
}

}  // namespace

int EditDistance(absl::string_view a, absl::string_view b) {
  // Optimal string alignment: three rows of the dynamic programme suffice.
  std::vector<int> before(b.size() + 1), previous(b.size() + 1),
      current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = static_cast<int>(i);
    const char x = absl::ascii_tolower(a[i - 1]);
    for (size_t j = 1; j <= b.size(); ++j) {
      const char y = absl::ascii_tolower(b[j - 1]);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (x == y ? 0 : 1)});
      if (i > 1 && j > 1 && x == absl::ascii_tolower(b[j - 2]) &&
          absl::ascii_tolower(a[i - 2]) == y) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::vector<std::string> ClosestWords(absl::string_view typed,
                                      const std::vector<std::string>& allowed) {
  if (typed.empty()) return {};
  for (const std::string& word : allowed) {
    if (absl::EqualsIgnoreCase(word, typed)) return {};
  }
  const int limit = std::max<int>(1, static_cast<int>(typed.size()) / 3);
  std::vector<std::pair<int, std::string>> close;
  for (const std::string& word : allowed) {
    const int distance = EditDistance(typed, word);
    if (distance <= limit && distance < static_cast<int>(typed.size())) {
      close.emplace_back(distance, word);
    }
  }
  if (close.empty() && typed.size() >= 2) {
    for (const std::string& word : allowed) {
      if (absl::StartsWithIgnoreCase(word, typed)) close.emplace_back(0, word);
    }
    if (close.size() > 1) close.clear();  // only a unique start is a hint
  }
  std::stable_sort(
      close.begin(), close.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> words;
  for (const auto& [distance, word] : close) {
    if (distance != close.front().first || words.size() == kMaxSuggestions) {
      break;
    }
    words.push_back(word);
  }
  return words;
}

std::string DidYouMean(absl::string_view typed,
                       const std::vector<std::string>& allowed) {
  const std::vector<std::string> words = ClosestWords(typed, allowed);
  if (words.empty()) return "";
  return absl::StrCat("did you mean ", absl::StrJoin(words, " or "), "?");
}

std::string AppendSuggestion(absl::string_view message) {
  const size_t at = message.rfind(kAllowed);
  if (at == absl::string_view::npos ||
      absl::StrContains(message, "did you mean")) {
    return std::string(message);
  }
  absl::string_view list = message.substr(at + kAllowed.size());
  list = list.substr(0, list.find_first_of(";("));
  std::vector<std::string> words;
  for (absl::string_view word : absl::StrSplit(list, ',')) {
    word = absl::StripAsciiWhitespace(word);
    if (!IsPlainWord(word)) return std::string(message);
    words.emplace_back(word);
  }
  if (words.size() < 2) return std::string(message);
  const std::string hint = DidYouMean(LastQuoted(message.substr(0, at)), words);
  if (hint.empty()) return std::string(message);
  return absl::StrCat(absl::StripTrailingAsciiWhitespace(message), "; ", hint);
}

}  // namespace meshcast::cli
