#include "datasets/bert/instances.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "datasets/error.h"
#include "datasets/rng.h"

namespace datasets::bert {
namespace {

// Python's random.shuffle: Fisher-Yates from the back.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(i) - 1))]);
}

class Creator {
 public:
  Creator(const Corpus& c, const Vocab& v, const InstanceConfig& cfg, InstanceStats& s)
      : corpus_(c), vocab_(v), cfg_(cfg), stats_(s), rng_(cfg.seed) {}

  std::vector<Instance> run() {
    const int64_t n = corpus_.documentCount();
    if (n == 0) throw DatasetError("no documents with tokens: nothing to create instances from");
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), 0);
    shuffle(order_, rng_);  // the reference shuffles the documents once
    std::vector<Instance> out;
    for (int d = 0; d < cfg_.dupeFactor; ++d)
      for (int64_t i = 0; i < n; ++i) fromDocument(i, out);
    shuffle(out, rng_);
    return out;
  }

 private:
  int64_t docBegin(int64_t i) const {
    return static_cast<int64_t>(
        corpus_.documentStart[static_cast<size_t>(order_[static_cast<size_t>(i)])]);
  }
  int64_t docSize(int64_t i) const {
    const auto d = static_cast<size_t>(order_[static_cast<size_t>(i)]);
    return static_cast<int64_t>(corpus_.documentStart[d + 1] - corpus_.documentStart[d]);
  }
  void appendSentence(int64_t s, std::vector<int32_t>& out) const {
    const auto* t = corpus_.tokens.data();
    out.insert(out.end(), t + corpus_.sentenceStart[static_cast<size_t>(s)],
               t + corpus_.sentenceStart[static_cast<size_t>(s) + 1]);
  }

  void fromDocument(int64_t docIndex, std::vector<Instance>& out) {
    ++stats_.documentsVisited;
    const int64_t maxTokens = cfg_.maxSeqLength - 3;
    int64_t target = maxTokens;
    if (rng_.uniform() < cfg_.shortSeqProb) {
      target = rng_.uniformInt(2, maxTokens);
      ++stats_.shortTargets;
    }
    const int64_t first = docBegin(docIndex);
    const int64_t size = docSize(docIndex);
    int64_t chunkBegin = 0;  // sentence index within the document
    int64_t chunkLength = 0;
    for (int64_t i = 0; i < size; ++i) {
      chunkLength += corpus_.sentenceLength(first + i);
      if (i != size - 1 && chunkLength < target) continue;
      const int64_t chunkSize = i + 1 - chunkBegin;
      const int64_t aEnd = chunkSize >= 2 ? rng_.uniformInt(1, chunkSize - 1) : 1;
      a_.clear();
      b_.clear();
      for (int64_t j = 0; j < aEnd; ++j) appendSentence(first + chunkBegin + j, a_);
      bool randomNext = false;
      stats_.singleSentenceChunks += chunkSize == 1;
      if (chunkSize == 1 || rng_.uniform() < 0.5) {
        randomNext = true;
        const int64_t targetB = target - static_cast<int64_t>(a_.size());
        int64_t other = 0;
        for (int tries = 0; tries < 10; ++tries) {
          other = rng_.uniformInt(0, corpus_.documentCount() - 1);
          if (other != docIndex) break;
        }
        const int64_t otherFirst = docBegin(other);
        const int64_t otherSize = docSize(other);
        for (int64_t j = rng_.uniformInt(0, otherSize - 1); j < otherSize; ++j) {
          appendSentence(otherFirst + j, b_);
          if (static_cast<int64_t>(b_.size()) >= targetB) break;
        }
        i -= chunkSize - aEnd;  // the unused sentences are put back
      } else {
        for (int64_t j = aEnd; j < chunkSize; ++j) appendSentence(first + chunkBegin + j, b_);
      }
      out.push_back(makeInstance(maxTokens, randomNext));
      chunkBegin = i + 1;
      chunkLength = 0;
    }
  }

  Instance makeInstance(int64_t maxTokens, bool randomNext) {
    // truncate_seq_pair: trim the longer side (B on ties), from the front or back at random.
    size_t aLo = 0, aHi = a_.size(), bLo = 0, bHi = b_.size();
    while (static_cast<int64_t>((aHi - aLo) + (bHi - bLo)) > maxTokens) {
      const bool trimA = (aHi - aLo) > (bHi - bLo);
      size_t& lo = trimA ? aLo : bLo;
      size_t& hi = trimA ? aHi : bHi;
      if (rng_.uniform() < 0.5)
        ++lo;
      else
        --hi;
    }
    const SpecialIds& sp = vocab_.special();
    Instance inst;
    inst.randomNext = randomNext;
    inst.tokens.reserve((aHi - aLo) + (bHi - bLo) + 3);
    inst.tokens.push_back(sp.cls);
    inst.tokens.insert(inst.tokens.end(), a_.begin() + static_cast<ptrdiff_t>(aLo),
                       a_.begin() + static_cast<ptrdiff_t>(aHi));
    inst.tokens.push_back(sp.sep);
    inst.segmentBStart = static_cast<int32_t>(inst.tokens.size());
    inst.tokens.insert(inst.tokens.end(), b_.begin() + static_cast<ptrdiff_t>(bLo),
                       b_.begin() + static_cast<ptrdiff_t>(bHi));
    inst.tokens.push_back(sp.sep);
    mask(inst);
    ++stats_.instances;
    stats_.randomNext += randomNext;
    if (stats_.lengthHistogram.size() <= inst.tokens.size())
      stats_.lengthHistogram.resize(inst.tokens.size() + 1);
    ++stats_.lengthHistogram[inst.tokens.size()];
    return inst;
  }

  // create_masked_lm_predictions without whole-word masking.
  void mask(Instance& inst) {
    const int32_t n = static_cast<int32_t>(inst.tokens.size());
    candidates_.clear();
    for (int32_t i = 1; i < n - 1; ++i)
      if (i != inst.segmentBStart - 1) candidates_.push_back(i);
    stats_.maskableTokens += static_cast<int64_t>(candidates_.size());
    shuffle(candidates_, rng_);
    // int(round(x)): Python rounds half to even, as nearbyint does in the default mode.
    const auto rounded = static_cast<int64_t>(std::nearbyint(n * cfg_.maskedLmProb));
    const int64_t toPredict =
        std::min<int64_t>(cfg_.predictionsCap(), std::max<int64_t>(1, rounded));
    const auto count =
        static_cast<size_t>(std::min<int64_t>(toPredict, static_cast<int64_t>(candidates_.size())));
    // Draw in the shuffled order (as the reference), then sort by position.
    picks_.clear();
    for (size_t k = 0; k < count; ++k) {
      const int32_t pos = candidates_[k];
      const int32_t original = inst.tokens[static_cast<size_t>(pos)];
      int32_t replacement;
      if (rng_.uniform() < 0.8) {
        replacement = vocab_.special().mask;
        ++stats_.maskedAsMask;
      } else if (rng_.uniform() < 0.5) {
        replacement = original;
        ++stats_.maskedAsKept;
      } else {
        replacement = static_cast<int32_t>(rng_.uniformInt(0, vocab_.size() - 1));
        ++stats_.maskedAsRandom;
      }
      picks_.push_back({pos, original, replacement});
    }
    std::sort(picks_.begin(), picks_.end(),
              [](const Pick& x, const Pick& y) { return x.position < y.position; });
    inst.maskedPositions.clear();
    inst.maskedLabels.clear();
    for (const Pick& p : picks_) {
      inst.maskedPositions.push_back(p.position);
      inst.maskedLabels.push_back(p.original);
      inst.tokens[static_cast<size_t>(p.position)] = p.replacement;
    }
    stats_.masked += static_cast<int64_t>(count);
  }

  struct Pick {
    int32_t position, original, replacement;
  };
  const Corpus& corpus_;
  const Vocab& vocab_;
  const InstanceConfig& cfg_;
  InstanceStats& stats_;
  Rng rng_;
  std::vector<int64_t> order_;
  std::vector<int32_t> a_, b_, candidates_;
  std::vector<Pick> picks_;
};

}  // namespace

