// A WordPiece vocabulary learnt from a corpus, for the embedded default (no vocabulary file).
// BPE-style and deterministic: words come from the tokenizer's basic step; the alphabet is every
// character seen (word-initial as "c", inside a word as "##c"); then, until the size is reached,
// the most frequent adjacent pair of pieces (weighted by word count; ties to the pair first
// created) is merged into one piece ("ab", or "##ab" inside a word). The layout follows BERT's:
// [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], then the alphabet and the merges.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "datasets/bert/vocab.h"

namespace datasets::bert {

class VocabTrainer {
 public:
  // Adds the words of one line of text.
  void addText(std::string_view text);
  // Pairs seen fewer than minPairCount times are never merged.
  Vocab train(int vocabSize, int64_t minPairCount = 2) const;
  size_t distinctWords() const { return counts_.size(); }

 private:
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace datasets::bert
