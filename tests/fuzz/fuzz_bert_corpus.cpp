// BERT pretraining text (datasets/bert/corpus.h): appendCorpus in both text formats, tokenized
// with the small test vocabulary, must give a consistent corpus or DatasetError naming the file.
#include <string_view>

#include "datasets/bert/corpus.h"
#include "datasets/bert/tokenizer.h"
#include "datasets/bert/vocab.h"
#include "datasets/error.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vocab =
      datasets::bert::Vocab::load(IPU_SOURCE_DIR "/tests/datasets/bert/fixtures/vocab_small.txt");
  static const datasets::bert::Tokenizer tokenizer(vocab);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (auto format : {datasets::bert::TextFormat::kSentencePerLine,
                      datasets::bert::TextFormat::kParagraphPerLine}) {
    datasets::bert::Corpus corpus;
    try {
      datasets::bert::appendCorpus(bytes, "corpus.txt", format, tokenizer, corpus);
    } catch (const datasets::DatasetError&) {
      continue;
    }
    if (corpus.sentenceStart.back() != corpus.tokens.size() ||
        corpus.documentStart.back() != static_cast<uint64_t>(corpus.sentenceCount())) {
      ipu::fuzz::violated("corpus offsets disagree with its tokens/sentences");
    }
    for (int32_t id : corpus.tokens) {
      if (id < 0 || id >= vocab.size()) ipu::fuzz::violated("a token id outside the vocabulary");
    }
  }
  return 0;
}