int InstanceConfig::predictionsCap() const {
  return maxPredictions > 0 ? maxPredictions
                            : static_cast<int>(std::floor(maskedLmProb * maxSeqLength));
}

void InstanceConfig::validate() const {
  const auto bad = [](const std::string& what) {
    throw DatasetError("invalid instance settings: " + what);
  };
  if (maxSeqLength < 5 || maxSeqLength > 65535)
    bad("max_seq_length " + std::to_string(maxSeqLength) + " (expected 5..65535)");
  if (!(shortSeqProb >= 0 && shortSeqProb <= 1)) bad("short_seq_prob outside [0, 1]");
  if (!(maskedLmProb > 0 && maskedLmProb < 1)) bad("masked_lm_prob outside (0, 1)");
  if (predictionsCap() < 1) bad("max_predictions_per_seq < 1");
  if (dupeFactor < 1) bad("dupe_factor " + std::to_string(dupeFactor) + " (expected >= 1)");
}

std::vector<Instance> createInstances(const Corpus& corpus, const Vocab& vocab,
                                      const InstanceConfig& config, InstanceStats* stats) {
  config.validate();
  InstanceStats local;
  Creator creator(corpus, vocab, config, stats ? *stats : local);
  return creator.run();
}

}  // namespace datasets::bert
