// The BERT data a mini run trains on when no --data-dir is given: WordNet's glosses (the
// embedded default corpus) split by document into a training and a held-out evaluation set, a
// vocabulary trained on the training documents only, and both sets packed into shards:
//
//   <dir>/vocab.txt   <dir>/train/part-*.bertpak   <dir>/eval/part-*.bertpak
//
// the layout prepare_bert_data writes for one set (run it twice, into train/ and eval/, to make
// your own). Built once into a cache folder (written under a temporary name and renamed, so a
// concurrent or interrupted build never leaves a half-written set behind).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "datasets/bert/instances.h"

namespace datasets::bert {

struct MiniDataOptions {
  int vocabSize = 2048;
  int maxSeqLength = 128;
  int maxPerPack = 3;
  int evalEveryNthDocument = 20;  // document d goes to the evaluation set when d % N == N - 1
  uint64_t seed = 12345;          // instances (masking, random next) and pack order
  std::string corpusDir;          // WordNet's folder (empty: kWordnetDir)
  // The folder name under the cache that these options select (changes with every option).
  std::string key() const;
};

// Where built sets are cached: $IPU_BERT_DATA_CACHE, else $XDG_CACHE_HOME/ipu_mlperf/bert, else
// $HOME/.cache/ipu_mlperf/bert.
std::filesystem::path defaultBertCacheRoot();

// The set of `options` under `root` (root / options.key()), built first when absent. Throws
// DatasetError naming the folder or the corpus file when it cannot be read or written.
std::filesystem::path ensureMiniData(const std::filesystem::path& root,
                                     const MiniDataOptions& options);

}  // namespace datasets::bert
