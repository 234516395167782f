// Text safety: showing and quoting text that came from the network (worker
// names, job ids, addresses, error messages, metric labels) without letting
// it drive a terminal or flood a message.
//
//   std::cout << EscapeForTerminal(worker.name());        // "evil\x1b[2J"
//   cells.push_back(TruncateForColumn(job.message(), 40)); // "...long…"
//   return absl::InvalidArgumentError(
//       absl::StrCat("unknown op ", QuotePrefix(op)));     // "\"all_shu\""
//
// Contract: EscapeForTerminal keeps printable ASCII and valid UTF-8 of
// printable code points as they are, and writes every other byte as \xNN
// (two upper-case hex digits): C0 controls and DEL (so ESC, hence every ANSI
// escape sequence, and CR, LF, TAB), the C1 controls U+0080..U+009F, the
// bidirectional overrides U+202A..U+202E and U+2066..U+2069 (which reorder
// what a terminal shows), and each byte of invalid UTF-8 (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, a code
// point above U+10FFFF). The result is valid UTF-8 with no control
// character. A backslash is kept as it is: the escaping is for showing, not
// for a round trip.
//
// Widths count code points (each taken as one terminal column: meshcast's
// own names are ASCII; wide CJK characters may misalign a table, no more).
//
// Thread safety: pure functions.
#ifndef MESHCAST_UTIL_TEXT_SAFETY_H_
#define MESHCAST_UTIL_TEXT_SAFETY_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace meshcast {

// The ellipsis that marks a cut value: U+2026.
inline constexpr absl::string_view kEllipsis = "\xE2\x80\xA6";

// Bytes a quoted prefix keeps by default.
inline constexpr size_t kQuotePrefixBytes = 64;

// Whether `text` is well-formed UTF-8 (no surrogates, no overlong forms,
// nothing above U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// `text` with every control character, bidirectional override and invalid
// UTF-8 byte written as \xNN (see the contract above).
std::string EscapeForTerminal(absl::string_view text);

// Number of code points of valid UTF-8 `text` (the terminal columns it takes
// as counted here).
size_t DisplayWidth(absl::string_view text);

// EscapeForTerminal(text), cut to at most `max_width` columns: a longer
// value keeps its first max_width - 1 columns and ends with kEllipsis. An
// escape sequence is never cut in half. max_width 0 means no limit.
std::string TruncateForColumn(absl::string_view text, size_t max_width);

// For error messages that quote what a client sent: the escaped first
// `max_bytes` bytes of `text` between double quotes; a longer text is cut
// (on a UTF-8 boundary), marked with kEllipsis and followed by its length:
//   QuotePrefix("abc")               -> "abc"        (with the quotes)
//   QuotePrefix(<300 x 'a'>, 4)      -> "aaaa…" (300 bytes)
std::string QuotePrefix(absl::string_view text,
                        size_t max_bytes = kQuotePrefixBytes);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_TEXT_SAFETY_H_
