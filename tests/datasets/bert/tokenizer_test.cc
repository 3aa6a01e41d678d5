#include "datasets/bert/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "datasets/bert/utf8.h"
#include "datasets/bert/vocab_trainer.h"
#include "datasets/error.h"
#include "tests/datasets/bert/test_util.h"

namespace datasets::bert {
namespace {

using namespace testing;

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "<no error>";
}

// The BERT layout with a few words: [PAD] [unused0..98] [UNK] [CLS] [SEP] [MASK] words...
std::string smallVocabText(const std::vector<std::string>& words) {
  std::string v = "[PAD]\n";
  for (int i = 0; i < 99; ++i) v += "[unused" + std::to_string(i) + "]\n";
  v += "[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const auto& w : words) v += w + "\n";
  return v;
}

void expectFixture(const std::string& vocabPath, const std::string& idsPath) {
  const Vocab vocab = Vocab::load(vocabPath);
  const Tokenizer tokenizer(vocab);
  const auto lines = splitLines(readText(std::string(BERT_FIXTURES) + "/hard_cases.txt"));
  const auto expected = splitLines(readText(idsPath));
  ASSERT_EQ(lines.size(), expected.size());
  ASSERT_GE(lines.size(), 20u);
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(tokenizer.tokenize(lines[i]), parseIds(expected[i])) << "hard case line " << i + 1;
}

// Ids from the reference logic (scripts/bert_expected_ids.py --engine reference).
TEST(BertTokenizer, HardCasesMatchReferenceWithCommittedVocab) {
  expectFixture(std::string(BERT_FIXTURES) + "/vocab_small.txt",
                std::string(BERT_FIXTURES) + "/hard_cases.vocab_small.ids");
}

TEST(BertTokenizer, HardCasesMatchReferenceWithUncasedVocab) {
  const std::string vocab = sharedDir() + "/data/bert/vocab-uncased.txt";
  if (!std::filesystem::exists(vocab))
    GTEST_SKIP() << "SKIPPED LOUDLY: " << vocab << " absent (hard cases with the BERT vocab)";
  expectFixture(vocab, std::string(BERT_FIXTURES) + "/hard_cases.uncased.ids");
}

TEST(BertTokenizer, RulesOnASmallVocabulary) {
  const Vocab v = Vocab::parse(smallVocabText({"un", "##aff", "##able", "hello", "!", "a", "##a",
                                               "cafe", "[", "]", "mask", "中"}),
                               "test");
  const Tokenizer t(v);
  const auto id = [&](const std::string& s) {
    return s.starts_with("##") ? v.findContinuation(s.substr(2)) : v.find(s);
  };
  EXPECT_EQ(t.tokenize("UnAffable"), (std::vector<int32_t>{id("un"), id("##aff"), id("##able")}));
  EXPECT_EQ(t.tokenize("Hello!! Café"),
            (std::vector<int32_t>{id("hello"), id("!"), id("!"), id("cafe")}));
  EXPECT_EQ(t.tokenize("[MASK]"), (std::vector<int32_t>{id("["), id("mask"), id("]")}));
  EXPECT_EQ(t.tokenize("x中x"), (std::vector<int32_t>{100, id("中"), 100}));
  EXPECT_EQ(t.tokenize("unaffablex"), (std::vector<int32_t>{100}));  // whole word -> one [UNK]
  EXPECT_EQ(t.tokenize(std::string(200, 'a')).size(), 200u);
  EXPECT_EQ(t.tokenize(std::string(201, 'a')), (std::vector<int32_t>{100}));  // > 200 chars
  EXPECT_EQ(t.tokenize("\x01\t\xC2\xA0 \xEF\xBF\xBD"), std::vector<int32_t>{});
}

TEST(BertVocab, BadVocabulariesAreClearErrors) {
  EXPECT_NE(errorOf([] {
              Vocab::parse(smallVocabText({"a", "b", "a"}), "v.txt");
            }).find("v.txt:107: duplicate token 'a' (first at line 105)"),
            std::string::npos);
  std::string noMask = smallVocabText({"a"});
  noMask.replace(noMask.find("[MASK]"), 6, "[MOSK]");
  EXPECT_NE(errorOf([&] { Vocab::parse(noMask, "v.txt"); }).find("special token [MASK] missing"),
            std::string::npos);
  std::string moved = "[UNK]\n" + smallVocabText({"a"}).substr(0);
  moved.replace(moved.rfind("[UNK]\n"), 6, "x\n");
  EXPECT_NE(errorOf([&] {
              Vocab::parse(moved, "v.txt");
            }).find("special token [PAD] has id 1, expected 0"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              Vocab::parse(smallVocabText({"a", "", "b"}), "v.txt");
            }).find("v.txt:106: empty token"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              Vocab::parse(smallVocabText({"a", "b\xFFz"}), "v.txt");
            }).find("v.txt:106: invalid UTF-8 at byte offset"),
            std::string::npos);
  EXPECT_NE(errorOf([] { Vocab::parse("", "v.txt"); }).find("empty vocabulary"), std::string::npos);
  EXPECT_NE(errorOf([] { Vocab::load("/nonexistent/vocab.txt"); }).find("/nonexistent/vocab.txt"),
            std::string::npos);
}

