// placeFirstFit against the plain first fit it replaced (every live range scanned per
// placement): the same offsets and extent on random lifetimes and sizes, zero-size ranges and
// ties of start included, and no two ranges live at once overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ipu_backend/compiler/first_fit.h"

namespace ipu {
namespace {

i64 plainFirstFit(std::vector<LiveRange>& ranges, i64 alignment) {
  auto rounded = [alignment](i64 b) { return (b + alignment - 1) / alignment * alignment; };
  std::vector<LiveRange*> order;
  for (LiveRange& r : ranges) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [](const LiveRange* a, const LiveRange* b) { return a->start < b->start; });
  std::vector<LiveRange*> active;
  i64 extent = 0;
  for (LiveRange* r : order) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](const LiveRange* a) { return a->end < r->start; }),
                 active.end());
    const i64 size = rounded(r->bytes);
    i64 pos = 0;
    for (const LiveRange* a : active) {
      if (a->offset - pos >= size) break;
      pos = std::max(pos, a->offset + rounded(a->bytes));
    }
    r->offset = pos;
    extent = std::max(extent, pos + size);
    active.insert(std::upper_bound(
                      active.begin(), active.end(), r,
                      [](const LiveRange* a, const LiveRange* b) { return a->offset < b->offset; }),
                  r);
  }
  return extent;
}

TEST(FirstFit, SameOffsetsAsThePlainScanAndNoOverlap) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    const int n = 200 + static_cast<int>(seed) * 150;  // up to ~3,000: many chunks
    std::vector<LiveRange> ranges;
    for (int i = 0; i < n; ++i) {
      const i64 start = std::uniform_int_distribution<i64>(0, n / 4)(rng);
      const bool longLived = rng() % 4 == 0;  // activations: forward to backward
      const i64 len = longLived ? std::uniform_int_distribution<i64>(10, n / 2)(rng)
                                : std::uniform_int_distribution<i64>(0, 3)(rng);
      const i64 bytes = rng() % 20 == 0 ? 0 : std::uniform_int_distribution<i64>(1, 5000)(rng);
      ranges.push_back({start, start + len, bytes, -1});
    }
    std::vector<LiveRange> plain = ranges;
    const i64 alignment = seed % 2 ? 8 : 64;
    EXPECT_EQ(placeFirstFit(ranges, alignment), plainFirstFit(plain, alignment)) << seed;
    for (size_t i = 0; i < ranges.size(); ++i)
      ASSERT_EQ(ranges[i].offset, plain[i].offset) << "seed " << seed << " range " << i;
    for (size_t i = 0; i < ranges.size(); ++i)
      for (size_t j = i + 1; j < ranges.size(); ++j) {
        const LiveRange &a = ranges[i], &b = ranges[j];
        if (a.bytes == 0 || b.bytes == 0 || a.end < b.start || b.end < a.start) continue;
        ASSERT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
            << "seed " << seed << ": ranges " << i << " and " << j << " overlap";
      }
  }
}

// Runs of ranges with one lifetime and size (a tile's slices of one buffer, its equal gathers
// of one compute set) are placed in one walk over the gaps: still the offsets of one at a time.
TEST(FirstFit, RunsOfEqualRangesGetTheOffsetsOfOneAtATime) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed + 100);
    const int n = 300 + static_cast<int>(seed) * 100;
    std::vector<LiveRange> ranges;
    while (static_cast<int>(ranges.size()) < n) {
      // Odd seeds: starts far apart, so the placement sorts them by comparison, not counting.
      const i64 start = std::uniform_int_distribution<i64>(0, n / 8)(rng) * (seed % 2 ? 100000 : 1);
      const i64 len = (rng() % 3 == 0 ? std::uniform_int_distribution<i64>(5, n / 4)(rng)
                                      : std::uniform_int_distribution<i64>(0, 2)(rng)) *
                      (seed % 2 ? 100000 : 1);
      const i64 bytes = rng() % 20 == 0 ? 0 : std::uniform_int_distribution<i64>(1, 3000)(rng);
      const int run = 1 + static_cast<int>(rng() % 12);
      for (int k = 0; k < run; ++k)  // a byte more or less: some round alike, some do not
        ranges.push_back(
            {start, start + len, bytes == 0 ? 0 : bytes + static_cast<i64>(k % 2), -1});
    }
    std::vector<LiveRange> plain = ranges;
    EXPECT_EQ(placeFirstFit(ranges, 8), plainFirstFit(plain, 8)) << seed;
    for (size_t i = 0; i < ranges.size(); ++i)
      ASSERT_EQ(ranges[i].offset, plain[i].offset) << "seed " << seed << " range " << i;
  }
}

// One-step ranges (a tile's gather buffers of a compute set) held apart from the others get the
// offsets they get listed among them: after the ranges that start at their step, before later
// starts.
TEST(FirstFit, OneStepRangesGetTheOffsetsOfTheListedRanges) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed + 200);
    const int n = 200 + static_cast<int>(seed) * 100, steps = n / 6;
    std::vector<LiveRange> ranges;
    for (int i = 0; i < n; ++i) {
      const i64 start = std::uniform_int_distribution<i64>(-1, steps)(rng);
      const i64 len = rng() % 3 == 0 ? std::uniform_int_distribution<i64>(2, steps / 2)(rng)
                                     : std::uniform_int_distribution<i64>(0, 2)(rng);
      const i64 bytes = rng() % 20 == 0 ? 0 : std::uniform_int_distribution<i64>(1, 3000)(rng);
      ranges.push_back({start, start + len, bytes, -1});
    }
    OneStepRanges oneStep;
    std::vector<LiveRange> listed = ranges;  // the same ranges, the one-step ones listed last
    oneStep.begin.push_back(0);
    for (i64 step = -2; step <= steps + 2; ++step) {
      if (rng() % 3 == 0) continue;  // steps without one-step ranges, some without any
      const int count = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < count; ++k) {  // runs of a size, and sizes that round alike
        const i64 bytes = rng() % 3 == 0 ? 64 + static_cast<i64>(k % 2)
                                         : std::uniform_int_distribution<i64>(1, 2000)(rng);
        oneStep.bytes.push_back(bytes);
        listed.push_back({step, step, bytes, -1});
      }
      oneStep.steps.push_back(step);
      oneStep.begin.push_back(oneStep.bytes.size());
    }
    const i64 extent = placeFirstFit(ranges, 8, &oneStep);
    EXPECT_EQ(extent, plainFirstFit(listed, 8)) << seed;
    for (size_t i = 0; i < ranges.size(); ++i)
      ASSERT_EQ(ranges[i].offset, listed[i].offset) << "seed " << seed << " range " << i;
    for (size_t k = 0; k < oneStep.bytes.size(); ++k)
      ASSERT_EQ(oneStep.offsets[k], listed[ranges.size() + k].offset)
          << "seed " << seed << " one-step range " << k;
  }
}

}  // namespace
}  // namespace ipu
