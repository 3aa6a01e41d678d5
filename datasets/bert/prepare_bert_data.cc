// prepare_bert_data: text folder + vocabulary -> packed BERT pretraining shards.
//   prepare_bert_data --output DIR [--input PATH]... [--vocab FILE] [options]
//   prepare_bert_data tokenize --vocab FILE TEXT_FILE   (one line of ids per input line)
// Without --input: WordNet's glosses (wordnet-base). Without --vocab: a vocabulary is trained on
// the input (VocabTrainer) and written to DIR/vocab.txt.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "datasets/bert/corpus.h"
#include "datasets/bert/instances.h"
#include "datasets/bert/packing.h"
#include "datasets/bert/shards.h"
#include "datasets/bert/utf8.h"
#include "datasets/bert/vocab_trainer.h"
#include "datasets/error.h"
#include "datasets/rng.h"

namespace bert = datasets::bert;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
// CPU seconds of this process: the figure to compare per core on a shared machine.
double cpuSeconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

int tokenizeCommand(const std::string& vocabPath, const std::string& file) {
  const bert::Vocab vocab = bert::Vocab::load(vocabPath);
  const bert::Tokenizer tokenizer(vocab);
  const auto inputs = bert::readTextInputs({file});
  const std::string& text = inputs.front().second;
  bert::requireUtf8(text, file);
  std::vector<int32_t> ids;
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ids.clear();
    tokenizer.tokenize(std::string_view(text).substr(pos, end - pos), ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
    pos = end + 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

struct Options {
  std::vector<std::string> inputs;
  std::string format = "sentences";
  std::string vocab;
  int vocabSize = 8192;
  std::string output;
  bert::InstanceConfig instances;
  int maxPerPack = 3;
  int64_t recordsPerShard = 16384;
  bool noShards = false;
};

int prepareCommand(const Options& o) {
  o.instances.validate();
  const auto start = Clock::now();
  // Text.
  std::vector<std::pair<std::string, std::string>> inputs;
  bert::TextFormat format = o.format == "paragraphs" ? bert::TextFormat::kParagraphPerLine
                                                     : bert::TextFormat::kSentencePerLine;
  if (o.inputs.empty()) {
    inputs.emplace_back(std::string(bert::kWordnetDir) + " (WordNet glosses)",
                        bert::wordnetCorpusText());
    format = bert::TextFormat::kSentencePerLine;
  } else {
    inputs = bert::readTextInputs(o.inputs);
  }
  size_t bytes = 0;
  for (const auto& [name, text] : inputs) {
    bert::requireUtf8(text, name);
    bytes += text.size();
  }
  fmt::print("input: {} file(s), {:.1f} MB, format {}\n", inputs.size(), bytes / 1e6,
             format == bert::TextFormat::kParagraphPerLine ? "paragraphs" : "sentences");
  // Vocabulary.
  std::optional<bert::Vocab> vocab;
  if (!o.vocab.empty()) {
    vocab = bert::Vocab::load(o.vocab);
    fmt::print("vocabulary: {} ({} tokens)\n", o.vocab, vocab->size());
  } else {
    const auto t = Clock::now();
    bert::VocabTrainer trainer;
    for (const auto& [name, text] : inputs) {
      size_t pos = 0;
      while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        trainer.addText(std::string_view(text).substr(pos, end - pos));
        pos = end + 1;
      }
    }
    vocab = trainer.train(o.vocabSize);
    std::string path = "(not written: no --output)";
    if (!o.output.empty()) {
      std::filesystem::create_directories(o.output);
      path = o.output + "/vocab.txt";
      std::ofstream file(path, std::ios::binary);
      file << vocab->serialize();
      if (!file) throw datasets::DatasetError("cannot write " + path, path);
    }
    fmt::print("vocabulary: trained on the input ({} distinct words) -> {} ({} tokens, {:.2f} s)\n",
               trainer.distinctWords(), path, vocab->size(), since(t));
  }
  // Tokenise.
  const double cpuStart = cpuSeconds();
  auto t = Clock::now();
  const bert::Tokenizer tokenizer(*vocab);
  bert::Corpus corpus;
  for (const auto& [name, text] : inputs) bert::appendCorpus(text, name, format, tokenizer, corpus);
  const double tokenizeSeconds = since(t);
  fmt::print(
      "corpus: {} lines, {} documents, {} sentences, {} tokens; skipped {} empty documents, {} "
      "empty sentences ({:.3f} s)\n",
      corpus.lines, corpus.documentCount(), corpus.sentenceCount(), corpus.tokens.size(),
      corpus.emptyDocumentsSkipped, corpus.emptySentencesSkipped, tokenizeSeconds);
  // Instances.
  t = Clock::now();
  bert::InstanceStats st;
  std::vector<bert::Instance> instances = bert::createInstances(corpus, *vocab, o.instances, &st);
  const double instanceSeconds = since(t);
  int64_t tokensTotal = 0, full = 0;
  for (size_t l = 0; l < st.lengthHistogram.size(); ++l) {
    tokensTotal += static_cast<int64_t>(l) * st.lengthHistogram[l];
    if (static_cast<int>(l) == o.instances.maxSeqLength) full = st.lengthHistogram[l];
  }
  const auto frac = [](int64_t a, int64_t b) {
    return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  fmt::print(
      "instances: {} (dupe factor {}, max length {}, seed {}), random next {:.4f} (one-sentence "
      "chunks {:.4f}), short targets {:.4f} of documents, "
      "mean length {:.1f}, at max length {:.4f} ({:.3f} s)\n",
      st.instances, o.instances.dupeFactor, o.instances.maxSeqLength, o.instances.seed,
      frac(st.randomNext, st.instances), frac(st.singleSentenceChunks, st.instances),
      frac(st.shortTargets, st.documentsVisited), frac(tokensTotal, st.instances),
      frac(full, st.instances), instanceSeconds);
  fmt::print(
      "masking: {:.4f} of maskable tokens (cap {}), [MASK] {:.4f} / random {:.4f} / kept {:.4f}\n",
      frac(st.masked, st.maskableTokens), o.instances.predictionsCap(),
      frac(st.maskedAsMask, st.masked), frac(st.maskedAsRandom, st.masked),
      frac(st.maskedAsKept, st.masked));
  fmt::print("time: tokenize + instances {:.3f} s wall, {:.3f} s CPU\n",
             tokenizeSeconds + instanceSeconds, cpuSeconds() - cpuStart);
  // Packing.
  t = Clock::now();
  std::vector<int32_t> lengths;
  lengths.reserve(instances.size());
  for (const auto& i : instances) lengths.push_back(static_cast<int32_t>(i.tokens.size()));
  const int L = o.instances.maxSeqLength;
  const auto strategies = bert::packSpfhp(st.lengthHistogram, L, o.maxPerPack);
  auto packs = bert::assignPacks(strategies, lengths);
  // Packs come out grouped by strategy: shuffle them so a shard mixes pack shapes.
  datasets::Rng rng(datasets::hashSeed({o.instances.seed, 0x9ac4}));
  for (size_t i = packs.size(); i > 1; --i)
    std::swap(packs[i - 1],
              packs[static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(i) - 1))]);
  const auto ps = bert::packingStats(strategies, L);
  fmt::print(
      "packing (SPFHP, at most {} per pack): {} sequences -> {} packs, efficiency {:.2f}% "
      "(padding alone {:.2f}%), speed-up over padding {:.3f}x ({:.3f} s)\n",
      o.maxPerPack, ps.sequences, ps.packs, 100 * ps.efficiency, 100 * ps.paddingEfficiency,
      ps.speedupOverPadding, since(t));
  if (o.noShards) return 0;
  // Shards.
  t = Clock::now();
  bert::PackedLayout layout{L,
                            bert::PackedLayout::slotsFor(L, o.instances.maskedLmProb, o.maxPerPack,
                                                         o.instances.predictionsCap()),
                            o.maxPerPack};
  std::filesystem::create_directories(o.output);
  int shard = 0;
  std::vector<const bert::Instance*> members;
  for (size_t p = 0; p < packs.size();) {
    const std::string path = fmt::format("{}/part-{:05d}.bertpak", o.output, shard++);
    bert::ShardWriter writer(path, layout, static_cast<uint32_t>(vocab->size()));
    for (int64_t r = 0; r < o.recordsPerShard && p < packs.size(); ++r, ++p) {
      members.clear();
      for (int32_t i : packs[p]) members.push_back(&instances[static_cast<size_t>(i)]);
      writer.write(bert::packRecord(members, layout));
    }
    writer.close();
  }
  fmt::print(
      "shards: {} x up to {} records in {} (layout: length {}, {} masked slots, {} per pack; "
      "{:.3f} s)\n",
      shard, o.recordsPerShard, o.output, L, layout.maskedSlots, o.maxPerPack, since(t));
  fmt::print("total {:.3f} s\n", since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Turns text into packed BERT pretraining shards (the reference's tokenizer and rules)"};
  Options o;
  app.add_option("--input", o.inputs,
                 "text files or folders (default: WordNet glosses from wordnet-base)");
  app.add_option("--format", o.format,
                 "sentences: one sentence per line, blank line ends a document (the reference's); "
                 "paragraphs: WikiText's layout, one paragraph per line split into sentences, "
                 "' = Title = ' starts a document")
      ->check(CLI::IsMember({"sentences", "paragraphs"}))
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "WordPiece vocabulary (default: trained on the input)");
  app.add_option("--vocab-size", o.vocabSize, "size of a trained vocabulary")
      ->capture_default_str();
  app.add_option("--output", o.output, "output folder for the shards (and a trained vocab.txt)");
  app.add_option("--max-seq-length", o.instances.maxSeqLength)->capture_default_str();
  app.add_option("--max-predictions", o.instances.maxPredictions,
                 "cap of masked tokens per sequence (0: floor(masked-lm-prob * length))")
      ->capture_default_str();
  app.add_option("--masked-lm-prob", o.instances.maskedLmProb)->capture_default_str();
  app.add_option("--short-seq-prob", o.instances.shortSeqProb)->capture_default_str();
  app.add_option("--dupe-factor", o.instances.dupeFactor)->capture_default_str();
  app.add_option("--seed", o.instances.seed)->capture_default_str();
  app.add_option("--max-per-pack", o.maxPerPack,
                 "at most this many sequences per pack (1: no packing)")
      ->check(CLI::Range(1, 255))
      ->capture_default_str();
  app.add_option("--records-per-shard", o.recordsPerShard)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--no-shards", o.noShards, "stop after packing (timing, statistics)");
  auto* tok = app.add_subcommand("tokenize", "print the token ids of each line of FILE");
  std::string tokVocab, tokFile;
  tok->add_option("--vocab", tokVocab)->required();
  tok->add_option("file", tokFile)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    if (*tok) return tokenizeCommand(tokVocab, tokFile);
    if (o.output.empty() && !o.noShards) {
      std::cerr << "prepare_bert_data: --output DIR is required (or --no-shards)\n";
      return 2;
    }
    return prepareCommand(o);
  } catch (const std::exception& e) {  // DatasetError names the file; others (e.g. disk) too
    std::cerr << "prepare_bert_data: " << e.what() << "\n";
    return 1;
  }
}
