// prepare_bert_data end to end: the default corpus (WordNet, trained vocabulary) to shards that
// the reader streams back; the tokenize subcommand; errors as exit codes with clear messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "datasets/bert/shards.h"
#include "datasets/bert/vocab.h"
#include "tests/datasets/bert/test_util.h"

namespace datasets::bert {
namespace {

using namespace testing;

struct CliRun {
  int status;
  std::string output;  // stdout and stderr
};

CliRun run(const std::string& args) {
  const std::string cmd = std::string(PREPARE_BERT_DATA) + " " + args + " 2>&1";
  CliRun r{-1, {}};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(BertCli, DefaultCorpusToShardsAndBack) {
  if (!std::filesystem::exists("/usr/share/wordnet/data.noun"))
    GTEST_SKIP() << "SKIPPED LOUDLY: wordnet-base not installed (scripts/setup.sh installs it)";
  TempDir dir;
  const std::string out = dir.file("out");
  const CliRun r = run("--output " + out + " --vocab-size 2000 --records-per-shard 20000 --seed 7");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("packing (SPFHP, at most 3 per pack)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("efficiency"), std::string::npos);
  const Vocab vocab = Vocab::load(out + "/vocab.txt");
  EXPECT_EQ(vocab.size(), 2000);
  std::vector<std::string> shards;
  for (const auto& e : std::filesystem::directory_iterator(out))
    if (e.path().extension() == ".bertpak") shards.push_back(e.path().string());
  std::sort(shards.begin(), shards.end());
  ASSERT_GE(shards.size(), 2u);
  uint64_t records = 0;
  for (const auto& s : shards) {
    verifyShard(s);
    records += readShardHeader(s).recordCount;
  }
  ShardReader reader(shards, {.seed = 1});
  reader.startEpoch(0);
  EXPECT_EQ(reader.recordsPerEpoch(), records);
  PackedRecord rec;
  uint64_t n = 0, sequences = 0;
  while (reader.next(rec)) {
    ++n;
    for (uint8_t w : rec.nspWeights) sequences += w;
    EXPECT_EQ(rec.inputIds[rec.clsPositions[0]], vocab.special().cls);
  }
  EXPECT_EQ(n, records);
  EXPECT_GT(sequences, records);  // packing put more than one sequence in some packs
  // Same seed, same bytes (with the vocabulary just trained: VocabTrainer's own test covers its
  // determinism).
  const std::string out2 = dir.file("out2");
  ASSERT_EQ(
      run("--output " + out2 + " --vocab " + out + "/vocab.txt --records-per-shard 20000 --seed 7")
          .status,
      0);
  for (const auto& s : shards)
    EXPECT_EQ(readText(s), readText(out2 + "/" + std::filesystem::path(s).filename().string()))
        << s;
}

TEST(BertCli, TokenizePrintsOneLineOfIdsPerInputLine) {
  const std::string f = BERT_FIXTURES;
  const CliRun r = run("tokenize --vocab " + f + "/vocab_small.txt " + f + "/hard_cases.txt");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, readText(f + "/hard_cases.vocab_small.ids"));
}

TEST(BertCli, BadInputIsAClearErrorNotACrash) {
  TempDir dir;
  const std::string f = BERT_FIXTURES;
  writeText(dir.file("bad.txt"), "fine line\nbad \xC3\x28 line\n");
  CliRun r = run("--output " + dir.file("o") + " --vocab " + f + "/vocab_small.txt --input " +
                 dir.file("bad.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("bad.txt:2: invalid UTF-8 at byte offset 14"), std::string::npos)
      << r.output;
  std::string vocab = readText(f + "/vocab_small.txt") + "the\n";
  writeText(dir.file("dup.txt"), vocab);
  r = run("tokenize --vocab " + dir.file("dup.txt") + " " + f + "/hard_cases.txt");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("duplicate token 'the'"), std::string::npos) << r.output;
  writeText(dir.file("empty.txt"), "\n\n\n");
  r = run("--output " + dir.file("o") + " --vocab " + f + "/vocab_small.txt --input " +
          dir.file("empty.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no documents"), std::string::npos) << r.output;
  r = run("--output " + dir.file("o") + " --input /nonexistent/folder");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/folder: no such file or directory"), std::string::npos);
}

}  // namespace
}  // namespace datasets::bert
