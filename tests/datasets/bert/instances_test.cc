#include "datasets/bert/instances.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "datasets/error.h"
#include "datasets/rng.h"
#include "tests/datasets/bert/test_util.h"

namespace datasets::bert {
namespace {

using namespace testing;

Vocab letterVocab() {
  std::vector<std::string> t = {"[PAD]"};
  for (int i = 0; i < 99; ++i) t.push_back("[unused" + std::to_string(i) + "]");
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) t.push_back(s);
  for (char c = 'a'; c <= 'z'; ++c) t.push_back(std::string(1, c));
  t.push_back(".");
  return Vocab::fromTokens(t, "letters");
}

// Documents of sentences of one-letter words: sentence lengths 3..30 words.
std::string syntheticText(int documents, uint64_t seed) {
  Rng rng(seed);
  std::string text;
  for (int d = 0; d < documents; ++d) {
    const int64_t sentences = rng.uniformInt(1, 12);
    for (int64_t s = 0; s < sentences; ++s) {
      const int64_t words = rng.uniformInt(3, 30);
      for (int64_t w = 0; w < words; ++w) {
        text += static_cast<char>('a' + rng.uniformInt(0, 25));
        text += ' ';
      }
      text += ".\n";
    }
    text += "\n";
  }
  return text;
}

void checkInstances(const std::vector<Instance>& instances, const InstanceStats& st, const Vocab& v,
                    const InstanceConfig& cfg) {
  ASSERT_FALSE(instances.empty());
  for (const auto& in : instances) {
    ASSERT_LE(in.tokens.size(), static_cast<size_t>(cfg.maxSeqLength));
    EXPECT_EQ(in.tokens.front(), v.special().cls);
    EXPECT_EQ(in.tokens.back(), v.special().sep);
    EXPECT_EQ(in.tokens[static_cast<size_t>(in.segmentBStart) - 1], v.special().sep);
    EXPECT_GE(in.segmentBStart, 3);                                       // A not empty
    EXPECT_GE(static_cast<int>(in.tokens.size()) - in.segmentBStart, 2);  // B not empty
    const int rounded =
        static_cast<int>(std::nearbyint(0.15 * static_cast<double>(in.tokens.size())));
    EXPECT_EQ(in.maskedPositions.size(),
              static_cast<size_t>(std::min(cfg.predictionsCap(), std::max(1, rounded))));
    for (size_t m = 0; m < in.maskedPositions.size(); ++m) {
      const int32_t p = in.maskedPositions[m];
      EXPECT_TRUE(p > 0 && p != in.segmentBStart - 1 &&
                  p < static_cast<int32_t>(in.tokens.size()) - 1)
          << "never [CLS]/[SEP]";
      if (m) {
        EXPECT_LT(in.maskedPositions[m - 1], p);
      }
    }
  }
  const double n = static_cast<double>(st.masked);
  if (n < 2000) return;  // too few for the 80/10/10 split to show
  EXPECT_NEAR(st.maskedAsMask / n, 0.8, 0.02);
  EXPECT_NEAR(st.maskedAsRandom / n, 0.1, 0.015);
  EXPECT_NEAR(st.maskedAsKept / n, 0.1, 0.015);
}

TEST(BertInstances, ReferenceRulesOnSyntheticText) {
  const Vocab v = letterVocab();
  const Tokenizer tok(v);
  Corpus c;
  appendCorpus(syntheticText(600, 7), "synthetic", TextFormat::kSentencePerLine, tok, c);
  EXPECT_EQ(c.documentCount(), 600);
  InstanceConfig cfg;
  cfg.maxSeqLength = 64;
  cfg.dupeFactor = 3;
  InstanceStats st;
  const auto instances = createInstances(c, v, cfg, &st);
  checkInstances(instances, st, v, cfg);
  EXPECT_NEAR(static_cast<double>(st.shortTargets) / st.documentsVisited, 0.1, 0.03);
  const double single = static_cast<double>(st.singleSentenceChunks) / st.instances;
  EXPECT_NEAR(static_cast<double>(st.randomNext) / st.instances, single + 0.5 * (1 - single), 0.03);
  // Same seed, same instances; another seed, others.
  InstanceStats st2;
  const auto again = createInstances(c, v, cfg, &st2);
  ASSERT_EQ(again.size(), instances.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].tokens, instances[i].tokens);
    EXPECT_EQ(again[i].maskedPositions, instances[i].maskedPositions);
    EXPECT_EQ(again[i].randomNext, instances[i].randomNext);
  }
  cfg.seed = 1;
  const auto other = createInstances(c, v, cfg);
  EXPECT_FALSE(other.size() == instances.size() && other[0].tokens == instances[0].tokens);
}

