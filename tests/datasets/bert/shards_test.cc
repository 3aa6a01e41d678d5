#include "datasets/bert/shards.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "datasets/error.h"
#include "datasets/rng.h"
#include "tests/datasets/bert/test_util.h"

namespace datasets::bert {
namespace {

using namespace testing;

const PackedLayout kLayout{32, 6, 3};

PackedRecord record(int i) {
  Instance a{{101, 1000 + i, 102, 7, 102}, 3, i % 2 == 1, {1}, {1000 + i}};
  return packRecord({&a}, kLayout);
}

std::vector<std::string> writeShards(const TempDir& dir, int shards, int perShard) {
  std::vector<std::string> paths;
  int k = 0;
  for (int s = 0; s < shards; ++s) {
    paths.push_back(dir.file("part-" + std::to_string(s) + ".bertpak"));
    ShardWriter w(paths.back(), kLayout, 30522);
    for (int r = 0; r < perShard; ++r) w.write(record(k++));
  }
  return paths;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(BertShards, RoundTripAndSlicesPerProcess) {
  TempDir dir;
  const auto paths = writeShards(dir, 3, 41);  // 123 records
  for (const auto& p : paths) verifyShard(p);
  // 2 processes x local batch 4: 15 global batches of 8 (3 records dropped).
  std::multiset<int32_t> seen;
  std::vector<std::vector<int32_t>> firstEpoch(2);
  for (int proc = 0; proc < 2; ++proc) {
    ShardReader reader(
        paths,
        {.seed = 9, .processIndex = proc, .processCount = 2, .localBatch = 4, .prefetch = 5});
    reader.startEpoch(0);
    EXPECT_EQ(reader.recordsPerEpoch(), 60u);
    PackedRecord r;
    while (reader.next(r)) {
      EXPECT_EQ(r.maskedIds[0], r.inputIds[1]);
      seen.insert(r.inputIds[1]);
      firstEpoch[static_cast<size_t>(proc)].push_back(r.inputIds[1]);
    }
    reader.startEpoch(1);
    std::vector<int32_t> second;
    while (reader.next(r)) second.push_back(r.inputIds[1]);
    EXPECT_NE(second, firstEpoch[static_cast<size_t>(proc)]) << "a new order each epoch";
    reader.startEpoch(0);
    std::vector<int32_t> again;
    while (reader.next(r)) again.push_back(r.inputIds[1]);
    EXPECT_EQ(again, firstEpoch[static_cast<size_t>(proc)]) << "seeded: same order";
  }
  {  // Stopped mid-epoch (producer blocked on a full queue): the destructor must not hang.
    ShardReader reader(paths, {.prefetch = 1});
    reader.startEpoch(0);
    PackedRecord r;
    ASSERT_TRUE(reader.next(r));
    EXPECT_THROW(ShardReader(paths, {.processIndex = 2, .processCount = 2}), DatasetError);
  }
  EXPECT_EQ(seen.size(), 120u);
  EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), 120u) << "no record twice";
  EXPECT_NE(errorOf([] { parseShard({}, "empty"); }).find("shard empty: truncated header"),
            std::string::npos);
}

TEST(BertShards, CorruptionAndTruncationAreNamedErrors) {
  TempDir dir;
  const auto paths = writeShards(dir, 1, 10);
  const std::string good = readText(paths[0]);
  const size_t stride = recordBytesFor(kLayout) + 4;
  // A flipped byte in record 7.
  std::string bad = good;
  bad[kShardHeaderBytes + 7 * stride + 3] ^= 0x20;
  writeText(paths[0], bad);
  EXPECT_NE(errorOf([&] { verifyShard(paths[0]); }).find("record 7: checksum mismatch"),
            std::string::npos);
  {
    ShardReader reader(paths, {});
    reader.startEpoch(0);
    PackedRecord r;
    EXPECT_NE(errorOf([&] {
                while (reader.next(r)) {
                }
              }).find("record 7: checksum mismatch"),
              std::string::npos);
  }
  // Truncated in the middle of record 4.
  writeText(paths[0], good.substr(0, kShardHeaderBytes + 4 * stride + 10));
  EXPECT_NE(errorOf([&] { ShardReader reader(paths, {}); }).find("truncated: record 4"),
            std::string::npos);
  // Header damage.
  bad = good;
  bad[20] ^= 1;
  writeText(paths[0], bad);
  EXPECT_NE(errorOf([&] { verifyShard(paths[0]); }).find("header checksum mismatch"),
            std::string::npos);
  writeText(paths[0], "not a shard at all, but long enough to hold a header of sixty-four bytes..");
  EXPECT_NE(errorOf([&] { verifyShard(paths[0]); }).find("bad magic number"), std::string::npos);
  // Two records swapped: each intact, the shard checksum catches it.
  bad = good;
  std::swap_ranges(bad.begin() + kShardHeaderBytes, bad.begin() + kShardHeaderBytes + stride,
                   bad.begin() + kShardHeaderBytes + stride);
  writeText(paths[0], bad);
  EXPECT_NE(errorOf([&] { verifyShard(paths[0]); }).find("payload checksum mismatch"),
            std::string::npos)
      << errorOf([&] { verifyShard(paths[0]); });
}

TEST(BertShards, ParsersSurviveRandomBytes) {
  TempDir dir;
  const auto paths = writeShards(dir, 1, 3);
  const std::string good = readText(paths[0]);
  Rng rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes =
        good.substr(0, static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(good.size()))));
    for (int k = 0; k < 3 && !bytes.empty(); ++k)
      bytes[static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(bytes.size()) - 1))] =
          static_cast<char>(rng.next());
    try {
      parseShard(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "fuzz");
    } catch (const DatasetError&) {
    }
  }
}

}  // namespace
}  // namespace datasets::bert
