#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "ipu_backend/precision/loss_scaling.h"

namespace ipu::precision {
namespace {

TEST(LossScaler, StaticKeepsScaleAndSkipsNonFiniteSteps) {
  LossScaler s(LossScalingConfig::fixed(128.0f));
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_FALSE(s.lastReport().applied);
  EXPECT_TRUE(s.lastReport().overflow);
  EXPECT_FALSE(s.lastReport().scaleChanged);
  for (int i = 0; i < 5000; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 128.0f);  // never grows
  EXPECT_EQ(s.steps(), 5002);
  EXPECT_EQ(s.skippedSteps(), 1);
  EXPECT_EQ(s.overflowEvents(), 1);
  EXPECT_EQ(s.stepsSinceLastOverflow(), 5000);
  EXPECT_EQ(s.inverseScale(), 1.0f / 128);
}

TEST(LossScaler, StaticCanApplyOverflowingSteps) {
  LossScalingConfig c = LossScalingConfig::fixed(128.0f);
  c.skipNonFiniteSteps = false;
  LossScaler s(c);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.overflowEvents(), 1);
  EXPECT_EQ(s.skippedSteps(), 0);
}

TEST(LossScaler, NoneIsScaleOne) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(LossScaler, DynamicBacksOffSkipsAndGrows) {
  LossScaler s(LossScalingConfig::dynamic(1024.0f, 3));
  EXPECT_FALSE(s.update(true));  // step 0 overflows
  const LossScaleStepReport r = s.lastReport();
  EXPECT_EQ(r.step, 0);
  EXPECT_EQ(r.scaleUsed, 1024.0f);
  EXPECT_EQ(r.nextScale, 512.0f);
  EXPECT_TRUE(r.scaleChanged);
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.stepsSinceLastOverflow(), 2);
  EXPECT_TRUE(s.update(false));  // third clean step: grow
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.lastReport().scaleChanged);
  EXPECT_EQ(s.lastReport().scaleUsed, 512.0f);
  // An overflow resets the growth count.
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.steps(), 10);
  EXPECT_EQ(s.skippedSteps(), 2);
  EXPECT_EQ(s.overflowEvents(), 2);
  EXPECT_EQ(s.stepsSinceLastOverflow(), 3);
}

TEST(LossScaler, DynamicRespectsMinAndMax) {
  LossScalingConfig c = LossScalingConfig::dynamic(4.0f, 1);
  c.minScale = 2.0f;
  c.maxScale = 16.0f;
  LossScaler s(c);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0f);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0f);  // clamped at min
  EXPECT_FALSE(s.lastReport().scaleChanged);
  EXPECT_FALSE(s.lastReport().applied);  // still skipped
  for (int i = 0; i < 10; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 16.0f);  // clamped at max
  // The initial scale is clamped too.
  c.scale = 1000.0f;
  EXPECT_EQ(LossScaler(c).scale(), 16.0f);
}

TEST(LossScaler, RejectsBadConfigs) {
  EXPECT_THROW(LossScaler(LossScalingConfig::fixed(0.0f)), std::invalid_argument);
  EXPECT_THROW(LossScaler(LossScalingConfig::fixed(INFINITY)), std::invalid_argument);
  LossScalingConfig c = LossScalingConfig::dynamic();
  c.growthInterval = 0;
  EXPECT_THROW(LossScaler{c}, std::invalid_argument);
  c = LossScalingConfig::dynamic();
  c.backoffFactor = 1.0f;
  EXPECT_THROW(LossScaler{c}, std::invalid_argument);
  c = LossScalingConfig::dynamic();
  c.minScale = 10;
  c.maxScale = 5;
  EXPECT_THROW(LossScaler{c}, std::invalid_argument);
}

TEST(AllFinite, DetectsInfAndNanAnywhere) {
  const float specials[] = {INFINITY, -INFINITY, NAN, -NAN,
                            std::numeric_limits<float>::signaling_NaN()};
  for (i64 n : {1, 2, 17, 1024, 1025, 5000}) {
    std::vector<float> g(n, 1.0f);
    g[0] = std::numeric_limits<float>::max();
    g[n - 1] = std::numeric_limits<float>::denorm_min();
    EXPECT_TRUE(allFinite(g.data(), n));
    for (float bad : specials)
      for (i64 pos : {i64{0}, n / 2, n - 1}) {
        std::vector<float> h = g;
        h[pos] = bad;
        EXPECT_FALSE(allFinite(h.data(), n)) << n << " " << pos;
        std::vector<f16> h16(n);
        toF16(h.data(), h16.data(), n);
        EXPECT_FALSE(allFinite(h16.data(), n));
        std::vector<bf16> hb(n);
        toBF16(h.data(), hb.data(), n);
        EXPECT_FALSE(allFinite(hb.data(), n));
      }
  }
  EXPECT_TRUE(allFinite(static_cast<const float*>(nullptr), 0));
  std::vector<f16> ok16(100, toF16(65504.0f));
  EXPECT_TRUE(allFinite(ok16.data(), 100));
}

TEST(AllFinite, ManyTensors) {
  std::vector<float> a(10, 1.0f), b(3000, 2.0f), c;
  std::vector<std::span<const float>> ts = {a, b, c};
  EXPECT_TRUE(allFinite(ts));
  b.back() = NAN;
  EXPECT_FALSE(allFinite(ts));
  std::vector<f16> h(5, toF16(1.0f)), k(7, toF16(1.0f));
  std::vector<std::span<const f16>> hs = {h, k};
  EXPECT_TRUE(allFinite(hs));
  k[0] = toF16(INFINITY);
  EXPECT_FALSE(allFinite(hs));
}

TEST(Unscale, F32AndF16) {
  std::vector<float> g = {128.0f, -256.0f, 1.0f, 0.0f};
  unscale(g.data(), 4, 128.0f);
  EXPECT_EQ(g, (std::vector<float>{1.0f, -2.0f, 1.0f / 128, 0.0f}));
  std::vector<f16> h(1001);
  for (size_t i = 0; i < h.size(); ++i) h[i] = toF16(static_cast<float>(i) - 500.0f);
  std::vector<f16> h2 = h;
  unscale(h2.data(), static_cast<i64>(h2.size()), 128.0f);
  std::vector<float> f(h.size());
  unscaleToF32(h.data(), f.data(), static_cast<i64>(h.size()), 128.0f);
  for (size_t i = 0; i < h.size(); ++i) {
    const float want = (static_cast<float>(i) - 500.0f) / 128.0f;
    EXPECT_EQ(toFloat(h2[i]), toFloat(toF16(want))) << i;
    EXPECT_EQ(f[i], want) << i;
  }
}

}  // namespace
}  // namespace ipu::precision
