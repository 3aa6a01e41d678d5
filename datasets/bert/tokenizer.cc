#include "datasets/bert/tokenizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <array>

#include "datasets/bert/utf8.h"
#include "datasets/error.h"

namespace datasets::bert {
namespace {

enum Ascii : uint8_t { kDrop, kSpace, kPunct, kUpper, kOther };

constexpr std::array<uint8_t, 128> makeAsciiTable() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if (c == '\t' || c == '\n' || c == '\r' || c == ' ')
      t[c] = kSpace;
    else if (c < 32 || c == 127)
      t[c] = kDrop;  // Cc
    else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
             (c >= 123 && c <= 126))
      t[c] = kPunct;
    else if (c >= 'A' && c <= 'Z')
      t[c] = kUpper;
    else
      t[c] = kOther;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAscii = makeAsciiTable();

// _tokenize_chinese_chars' ranges (CJK Unified Ideographs and extensions, compatibility).
bool isCjk(int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// _clean_text drops these; cp < 0 is ill-formed UTF-8 (treated as U+FFFD).
bool isDropped(int32_t cp) {
  if (cp <= 0 || cp == 0xFFFD) return true;
  const int8_t type = u_charType(cp);
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR;
}

// _is_whitespace (mapped to ' '), plus U+2028/U+2029, which Python's str.split() also splits on.
bool isSpace(int32_t cp) {
  return cp == 0x2028 || cp == 0x2029 || u_charType(cp) == U_SPACE_SEPARATOR;
}

bool isPunct(int32_t cp) {
  if (cp < 128) return kAscii[static_cast<size_t>(cp)] == kPunct;
  switch (u_charType(cp)) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

const icu::Normalizer2& nfd() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status) || n == nullptr)
    throw DatasetError(std::string("ICU NFD normalizer unavailable: ") + u_errorName(status));
  return *n;
}

// Splits an ASCII word (already lower-cased) on punctuation.
void splitAscii(std::string_view word, const std::function<void(std::string_view)>& emit) {
  size_t start = 0;
  for (size_t i = 0; i < word.size(); ++i) {
    if (kAscii[static_cast<uint8_t>(word[i])] != kPunct) continue;
    if (i > start) emit(word.substr(start, i - start));
    emit(word.substr(i, 1));
    start = i + 1;
  }
  if (start < word.size()) emit(word.substr(start));
}

// A whitespace-separated token with non-ASCII characters: lower() of the whole token (so that
// context rules such as Greek final sigma apply as in Python), NFD, drop Mn, punctuation split.
void splitUnicode(std::string_view token, const std::function<void(std::string_view)>& emit) {
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(token.data(), static_cast<int32_t>(token.size())));
  s.toLower(icu::Locale::getRoot());
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString d = nfd().normalize(s, status);
  if (U_FAILURE(status))
    throw DatasetError(std::string("ICU NFD normalization failed: ") + u_errorName(status));
  std::string word;
  const auto flush = [&] {
    if (!word.empty()) emit(word);
    word.clear();
  };
  for (int32_t i = 0; i < d.length();) {
    const UChar32 cp = d.char32At(i);
    i += U16_LENGTH(cp);
    if (u_charType(cp) == U_NON_SPACING_MARK) continue;
    if (isPunct(cp)) {
      flush();
      appendUtf8(word, cp);
      flush();
    } else {
      appendUtf8(word, cp);
    }
  }
  flush();
}

}  // namespace

Tokenizer::Tokenizer(const Vocab& vocab, int maxCharsPerWord)
    : vocab_(vocab), maxCharsPerWord_(maxCharsPerWord) {}

void Tokenizer::basicTokenize(std::string_view text,
                              const std::function<void(std::string_view)>& word) {
  std::string token;  // the current whitespace token, cleaned
  bool ascii = true;
  const auto flush = [&] {
    if (token.empty()) return;
    if (ascii)
      splitAscii(token, word);
    else
      splitUnicode(token, word);
    token.clear();
    ascii = true;
  };
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      ++i;
      switch (kAscii[b]) {
        case kDrop:
          break;
        case kSpace:
          flush();
          break;
        case kUpper:
          token += static_cast<char>(b + ('a' - 'A'));
          break;
        default:
          token += static_cast<char>(b);
      }
      continue;
    }
    const size_t start = i;
    const int32_t cp = nextCodePoint(text, i);
    if (isDropped(cp)) continue;
    if (isSpace(cp)) {
      flush();
    } else if (isCjk(cp)) {
      // A word of its own; still lower-cased and NFD'd (compatibility ideographs decompose).
      flush();
      token.assign(text.substr(start, i - start));
      ascii = false;
      flush();
    } else {
      token.append(text.substr(start, i - start));
      ascii = false;
    }
  }
  flush();
}

void Tokenizer::wordpiece(std::string_view word, std::vector<int32_t>& ids) const {
  // Code point boundaries (byte offsets), for the character limit and piece ends.
  thread_local std::vector<uint32_t> bounds;
  bounds.clear();
  for (size_t i = 0; i < word.size(); ++i)
    if ((static_cast<uint8_t>(word[i]) & 0xC0) != 0x80) bounds.push_back(static_cast<uint32_t>(i));
  const size_t chars = bounds.size();
  bounds.push_back(static_cast<uint32_t>(word.size()));
  if (chars > static_cast<size_t>(maxCharsPerWord_)) {
    ids.push_back(vocab_.special().unk);
    return;
  }
  const size_t mark = ids.size();
  size_t startIdx = 0;
  while (startIdx < chars) {
    const size_t start = bounds[startIdx];
    int32_t found = -1;
    size_t endIdx = chars;
    while (endIdx > startIdx && bounds[endIdx] - start > vocab_.maxPieceBytes()) --endIdx;
    for (; endIdx > startIdx; --endIdx) {
      const std::string_view piece = word.substr(start, bounds[endIdx] - start);
      found = startIdx == 0 ? vocab_.find(piece) : vocab_.findContinuation(piece);
      if (found >= 0) break;
    }
    if (found < 0) {
      ids.resize(mark);
      ids.push_back(vocab_.special().unk);
      return;
    }
    ids.push_back(found);
    startIdx = endIdx;
  }
}

void Tokenizer::tokenize(std::string_view text, std::vector<int32_t>& ids) const {
  basicTokenize(text, [&](std::string_view word) { wordpiece(word, ids); });
}

std::vector<int32_t> Tokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  tokenize(text, ids);
  return ids;
}

}  // namespace datasets::bert
