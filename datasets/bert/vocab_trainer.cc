#include "datasets/bert/vocab_trainer.h"

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>
#include <vector>

#include "datasets/bert/tokenizer.h"
#include "datasets/error.h"

namespace datasets::bert {

void VocabTrainer::addText(std::string_view text) {
  Tokenizer::basicTokenize(text, [&](std::string_view w) { ++counts_[std::string(w)]; });
}

Vocab VocabTrainer::train(int vocabSize, int64_t minPairCount) const {
  std::vector<std::string> tokens = {"[PAD]"};
  for (int i = 0; i < 99; ++i) tokens.push_back("[unused" + std::to_string(i) + "]");
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) tokens.push_back(s);
  if (vocabSize < static_cast<int>(tokens.size()) + 1)
    throw DatasetError("vocabulary size " + std::to_string(vocabSize) +
                       " leaves no room next to the " + std::to_string(tokens.size()) +
                       " reserved tokens");

  // Words sorted, for a result that does not depend on hash order.
  std::vector<std::pair<std::string, int64_t>> words(counts_.begin(), counts_.end());
  std::sort(words.begin(), words.end());
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids[tokens[i]] = static_cast<int32_t>(i);
  // Alphabet, sorted.
  std::map<std::string, bool> alphabet;
  for (const auto& [w, c] : words)
    for (size_t i = 0; i < w.size();) {
      size_t n = 1;
      while (i + n < w.size() && (static_cast<uint8_t>(w[i + n]) & 0xC0) == 0x80) ++n;
      alphabet[(i == 0 ? "" : "##") + w.substr(i, n)] = true;
      i += n;
    }
  const auto idOf = [&](const std::string& t) {
    auto [it, inserted] = ids.emplace(t, static_cast<int32_t>(tokens.size()));
    if (inserted) tokens.push_back(t);
    return it->second;
  };
  for (const auto& [t, _] : alphabet) idOf(t);
  if (static_cast<int>(tokens.size()) > vocabSize)
    throw DatasetError("vocabulary size " + std::to_string(vocabSize) + " is smaller than the " +
                       std::to_string(tokens.size()) +
                       " reserved tokens and characters of the corpus");

  struct Word {
    std::vector<int32_t> pieces;
    int64_t count;
  };
  std::vector<Word> ws;
  for (const auto& [w, c] : words) {
    Word word{{}, c};
    for (size_t i = 0; i < w.size();) {
      size_t n = 1;
      while (i + n < w.size() && (static_cast<uint8_t>(w[i + n]) & 0xC0) == 0x80) ++n;
      word.pieces.push_back(ids.at((i == 0 ? "" : "##") + w.substr(i, n)));
      i += n;
    }
    ws.push_back(std::move(word));
  }
  const auto key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  std::unordered_map<uint64_t, int64_t> pairCount;
  std::unordered_map<uint64_t, std::vector<int32_t>> pairWords;  // may hold stale entries
  for (size_t i = 0; i < ws.size(); ++i)
    for (size_t j = 0; j + 1 < ws[i].pieces.size(); ++j) {
      const uint64_t k = key(ws[i].pieces[j], ws[i].pieces[j + 1]);
      pairCount[k] += ws[i].count;
      pairWords[k].push_back(static_cast<int32_t>(i));
    }
  // Max-heap on (count, then smaller key); stale entries are skipped or refreshed when popped.
  using Entry = std::pair<int64_t, uint64_t>;
  const auto less = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> heap(less);
  for (const auto& [k, c] : pairCount) heap.push({c, k});
  std::vector<int64_t> stamp(ws.size(), -1);
  int64_t merge = 0;
  while (static_cast<int>(tokens.size()) < vocabSize && !heap.empty()) {
    const auto [c, k] = heap.top();
    heap.pop();
    const auto it = pairCount.find(k);
    const int64_t current = it == pairCount.end() ? 0 : it->second;
    if (current != c) {
      if (current > 0) heap.push({current, k});
      continue;
    }
    if (c < minPairCount) break;
    const auto a = static_cast<int32_t>(k >> 32);
    const auto b = static_cast<int32_t>(k & 0xFFFFFFFFu);
    const std::string& tb = tokens[static_cast<size_t>(b)];
    const int32_t merged = idOf(tokens[static_cast<size_t>(a)] + tb.substr(2));  // b is "##..."
    ++merge;
    std::vector<int32_t> affected = std::move(pairWords[k]);
    pairWords.erase(k);
    for (int32_t wi : affected) {
      if (stamp[static_cast<size_t>(wi)] == merge) continue;
      stamp[static_cast<size_t>(wi)] = merge;
      Word& w = ws[static_cast<size_t>(wi)];
      auto& p = w.pieces;
      for (size_t j = 0; j + 1 < p.size(); ++j) {
        if (p[j] != a || p[j + 1] != b) continue;
        const auto adjust = [&](int32_t x, int32_t y, int64_t delta) {
          const uint64_t kk = key(x, y);
          int64_t& n = pairCount[kk];
          n += delta;
          if (delta > 0) {
            pairWords[kk].push_back(wi);
            heap.push({n, kk});
          }
        };
        if (j > 0) adjust(p[j - 1], a, -w.count);
        if (j + 2 < p.size()) adjust(b, p[j + 2], -w.count);
        pairCount[k] -= w.count;
        p[j] = merged;
        p.erase(p.begin() + static_cast<ptrdiff_t>(j) + 1);
        if (j > 0) adjust(p[j - 1], merged, w.count);
        if (j + 1 < p.size()) adjust(merged, p[j + 1], w.count);
      }
    }
  }
  return Vocab::fromTokens(std::move(tokens), "<trained vocabulary>");
}

}  // namespace datasets::bert
