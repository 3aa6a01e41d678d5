// BERT vocabulary files (datasets/bert/vocab.h): Vocab::parse must return a vocabulary or throw
// DatasetError naming the file; an accepted vocabulary serializes and parses back to the same
// tokens, and builds a tokenizer.
#include <string_view>

#include "datasets/bert/tokenizer.h"
#include "datasets/bert/vocab.h"
#include "datasets/error.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto vocab = datasets::bert::Vocab::parse(bytes, "vocab.txt");
    const auto again = datasets::bert::Vocab::parse(vocab.serialize(), "serialized");
    if (again.tokens() != vocab.tokens()) ipu::fuzz::violated("parse(serialize(v)) != v");
    const datasets::bert::Tokenizer tokenizer(vocab);
    (void)tokenizer;
  } catch (const datasets::DatasetError&) {
  }
  return 0;
}
