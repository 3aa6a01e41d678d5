// Pretraining text -> documents of tokenised sentences (create_pretraining_data.py's input).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/bert/tokenizer.h"

namespace datasets::bert {

enum class TextFormat {
  kSentencePerLine,  // the reference's input: one sentence per line, blank line ends a document
  // Raw text in WikiText's layout: one paragraph per line, split into sentences; blank lines
  // separate paragraphs, not documents; a heading line " = Title = " starts a new document (an
  // article) and headings are not text. A file without headings is one document.
  kParagraphPerLine,
};

// Documents of sentences of token ids, stored flat.
struct Corpus {
  std::vector<int32_t> tokens;             // every sentence back to back
  std::vector<uint64_t> sentenceStart{0};  // sentence s = tokens[start[s], start[s+1])
  std::vector<uint64_t> documentStart{0};  // document d = sentences [start[d], start[d+1])
  int64_t lines = 0;
  int64_t emptyDocumentsSkipped =
      0;  // blank-line runs and documents with no tokens (as the reference)
  int64_t emptySentencesSkipped = 0;  // lines that tokenise to nothing (the reference drops them)

  int64_t documentCount() const { return static_cast<int64_t>(documentStart.size()) - 1; }
  int64_t sentenceCount() const { return static_cast<int64_t>(sentenceStart.size()) - 1; }
  int64_t sentenceLength(int64_t s) const {
    return static_cast<int64_t>(sentenceStart[static_cast<size_t>(s) + 1] -
                                sentenceStart[static_cast<size_t>(s)]);
  }
};

// Splits one paragraph into sentences: after . ! ? (and any closing quotes or brackets) that are
// followed by whitespace and then a character that is not a lower-case ASCII letter, unless the
// word before the full stop is a single letter (an initial) or a common abbreviation.
std::vector<std::string_view> splitSentences(std::string_view paragraph);

// Parses text bytes (one file) into `corpus`; `name` is used in errors. The text must be UTF-8
// (else DatasetError with file, line and byte offset). A document ends as the format says and at
// the end of each file; empty documents are counted and skipped.
void appendCorpus(std::string_view bytes, const std::string& name, TextFormat format,
                  const Tokenizer& tokenizer, Corpus& corpus);

// Reads the files (or every regular file of a directory, sorted by name) into text blobs.
std::vector<std::pair<std::string, std::string>> readTextInputs(
    const std::vector<std::string>& paths);

// The embedded default corpus: WordNet's glosses and examples (Debian's wordnet-base), as text
// with one sentence per line; consecutive synsets of one lexicographer file form a document.
inline constexpr const char* kWordnetDir = "/usr/share/wordnet";
std::string wordnetCorpusText(const std::string& dir = kWordnetDir);

}  // namespace datasets::bert
