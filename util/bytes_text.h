// Human-readable byte counts for the daemons' messages and logs, one style
// everywhere: binary units with one decimal ("100 B", "1.5 KiB",
// "21.3 GiB"), so a worker's "needs 32.0 GiB, 21.8 GiB available" and the
// controller's admission message read alike.
//
//   absl::StrCat("needs ", FormatBytes(bytes));
//
// Thread safety: pure function.
#ifndef MESHCAST_UTIL_BYTES_TEXT_H_
#define MESHCAST_UTIL_BYTES_TEXT_H_

#include <cstdint>
#include <string>

namespace meshcast {

std::string FormatBytes(int64_t bytes);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_BYTES_TEXT_H_
