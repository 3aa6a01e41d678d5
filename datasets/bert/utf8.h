// UTF-8 decoding (ICU's U8_NEXT: rejects overlong forms, surrogates and truncated sequences).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace datasets::bert {

// Decodes the code point at bytes[i] and advances i; returns -1 for an ill-formed sequence.
int32_t nextCodePoint(std::string_view bytes, size_t& i);

// Byte offset of the first ill-formed sequence, or std::string_view::npos when all is UTF-8.
size_t firstInvalidUtf8(std::string_view bytes);

// Throws DatasetError "<name>:<line>: invalid UTF-8 at byte offset <n> ..." for the first
// ill-formed sequence (line 1-based, offset from the start of `bytes`).
void requireUtf8(std::string_view bytes, const std::string& name);

void appendUtf8(std::string& out, int32_t cp);

}  // namespace datasets::bert
