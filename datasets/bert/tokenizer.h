// The uncased WordPiece tokenizer of google-research/bert (tokenization.py: BasicTokenizer with
// do_lower_case=True, then WordpieceTokenizer), character tables from ICU. Rules, in order:
// drop U+0000, U+FFFD and Cc/Cf (except \t \n \r); whitespace (\t \n \r, Zs) separates words;
// spaces around CJK ideographs; per word: lower case (full mapping), NFD, drop Mn; split off
// each punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, Unicode P*); then greedy
// longest-match-first WordPiece with "##"; a word of more than maxCharsPerWord code points, or
// one with a position no piece matches, becomes a single [UNK].
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/bert/vocab.h"

namespace datasets::bert {

class Tokenizer {
 public:
  // The reference's max_input_chars_per_word (HF transformers uses 100).
  static constexpr int kMaxCharsPerWord = 200;

  explicit Tokenizer(const Vocab& vocab, int maxCharsPerWord = kMaxCharsPerWord);

  // Appends the ids of one line of text ([CLS]/[SEP] not added). Ill-formed UTF-8 counts as
  // U+FFFD and is dropped, as the reference drops U+FFFD; readers validate files first.
  void tokenize(std::string_view text, std::vector<int32_t>& ids) const;
  std::vector<int32_t> tokenize(std::string_view text) const;

  // Basic tokenization only: calls `word` for each word (lower-cased, accent-stripped,
  // punctuation split), e.g. for training a vocabulary. No vocabulary is needed.
  static void basicTokenize(std::string_view text,
                            const std::function<void(std::string_view)>& word);

  const Vocab& vocab() const { return vocab_; }

 private:
  void wordpiece(std::string_view word, std::vector<int32_t>& ids) const;

  const Vocab& vocab_;
  int maxCharsPerWord_;
};

}  // namespace datasets::bert
