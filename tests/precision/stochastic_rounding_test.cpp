// Stochastic rounding: determinism and split independence, neighbours only, exact
// pass-through, unbiasedness (means converge to x where RNE's stay put), overflow rule, and the
// sum-of-small-increments effect that makes f16 master weights trainable.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "ipu_backend/precision/stochastic_rounding.h"
#include "tests/precision/reference.h"

namespace ipu::precision {
namespace {

std::vector<float> randomFloats(i64 n, std::uint32_t seed, float scale = 10.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

TEST(StochasticRounding, DeterministicForSeedAndSeedMatters) {
  const auto x = randomFloats(10007, 1);
  std::vector<f16> a(x.size()), b(x.size()), c(x.size());
  stochasticRoundToF16(x.data(), a.data(), static_cast<i64>(x.size()), 42, 0);
  stochasticRoundToF16(x.data(), b.data(), static_cast<i64>(x.size()), 42, 0);
  stochasticRoundToF16(x.data(), c.data(), static_cast<i64>(x.size()), 43, 0);
  EXPECT_EQ(a, b);
  i64 diff = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += a[i] != c[i];
  EXPECT_GT(diff, static_cast<i64>(x.size()) / 10);  // ~1/3 expected for random data

  std::vector<bf16> d(x.size()), e(x.size()), g(x.size());
  stochasticRoundToBF16(x.data(), d.data(), static_cast<i64>(x.size()), 42, 0);
  stochasticRoundToBF16(x.data(), e.data(), static_cast<i64>(x.size()), 42, 0);
  stochasticRoundToBF16(x.data(), g.data(), static_cast<i64>(x.size()), 43, 0);
  EXPECT_EQ(d, e);
  diff = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += d[i] != g[i];
  EXPECT_GT(diff, static_cast<i64>(x.size()) / 10);
}

TEST(StochasticRounding, IndependentOfSplit) {
  const auto x = randomFloats(4099, 2);
  const i64 n = static_cast<i64>(x.size());
  std::vector<f16> whole(n);
  std::vector<bf16> wholeB(n);
  stochasticRoundToF16(x.data(), whole.data(), n, 7, 0);
  stochasticRoundToBF16(x.data(), wholeB.data(), n, 7, 0);
  for (i64 k : {1, 7, 8, 1000, 2049, 4098}) {
    std::vector<f16> parts(n);
    std::vector<bf16> partsB(n);
    stochasticRoundToF16(x.data(), parts.data(), k, 7, 0);
    stochasticRoundToF16(x.data() + k, parts.data() + k, n - k, 7, k);
    stochasticRoundToBF16(x.data(), partsB.data(), k, 7, 0);
    stochasticRoundToBF16(x.data() + k, partsB.data() + k, n - k, 7, k);
    EXPECT_EQ(parts, whole) << "split at " << k;
    EXPECT_EQ(partsB, wholeB) << "split at " << k;
  }
  // The f32-emulation variant rounds identically.
  std::vector<float> q(n);
  stochasticQuantizeToF16(x.data(), q.data(), n, 7, 0);
  for (i64 i = 0; i < n; ++i) ASSERT_EQ(q[i], toFloat(whole[i]));
  stochasticQuantizeToBF16(x.data(), q.data(), n, 7, 0);
  for (i64 i = 0; i < n; ++i) ASSERT_EQ(q[i], toFloat(wholeB[i]));
}

// The bulk loops (block fast path + fix-ups) equal the scalar core fed srRandomBits, for data
// mixing every magnitude class inside the same blocks.
TEST(StochasticRounding, BulkEqualsScalarCore) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<std::uint32_t> bitsD;
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) {
    std::uint32_t b = bitsD(rng);
    if (i % 3 == 0) b = (b & 0x80000000u) | (0x30000000u + (b & 0x1fffffffu) % 0x18000000u);
    x[i] = std::bit_cast<float>(b);  // NaN, Inf, huge, f16-subnormal, f32-subnormal, normal
  }
  size_t at = 4001;
  for (float f : {65504.0f, 65520.0f, 65535.0f, 65536.0f, 6.1e-5f, 6.2e-5f}) x[at += 7] = f;
  const i64 n = static_cast<i64>(x.size());
  std::vector<f16> h(n);
  std::vector<bf16> b(n);
  stochasticRoundToF16(x.data(), h.data(), n, 77, 1000);
  stochasticRoundToBF16(x.data(), b.data(), n, 77, 1000);
  for (i64 i = 0; i < n; ++i) {
    ASSERT_EQ(h[i].bits, stochasticRoundToF16(x[i], srRandomBits(77, 1000 + i)).bits) << i;
    ASSERT_EQ(b[i].bits, stochasticRoundToBF16(x[i], srRandomBits(77, 1000 + i)).bits) << i;
  }
}

// Result is always one of the two neighbours (per the reference ladder), for every magnitude
// class: subnormal, normal, near max, beyond max.
template <typename H>
void expectNeighbours(const testing::Ladder& ladder, const std::vector<float>& xs,
                      H (*sr)(float, std::uint64_t), float (*widen)(H), std::uint16_t infBits) {
  std::mt19937_64 rng(3);
  for (float x : xs) {
    const long double a = std::fabs(static_cast<long double>(x));
    const H h = sr(x, rng());
    ASSERT_EQ(std::signbit(widen(h)), std::signbit(x)) << x;
    if (a >= ladder.value(ladder.size() - 1)) {
      ASSERT_EQ(h.bits & 0x7fff, infBits) << x;
      continue;
    }
    size_t lo, hi;
    ladder.neighbours(a, lo, hi);
    const std::uint16_t m = h.bits & 0x7fff;
    ASSERT_TRUE(m == ladder.bits(lo) || m == ladder.bits(hi)) << x << " -> " << h.bits;
  }
}

TEST(StochasticRounding, AlwaysANeighbour) {
  std::vector<float> xs;
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> bitsD(0, 0x7f7fffff);  // all finite magnitudes
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bitsD(rng));
    xs.push_back(i % 2 ? f : -f);
  }
  for (float f : {65504.0f, 65505.0f, 65535.9f, 65536.0f, 1e-8f, 3e-8f, 6.1e-5f}) xs.push_back(f);
  const testing::Ladder f16L(testing::kF16), bf16L(testing::kBF16);
  expectNeighbours<f16>(f16L, xs, stochasticRoundToF16, toFloat, 0x7c00);
  expectNeighbours<bf16>(bf16L, xs, stochasticRoundToBF16, toFloat, 0x7f80);
}

