#include "datasets/bert/corpus.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "datasets/bert/utf8.h"
#include "datasets/error.h"

namespace datasets::bert {
namespace {

bool isBlankChar(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

bool isBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), isBlankChar);
}

// WikiText headings: " = Title = " is level 1, " = = Section = = " level 2; 0 otherwise.
int headingLevel(std::string_view line) {
  while (!line.empty() && isBlankChar(line.front())) line.remove_prefix(1);
  while (!line.empty() && isBlankChar(line.back())) line.remove_suffix(1);
  int level = 0;
  while (line.size() > 4 && line.front() == '=' && line.back() == '=') {
    line.remove_prefix(1);
    line.remove_suffix(1);
    if (line.front() != ' ' || line.back() != ' ') return 0;
    line.remove_prefix(1);
    line.remove_suffix(1);
    ++level;
  }
  return line.empty() ? 0 : level;
}

bool isSpaceChar(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool isAbbreviation(std::string_view word) {
  static constexpr std::array<std::string_view, 16> kAbbreviations = {
      "mr",  "mrs", "ms",  "dr", "st",   "jr",  "sr", "vs",
      "etc", "e.g", "i.e", "no", "prof", "inc", "co", "ltd"};
  if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0]))) return true;
  std::string lower(word);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), lower) != kAbbreviations.end();
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DatasetError("cannot open " + path, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string_view> splitSentences(std::string_view p) {
  std::vector<std::string_view> out;
  size_t start = 0;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    // The word before the terminator (for initials and abbreviations).
    size_t w = i;
    while (w > start && !isSpaceChar(p[w - 1])) --w;
    const std::string_view before = p.substr(w, i - w);
    size_t end = i;
    while (end < p.size() && (p[end] == '.' || p[end] == '!' || p[end] == '?')) ++end;
    while (end < p.size() && (p[end] == '"' || p[end] == '\'' || p[end] == ')' || p[end] == ']'))
      ++end;
    size_t next = end;
    while (next < p.size() && isSpaceChar(p[next])) ++next;
    const bool spaced = next > end;
    const bool lowerNext = next < p.size() && p[next] >= 'a' && p[next] <= 'z';
    const bool abbreviation = c == '.' && end == i + 1 && isAbbreviation(before);
    if (spaced && next < p.size() && !lowerNext && !abbreviation) {
      out.push_back(p.substr(start, end - start));
      start = next;
    }
    i = end;
  }
  std::string_view rest = p.substr(std::min(start, p.size()));
  if (!isBlank(rest)) out.push_back(rest);
  return out;
}

void appendCorpus(std::string_view bytes, const std::string& name, TextFormat format,
                  const Tokenizer& tokenizer, Corpus& corpus) {
  requireUtf8(bytes, name);
  const auto endDocument = [&] {
    if (corpus.sentenceStart.size() - 1 > corpus.documentStart.back())
      corpus.documentStart.push_back(corpus.sentenceStart.size() - 1);
  };
  bool documentOpen = false;  // a non-blank line since the last boundary
  bool documentHasTokens = false;
  const auto boundary = [&] {
    if (documentOpen && !documentHasTokens) ++corpus.emptyDocumentsSkipped;
    endDocument();
    documentOpen = documentHasTokens = false;
  };
  const auto addSentence = [&](std::string_view text) {
    const size_t before = corpus.tokens.size();
    tokenizer.tokenize(text, corpus.tokens);
    if (corpus.tokens.size() == before) {
      ++corpus.emptySentencesSkipped;
      return;
    }
    corpus.sentenceStart.push_back(corpus.tokens.size());
    documentHasTokens = true;
  };
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(pos, end - pos);
    pos = end + 1;
    ++corpus.lines;
    if (format == TextFormat::kParagraphPerLine) {
      const int level = headingLevel(line);
      if (level == 1) boundary();
      if (level > 0 || isBlank(line)) continue;
    } else if (isBlank(line)) {
      boundary();
      continue;
    }
    documentOpen = true;
    if (format == TextFormat::kSentencePerLine) {
      addSentence(line);
    } else {
      for (std::string_view s : splitSentences(line)) addSentence(s);
    }
  }
  boundary();
}

std::vector<std::pair<std::string, std::string>> readTextInputs(
    const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(path, ec))
        if (entry.is_regular_file()) files.push_back(entry.path().string());
      if (ec) throw DatasetError("cannot list " + path + ": " + ec.message(), path);
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw DatasetError(
            path + ": no text files (expected files with one sentence or paragraph per line)",
            path);
      for (const auto& f : files) out.emplace_back(f, readFile(f));
    } else if (fs::is_regular_file(path, ec)) {
      out.emplace_back(path, readFile(path));
    } else {
      throw DatasetError(path + ": no such file or directory", path);
    }
  }
  return out;
}

std::string wordnetCorpusText(const std::string& dir) {
  constexpr int kSynsetsPerDocument = 8;
  std::string out;
  for (const char* pos : {"noun", "verb", "adj", "adv"}) {
    const std::string path = dir + "/data." + pos;
    std::ifstream in(path);
    if (!in)
      throw DatasetError("cannot open " + path +
                             " (the default corpus; hint: apt-get install wordnet-base, or pass "
                             "--input with a text folder)",
                         path);
    std::string line;
    std::string lexFile;
    int inDocument = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == ' ') continue;  // licence header
      const size_t bar = line.find(" | ");
      if (bar == std::string::npos) continue;
      std::istringstream fields(line.substr(0, bar));
      std::string offset, lex, type, countHex;
      fields >> offset >> lex >> type >> countHex;
      const int count = static_cast<int>(std::strtol(countHex.c_str(), nullptr, 16));
      std::string words;
      for (int w = 0; w < count; ++w) {
        std::string word, lexId;
        fields >> word >> lexId;
        if (const size_t paren = word.find('('); paren != std::string::npos) word.resize(paren);
        std::replace(word.begin(), word.end(), '_', ' ');
        if (!words.empty()) words += ", ";
        words += word;
      }
      if (lex != lexFile || inDocument == kSynsetsPerDocument) {
        if (!out.empty()) out += '\n';  // blank line: document boundary
        lexFile = lex;
        inDocument = 0;
      }
      ++inDocument;
      // Gloss: definition; "example"; "example"
      std::string gloss = line.substr(bar + 3);
      while (!gloss.empty() && gloss.back() == ' ') gloss.pop_back();
      std::string definition;
      size_t i = 0;
      const auto emit = [&](std::string s) {
        while (!s.empty() && (s.back() == ' ' || s.back() == ';')) s.pop_back();
        while (!s.empty() && s.front() == ' ') s.erase(0, 1);
        if (!s.empty()) out += s + "\n";
      };
      std::vector<std::string> examples;
      while (i < gloss.size()) {
        if (gloss[i] == '"') {
          const size_t close = gloss.find('"', i + 1);
          const size_t stop = close == std::string::npos ? gloss.size() : close;
          examples.push_back(gloss.substr(i + 1, stop - i - 1));
          i = stop + 1;
        } else {
          definition += gloss[i++];
        }
      }
      emit(words + ": " + definition);
      for (auto& e : examples) emit(e);
    }
  }
  return out;
}

}  // namespace datasets::bert
