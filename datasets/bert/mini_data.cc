#include "datasets/bert/mini_data.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <system_error>
#include <vector>

#include "datasets/bert/corpus.h"
#include "datasets/bert/packing.h"
#include "datasets/bert/shards.h"
#include "datasets/bert/vocab_trainer.h"
#include "datasets/error.h"
#include "datasets/rng.h"

namespace datasets::bert {
namespace fs = std::filesystem;

namespace {

// The corpus text (one sentence per line, a blank line between documents) cut into two texts
// by document.
void splitDocuments(const std::string& text, int everyNth, std::string& train, std::string& eval) {
  size_t pos = 0;
  int64_t doc = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    end = end == std::string::npos ? text.size() : end + 2;
    std::string& to = doc % everyNth == everyNth - 1 ? eval : train;
    to.append(text, pos, end - pos);
    if (to.size() >= 2 && to.compare(to.size() - 2, 2, "\n\n") != 0) to += "\n\n";
    pos = end;
    ++doc;
  }
}

// Instances of `text` packed (SPFHP) into shards under `dir`.
void writeSet(const std::string& text, const std::string& name, const Vocab& vocab,
              const MiniDataOptions& o, uint64_t seed, const fs::path& dir) {
  const Tokenizer tokenizer(vocab);
  Corpus corpus;
  appendCorpus(text, name, TextFormat::kSentencePerLine, tokenizer, corpus);
  InstanceConfig ic;
  ic.maxSeqLength = o.maxSeqLength;
  ic.seed = seed;
  InstanceStats st;
  const std::vector<Instance> instances = createInstances(corpus, vocab, ic, &st);
  std::vector<int32_t> lengths;
  for (const Instance& i : instances) lengths.push_back(static_cast<int32_t>(i.tokens.size()));
  auto packs = assignPacks(packSpfhp(st.lengthHistogram, o.maxSeqLength, o.maxPerPack), lengths);
  Rng rng(hashSeed({seed, 0x9ac4}));  // packs come grouped by strategy: mix them
  for (size_t i = packs.size(); i > 1; --i)
    std::swap(packs[i - 1],
              packs[static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(i) - 1))]);
  const PackedLayout layout{
      o.maxSeqLength,
      PackedLayout::slotsFor(o.maxSeqLength, ic.maskedLmProb, o.maxPerPack, ic.predictionsCap()),
      o.maxPerPack};
  fs::create_directories(dir);
  ShardWriter writer((dir / "part-00000.bertpak").string(), layout,
                     static_cast<uint32_t>(vocab.size()));
  std::vector<const Instance*> members;
  for (const auto& pack : packs) {
    members.clear();
    for (int32_t i : pack) members.push_back(&instances[static_cast<size_t>(i)]);
    writer.write(packRecord(members, layout));
  }
  writer.close();
}

}  // namespace

std::string MiniDataOptions::key() const {
  return fmt::format("wordnet-v{}-s{}-k{}-e{}-seed{}", vocabSize, maxSeqLength, maxPerPack,
                     evalEveryNthDocument, seed);
}

fs::path defaultBertCacheRoot() {
  if (const char* d = std::getenv("IPU_BERT_DATA_CACHE"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return fs::path(x) / "ipu_mlperf" / "bert";
  if (const char* h = std::getenv("HOME"); h && *h)
    return fs::path(h) / ".cache" / "ipu_mlperf" / "bert";
  return fs::temp_directory_path() / "ipu_mlperf" / "bert";
}

fs::path ensureMiniData(const fs::path& root, const MiniDataOptions& o) {
  const fs::path dir = root / o.key();
  std::error_code ec;
  if (fs::is_directory(dir / "train", ec) && fs::is_directory(dir / "eval", ec)) return dir;
  const std::string corpusDir = o.corpusDir.empty() ? kWordnetDir : o.corpusDir;
  const fs::path tmp = root / fmt::format(".{}.building-{}", o.key(), ::getpid());
  try {
    fs::create_directories(tmp);
    const std::string text = wordnetCorpusText(corpusDir);
    std::string train, eval;
    splitDocuments(text, o.evalEveryNthDocument, train, eval);
    VocabTrainer trainer;  // on the training documents only
    for (size_t pos = 0; pos < train.size();) {
      size_t end = train.find('\n', pos);
      if (end == std::string::npos) end = train.size();
      trainer.addText(std::string_view(train).substr(pos, end - pos));
      pos = end + 1;
    }
    const Vocab vocab = trainer.train(o.vocabSize);
    {
      std::ofstream f(tmp / "vocab.txt", std::ios::binary);
      f << vocab.serialize();
      if (!f) throw DatasetError("cannot write " + (tmp / "vocab.txt").string(), tmp.string());
    }
    const std::string name = corpusDir + " (WordNet glosses)";
    writeSet(train, name + ", training documents", vocab, o, o.seed, tmp / "train");
    writeSet(eval, name + ", held-out documents", vocab, o, o.seed + 1, tmp / "eval");
    fs::rename(tmp, dir, ec);
    if (ec && !fs::is_directory(dir / "eval")) {  // another process may have won the race
      throw DatasetError(
          fmt::format("cannot move {} to {}: {}", tmp.string(), dir.string(), ec.message()),
          dir.string());
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw DatasetError(fmt::format("cannot build the default BERT data set in {}: {} (set "
                                   "IPU_BERT_DATA_CACHE to a writable folder, or pass --data-dir)",
                                   root.string(), e.what()),
                       root.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);
  return dir;
}

}  // namespace datasets::bert