TEST(StochasticRounding, RepresentableAndSpecialValuesPassThrough) {
  std::mt19937_64 rng(9);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h = f16::fromBits(static_cast<std::uint16_t>(b));
    const bf16 g = bf16::fromBits(static_cast<std::uint16_t>(b));
    for (int k = 0; k < 4; ++k) {
      const f16 r = stochasticRoundToF16(toFloat(h), rng());
      const bf16 s = stochasticRoundToBF16(toFloat(g), rng());
      if (isNaN(h)) {
        ASSERT_TRUE(isNaN(r));
      } else {
        ASSERT_EQ(r.bits, h.bits) << std::hex << b;
      }
      if (isNaN(g)) {
        ASSERT_EQ(s.bits, g.bits | 0x40);
      } else {
        ASSERT_EQ(s.bits, g.bits) << std::hex << b;
      }
    }
  }
}

// Mean of n stochastically rounded copies of x (each copy draws its own random bits).
double srMeanF16(float x, i64 n, std::uint64_t seed) {
  std::vector<float> in(n, x);
  std::vector<f16> out(n);
  stochasticRoundToF16(in.data(), out.data(), n, seed, 0);
  double sum = 0;
  for (const f16 h : out) sum += toFloat(h);
  return sum / static_cast<double>(n);
}

// Standard deviation of one SR draw of x between its neighbours lo < x < hi.
double drawStdDev(float x, float lo, float hi) {
  const double p = (static_cast<double>(x) - lo) / (static_cast<double>(hi) - lo);
  return (static_cast<double>(hi) - lo) * std::sqrt(p * (1 - p));
}

TEST(StochasticRounding, UnbiasedWhereNearestIsNot) {
  struct Case {
    float x, lo, hi;
  };
  const Case cases[] = {
      {1.0f + 0x1p-13f, 1.0f, 1.0f + 0x1p-10f},         // 1/8 ulp: RNE gives 1.0
      {-(1.0f + 0x1p-13f), -(1.0f + 0x1p-10f), -1.0f},  // sign symmetric
      {1.0f + 0x1.8p-11f, 1.0f, 1.0f + 0x1p-10f},       // 3/4 ulp: RNE rounds up
      {0x1.4p-25f, 0.0f, 0x1p-24f},                     // f16 subnormal range, p = 0.625
      {0x1p-30f, 0.0f, 0x1p-24f},                       // p = 1/64
      {60000.3f, 60000.0f, 60032.0f},                   // top binade, ulp 32
  };
  constexpr i64 kN = 1'000'000;
  for (const Case& c : cases) {
    const float lo = std::min(c.lo, c.hi), hi = std::max(c.lo, c.hi);
    const double mean = srMeanF16(c.x, kN, 11);
    const double se = drawStdDev(c.x, lo, hi) / std::sqrt(static_cast<double>(kN));
    EXPECT_NEAR(mean, c.x, 5 * se) << c.x;
    // RNE's mean is its single rounded value, off by a large multiple of the SR error.
    const double rne = toFloat(toF16(c.x));
    EXPECT_GT(std::fabs(rne - c.x), 50 * se) << c.x;
  }
}