TEST(BertInstances, StatisticsOnWikiText2) {
  const std::string dir = sharedDir() + "/data";
  if (!std::filesystem::exists(dir + "/wikitext-2/valid.txt"))
    GTEST_SKIP() << "SKIPPED LOUDLY: " << dir << "/wikitext-2 absent (WikiText-2 statistics)";
  const Vocab v = Vocab::load(dir + "/bert/vocab-uncased.txt");
  const Tokenizer tok(v);
  Corpus c;
  for (const char* f : {"test.txt", "valid.txt"}) {
    const std::string path = dir + "/wikitext-2/" + f;
    appendCorpus(readText(path), path, TextFormat::kParagraphPerLine, tok, c);
  }
  InstanceConfig cfg;   // 128, dupe 1, seed 12345
  cfg.dupeFactor = 10;  // MLPerf's
  InstanceStats st;
  const auto instances = createInstances(c, v, cfg, &st);
  checkInstances(instances, st, v, cfg);
  EXPECT_GT(st.instances, 5000);
  // Random next: always for a one-sentence chunk, else with probability 0.5.
  const double single = static_cast<double>(st.singleSentenceChunks) / st.instances;
  EXPECT_LT(single, 0.1);
  EXPECT_NEAR(static_cast<double>(st.randomNext) / st.instances, single + 0.5 * (1 - single), 0.01);
  EXPECT_NEAR(static_cast<double>(st.masked) / st.maskableTokens, 0.15, 0.01);
  EXPECT_NEAR(static_cast<double>(st.shortTargets) / st.documentsVisited, 0.1, 0.03);
  int64_t belowHalf = 0;
  for (const auto& in : instances) belowHalf += in.tokens.size() < 64;
  EXPECT_GT(belowHalf, 0);
  std::cout << "WikiText-2: " << st.instances << " instances, random next "
            << static_cast<double>(st.randomNext) / st.instances << " (one-sentence chunks "
            << single << "), masked " << static_cast<double>(st.masked) / st.maskableTokens
            << ", short targets " << static_cast<double>(st.shortTargets) / st.documentsVisited
            << "\n";
}

TEST(BertCorpus, EmptyDocumentsAreCountedAndSkipped) {
  const Vocab v = letterVocab();
  const Tokenizer tok(v);
  Corpus c;
  appendCorpus("a b c\n\n\n\n\x01\x02\n\nd e\nf\n", "f.txt", TextFormat::kSentencePerLine, tok, c);
  EXPECT_EQ(c.documentCount(), 2);
  EXPECT_EQ(c.emptyDocumentsSkipped, 1);  // the line of control characters
  EXPECT_EQ(c.emptySentencesSkipped, 1);
  Corpus none;
  appendCorpus("\n\n", "g.txt", TextFormat::kSentencePerLine, tok, none);
  try {
    createInstances(none, v, {});
    FAIL() << "no error";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("no documents"), std::string::npos);
  }
}

TEST(BertCorpus, NonUtf8NamesFileLineAndOffset) {
  const Vocab v = letterVocab();
  const Tokenizer tok(v);
  Corpus c;
  try {
    appendCorpus("a b\nc \xFE d\n", "corpus.txt", TextFormat::kSentencePerLine, tok, c);
    FAIL() << "no error";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("corpus.txt:2: invalid UTF-8 at byte offset 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(BertCorpus, OneEnormousLine) {
  const Vocab v = letterVocab();
  const Tokenizer tok(v);
  std::string line;
  for (int i = 0; i < 300000; ++i) line += "a b ";  // 1.2 MB, 600k tokens, no newline
  Corpus c;
  appendCorpus(line, "big.txt", TextFormat::kSentencePerLine, tok, c);
  appendCorpus("c d e\nf g\n", "small.txt", TextFormat::kSentencePerLine, tok, c);
  ASSERT_EQ(c.documentCount(), 2);
  InstanceConfig cfg;
  InstanceStats st;
  const auto instances = createInstances(c, v, cfg, &st);
  checkInstances(instances, st, v, cfg);
}

TEST(BertCorpus, SentenceSplitting) {
  const auto s = splitSentences(
      "Dr. Smith went home. He slept! Did he? \"Yes.\" The U.S. army came. e.g. this");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], "Dr. Smith went home.");
  EXPECT_EQ(s[3], "\"Yes.\"");
  EXPECT_EQ(s[4], "The U.S. army came. e.g. this");
  EXPECT_EQ(splitSentences("It rose by 3 @.@ 5 % . Then it fell .").size(), 2u);  // WikiText
}

}  // namespace
}  // namespace datasets::bert
