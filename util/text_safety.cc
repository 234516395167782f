#include "util/text_safety.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace meshcast {
namespace {

// Decodes the UTF-8 sequence starting at text[i]: its length in bytes (0 if
// it is not valid UTF-8) and its code point.
size_t DecodeUtf8(absl::string_view text, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t lead = byte(0);
  size_t length;
  uint32_t cp;
  uint32_t min_cp;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min_cp = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min_cp = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min_cp = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF as a lead
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and values past Unicode are invalid.
  if (cp < min_cp || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  *code_point = cp;
  return length;
}

bool MustEscape(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void AppendHexEscape(std::string* out, absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    out->append({'\\', 'x', kHex[b >> 4], kHex[b & 0xF]});
  }
}

// Escapes `text` piece by piece: calls emit(piece) for every unit that must
// stay whole (one code point, or one escape sequence), in order, until emit
// returns false.
template <typename Emit>
void ForEachEscapedUnit(absl::string_view text, Emit emit) {
  size_t i = 0;
  std::string unit;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t length = DecodeUtf8(text, i, &cp);
    unit.clear();
    if (length == 0) {
      AppendHexEscape(&unit, text.substr(i, 1));
      length = 1;
    } else if (MustEscape(cp)) {
      AppendHexEscape(&unit, text.substr(i, length));
    } else {
      unit.assign(text.data() + i, length);
    }
    if (!emit(unit)) return;
    i += length;
  }
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const size_t length = DecodeUtf8(text, i, &cp);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string EscapeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  ForEachEscapedUnit(text, [&](absl::string_view unit) {
    out.append(unit.data(), unit.size());
    return true;
  });
  return out;
}

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  for (char c : text) {
    // Count every byte that starts a code point.
    if ((static_cast<uint8_t>(c) & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::string TruncateForColumn(absl::string_view text, size_t max_width) {
  std::string escaped = EscapeForTerminal(text);
  if (max_width == 0 || DisplayWidth(escaped) <= max_width) return escaped;
  std::string out;
  size_t width = 0;
  ForEachEscapedUnit(text, [&](absl::string_view unit) {
    const size_t unit_width = DisplayWidth(unit);
    if (width + unit_width > max_width - 1) return false;
    out.append(unit.data(), unit.size());
    width += unit_width;
    return true;
  });
  out.append(kEllipsis.data(), kEllipsis.size());
  return out;
}

std::string QuotePrefix(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return absl::StrCat("\"", EscapeForTerminal(text), "\"");
  }
  // Cut on a code point boundary: back off over continuation bytes (at most
  // three; a longer run is invalid UTF-8 anyway and gets escaped).
  size_t cut = max_bytes;
  for (int k = 0;
       k < 3 && cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80;
       ++k) {
    --cut;
  }
  return absl::StrCat("\"", EscapeForTerminal(text.substr(0, cut)), kEllipsis,
                      "\" (", text.size(), " bytes)");
}

}  // namespace meshcast