TEST(StochasticRounding, BF16Unbiased) {
  constexpr i64 kN = 1'000'000;
  const float x = 1.0f + 0x1p-10f;  // bf16 ulp at 1 is 2^-7: p = 1/8, RNE -> 1.0
  std::vector<float> in(kN, x);
  std::vector<bf16> out(kN);
  stochasticRoundToBF16(in.data(), out.data(), kN, 5, 0);
  double sum = 0;
  for (const bf16 h : out) sum += toFloat(h);
  const double se = drawStdDev(x, 1.0f, 1.0f + 0x1p-7f) / std::sqrt(static_cast<double>(kN));
  EXPECT_NEAR(sum / kN, x, 5 * se);
  EXPECT_EQ(toFloat(toBF16(x)), 1.0f);
}

TEST(StochasticRounding, BeyondMaxFiniteRule) {
  constexpr i64 kN = 100000;
  auto infFraction = [](float x) {
    std::vector<float> in(kN, x);
    std::vector<f16> out(kN);
    stochasticRoundToF16(in.data(), out.data(), kN, 1, 0);
    i64 inf = 0;
    for (const f16 h : out) {
      EXPECT_TRUE(h.bits == 0x7bff || h.bits == 0x7c00) << h.bits;
      inf += isInf(h);
    }
    return static_cast<double>(inf) / kN;
  };
  EXPECT_EQ(infFraction(65504.0f), 0.0);
  EXPECT_NEAR(infFraction(65520.0f), 0.5, 0.01);  // halfway to the would-be 65536
  EXPECT_NEAR(infFraction(65528.0f), 0.75, 0.01);
  EXPECT_EQ(infFraction(65536.0f), 1.0);
  EXPECT_EQ(stochasticRoundToF16(-1e9f, 0).bits, 0xfc00);
  EXPECT_EQ(stochasticRoundToF16(INFINITY, ~0ull).bits, 0x7c00);
  EXPECT_EQ(stochasticRoundToBF16(std::bit_cast<float>(0x7f7fffffu), ~0ull).bits, 0x7f80);
  EXPECT_EQ(stochasticRoundToBF16(std::bit_cast<float>(0x7f7fffffu), 0).bits, 0x7f7f);
}

// Adding 1e-4 ten thousand times to 1.0 with an f16 accumulator: each increment is ~0.1 ulp,
// so RNE discards every one, while SR's expected sum is the exact 2.0.
TEST(StochasticRounding, SumOfSmallIncrements) {
  f16 rne = toF16(1.0f), sr = toF16(1.0f);
  for (i64 step = 0; step < 10000; ++step) {
    rne = toF16(toFloat(rne) + 1e-4f);
    sr = stochasticRoundToF16(toFloat(sr) + 1e-4f, srRandomBits(2024, step));
  }
  EXPECT_EQ(toFloat(rne), 1.0f);
  EXPECT_NEAR(toFloat(sr), 2.0f, 0.1f);  // sd ~0.03
}

TEST(StochasticRounding, RandomBitsLookUniform) {
  // Cheap sanity on the generator: each of the top 16 bits is set about half the time.
  constexpr i64 kN = 200000;
  int counts[16] = {};
  for (i64 i = 0; i < kN; ++i) {
    const std::uint64_t r = srRandomBits(99, i);
    for (int b = 0; b < 16; ++b) counts[b] += (r >> (63 - b)) & 1;
  }
  for (int b = 0; b < 16; ++b) EXPECT_NEAR(counts[b], kN / 2, 5 * std::sqrt(kN / 4.0)) << b;
  EXPECT_NE(deriveSeed(1, 0), deriveSeed(1, 1));
  EXPECT_NE(deriveSeed(1, 0), deriveSeed(2, 0));
}

}  // namespace
}  // namespace ipu::precision
