#include "datasets/bert/packing.h"

#include <gtest/gtest.h>

#include <map>

#include "datasets/error.h"
#include "datasets/rng.h"

namespace datasets::bert {
namespace {

// Property test: random length histograms (skewed like real data, and uniform).
TEST(BertPacking, SpfhpPacksEverySequenceOnceWithinLimits) {
  Rng rng(2026);
  for (int trial = 0; trial < 200; ++trial) {
    const int L = static_cast<int>(rng.uniformInt(8, 512));
    const int maxPerPack = static_cast<int>(rng.uniformInt(1, 6));
    std::vector<int64_t> hist(static_cast<size_t>(L) + 1);
    const int64_t n = rng.uniformInt(0, 3000);
    const bool skewed = trial % 2 == 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t l = skewed && rng.bernoulli(0.5) ? L : rng.uniformInt(1, L);
      ++hist[static_cast<size_t>(l)];
    }
    const auto strategies = packSpfhp(hist, L, maxPerPack);
    std::vector<int64_t> used(hist.size());
    int64_t packs = 0;
    for (const auto& s : strategies) {
      ASSERT_GT(s.count, 0);
      ASSERT_LE(static_cast<int>(s.lengths.size()), maxPerPack);
      int sum = 0;
      for (int32_t l : s.lengths) {
        sum += l;
        used[static_cast<size_t>(l)] += s.count;
      }
      ASSERT_LE(sum, L) << "pack exceeds the length";
      packs += s.count;
    }
    ASSERT_EQ(used, hist) << "every sequence exactly once (trial " << trial << ")";
    const auto st = packingStats(strategies, L);
    EXPECT_EQ(st.packs, packs);
    if (n > 0) {
      EXPECT_GE(st.efficiency + 1e-12, st.paddingEfficiency);
    }
    // Assigning real sequences: indices 0..n-1 each once.
    std::vector<int32_t> lengths;
    for (int l = 1; l <= L; ++l)
      for (int64_t k = 0; k < hist[static_cast<size_t>(l)]; ++k) lengths.push_back(l);
    const auto assigned = assignPacks(strategies, lengths);
    std::vector<int> seen(lengths.size());
    for (const auto& pack : assigned) {
      int sum = 0;
      for (int32_t i : pack) {
        ++seen[static_cast<size_t>(i)];
        sum += lengths[static_cast<size_t>(i)];
      }
      ASSERT_LE(sum, L);
    }
    for (int s : seen) ASSERT_EQ(s, 1);
  }
}

TEST(BertPacking, ShortSequencesPackWell) {
  std::vector<int64_t> hist(129);
  hist[40] = 300;
  hist[128] = 100;
  const auto st = packingStats(packSpfhp(hist, 128, 3), 128);
  EXPECT_EQ(st.packs, 200);  // 3 x 40 per pack
  EXPECT_NEAR(st.speedupOverPadding, 2.0, 1e-12);
}

TEST(BertPacking, RecordLayout) {
  Instance a{{101, 5, 6, 102, 7, 102}, 4, true, {2, 4}, {6, 7}};
  Instance b{{101, 8, 102, 9, 102}, 3, false, {1}, {8}};
  const PackedLayout layout{16, 5, 3};
  const PackedRecord r = packRecord({&a, &b}, layout);
  EXPECT_EQ(r.inputIds,
            (std::vector<int32_t>{101, 5, 6, 102, 7, 102, 101, 8, 102, 9, 102, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r.inputMask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r.segmentIds, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r.positions, (std::vector<uint16_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r.maskedPositions, (std::vector<uint16_t>{2, 4, 7, 0, 0}));
  EXPECT_EQ(r.maskedIds, (std::vector<int32_t>{6, 7, 8, 0, 0}));
  EXPECT_EQ(r.maskedWeights, (std::vector<uint8_t>{1, 1, 2, 0, 0}));
  EXPECT_EQ(r.clsPositions, (std::vector<uint16_t>{0, 6, 0}));
  EXPECT_EQ(r.nspLabels, (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(r.nspWeights, (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_THROW(packRecord({&a, &b, &a, &b}, layout), DatasetError);
  EXPECT_EQ(PackedLayout::slotsFor(512, 0.15, 3, 76), 78);
}

}  // namespace
}  // namespace datasets::bert