TEST(BertUtf8, InvalidBytesReportLineAndOffset) {
  EXPECT_EQ(firstInvalidUtf8("ok\nalso ok \xC3\xA9"), std::string_view::npos);
  EXPECT_EQ(firstInvalidUtf8("ab\xC0\xAF"), 2u);      // overlong
  EXPECT_EQ(firstInvalidUtf8("ab\xED\xA0\x80"), 2u);  // surrogate
  EXPECT_EQ(firstInvalidUtf8("abc\xE2\x82"), 3u);     // truncated
  EXPECT_NE(errorOf([] {
              requireUtf8("line1\nline2 \x80", "f.txt");
            }).find("f.txt:2: invalid UTF-8 at byte offset 12 (byte 0x80)"),
            std::string::npos);
}

TEST(BertVocabTrainer, DeterministicAndCoversItsCorpus) {
  const std::vector<std::string> text = {"The quick brown fox jumps over the lazy dog.",
                                         "Foxes and dogs; the dogs jumped, the foxes ran!",
                                         "Jumping foxes are quicker than lazy dogs."};
  VocabTrainer a, b;
  for (const auto& l : text) a.addText(l);
  for (auto it = text.rbegin(); it != text.rend(); ++it) b.addText(*it);
  const Vocab va = a.train(180), vb = b.train(180);
  EXPECT_EQ(va.tokens(), vb.tokens());  // independent of input order
  EXPECT_EQ(va.special().unk, 100);
  EXPECT_LE(va.size(), 180);
  EXPECT_NE(va.find("the"), -1);  // frequent words become whole pieces
  const Tokenizer t(va);
  for (const auto& l : text)
    for (int32_t id : t.tokenize(l)) EXPECT_NE(id, 100) << l;  // every character is covered
}

// Random bytes (mostly ill-formed UTF-8) through every byte-level reader: errors, never a crash.
TEST(BertTokenizer, RandomBytesNeverCrash) {
  const Vocab v = Vocab::parse(smallVocabText({"a", "##a", "\xC3\xA9"}), "test");
  const Tokenizer t(v);
  uint64_t state = 42;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes(static_cast<size_t>(trial % 97), '\0');
    for (char& c : bytes) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<char>(state >> 56);
    }
    for (int32_t id : t.tokenize(bytes)) ASSERT_TRUE(id >= 0 && id < v.size());
    try {
      Vocab::parse(bytes, "fuzz");
    } catch (const DatasetError&) {
    }
  }
}

}  // namespace
}  // namespace datasets::bert
