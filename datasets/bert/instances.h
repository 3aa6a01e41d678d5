// Pretraining instances with the rules of google-research/bert's create_pretraining_data.py (the
// MLPerf copy: no whole-word masking). Deterministic for a seed, but the random stream is our
// own (datasets::Rng), so the instances are not those of the Python script for the same seed.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/bert/corpus.h"
#include "datasets/bert/vocab.h"

namespace datasets::bert {

struct InstanceConfig {
  int maxSeqLength = 128;
  double shortSeqProb = 0.1;
  double maskedLmProb = 0.15;
  int maxPredictions = 0;  // 0: floor(maskedLmProb * maxSeqLength) (76 at 512, 19 at 128)
  int dupeFactor = 1;
  uint64_t seed = 12345;

  int predictionsCap() const;
  void validate() const;  // throws DatasetError naming the bad field
};

struct Instance {
  std::vector<int32_t> tokens;           // [CLS] A [SEP] B [SEP], masking applied
  int32_t segmentBStart = 0;             // first token of segment 1 (after the first [SEP])
  bool randomNext = false;               // next_sentence_label 1
  std::vector<int32_t> maskedPositions;  // sorted
  std::vector<int32_t> maskedLabels;     // original ids
};

struct InstanceStats {
  int64_t instances = 0;
  int64_t randomNext = 0;
  int64_t singleSentenceChunks = 0;  // always random next under the reference's rule
  int64_t shortTargets = 0;          // documents given a target length below the maximum
  int64_t documentsVisited = 0;
  int64_t maskableTokens = 0;  // tokens other than [CLS]/[SEP]
  int64_t masked = 0;
  int64_t maskedAsMask = 0, maskedAsRandom = 0, maskedAsKept = 0;
  std::vector<int64_t> lengthHistogram;  // index = sequence length in tokens
};

std::vector<Instance> createInstances(const Corpus& corpus, const Vocab& vocab,
                                      const InstanceConfig& config, InstanceStats* stats = nullptr);

}  // namespace datasets::bert
