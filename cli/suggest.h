// "Did you mean ...?" for meshctl's errors: the closest of the allowed
// words to one a user mistyped (an unknown command, flag or value).
//
//   std::string hint = DidYouMean("meshcats", {"auto", "meshcast"});
//   // hint == "did you mean meshcast?"
//   AppendSuggestion("--strategy: unknown strategy 'meshcats'; allowed: "
//                    "send_recv, meshcast, auto")
//   // -> the same message + "; did you mean meshcast?"
//
// Closeness is the optimal-string-alignment edit distance (insertions,
// deletions, substitutions and swaps of two neighbouring characters each
// cost 1), ignoring ASCII case. A word is suggested when it is at most
// max(1, length / 3) edits away (and fewer edits than the typed word is
// long), or when the typed word (two characters or more) is the start of
// exactly one allowed word. Several words equally close are all named.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_SUGGEST_H_
#define MESHCAST_CLI_SUGGEST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace meshcast::cli {

// Edit distance between `a` and `b` as above (ASCII case ignored).
int EditDistance(absl::string_view a, absl::string_view b);

// The allowed words close to `typed`, closest first (at most three); empty
// when none is close or `typed` is itself allowed.
std::vector<std::string> ClosestWords(absl::string_view typed,
                                      const std::vector<std::string>& allowed);

// "did you mean X?" or "did you mean X or Y?"; empty when nothing is close.
std::string DidYouMean(absl::string_view typed,
                       const std::vector<std::string>& allowed);

// For an error message in meshctl's form "... 'VALUE' ...; allowed: A, B,
// C[ (note)][; ...]": the message with "; did you mean B?" appended when an
// allowed word is close to the last quoted value before "allowed:". Any
// other message (fewer than two allowed words, words that are not plain
// names, no quoted value, a suggestion already there) comes back unchanged.
std::string AppendSuggestion(absl::string_view message);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_SUGGEST_H_
