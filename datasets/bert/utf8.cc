#include "datasets/bert/utf8.h"

#include <unicode/utf8.h>

#include <algorithm>
#include <string>

#include "datasets/error.h"

namespace datasets::bert {

int32_t nextCodePoint(std::string_view bytes, size_t& i) {
  // ICU indexes with int32_t: decode from a window of at most 4 bytes so files over 2 GiB work.
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data()) + i;
  const auto length = static_cast<int32_t>(std::min<size_t>(bytes.size() - i, 4));
  int32_t pos = 0;
  UChar32 c;
  U8_NEXT(s, pos, length, c);
  i += static_cast<size_t>(pos);
  return c;
}

size_t firstInvalidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII runs dominate real text.
    while (i < bytes.size() && static_cast<uint8_t>(bytes[i]) < 0x80) ++i;
    if (i == bytes.size()) break;
    const size_t start = i;
    if (nextCodePoint(bytes, i) < 0) return start;
  }
  return std::string_view::npos;
}

void requireUtf8(std::string_view bytes, const std::string& name) {
  const size_t bad = firstInvalidUtf8(bytes);
  if (bad == std::string_view::npos) return;
  const size_t line = 1 + static_cast<size_t>(std::count(bytes.begin(), bytes.begin() + bad, '\n'));
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(bytes[bad])));
  throw DatasetError(name + ":" + std::to_string(line) + ": invalid UTF-8 at byte offset " +
                         std::to_string(bad) + " (byte " + hex +
                         "); expected UTF-8 text (hint: convert with iconv -f <encoding> -t UTF-8)",
                     name);
}

void appendUtf8(std::string& out, int32_t cp) {
  uint8_t buf[4];
  int32_t n = 0;
  UBool error = false;
  U8_APPEND(buf, n, 4, cp, error);
  if (!error) out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace datasets::bert
