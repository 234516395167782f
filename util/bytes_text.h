// Human-readable byte counts for the daemons' messages and logs, one style
// everywhere: binary units with one decimal ("100 B", "1.5 KiB",
// "21.3 GiB"), so a worker's "needs 32.0 GiB, 21.8 GiB available" and the
// controller's admission message read alike.
//
//   absl::StrCat("needs ", FormatBytes(bytes));
//   ASSIGN_OR_RETURN(int64_t bytes, ParseBytes("256MiB"));
//
// Thread safety: pure functions.
#ifndef MESHCAST_UTIL_BYTES_TEXT_H_
#define MESHCAST_UTIL_BYTES_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

std::string FormatBytes(int64_t bytes);

// Parses a byte count as people write it: a non-negative number (decimals
// allowed with a unit) and an optional unit, case-insensitive: B; KiB, MiB,
// GiB, TiB (also K, M, G, T: binary); KB, MB, GB, TB (decimal). "256MiB",
// "1.5 GiB", "4096". INVALID_ARGUMENT naming the text and the units for
// anything else, for a fractional byte count, or for more than 2^62 bytes.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_BYTES_TEXT_H_
