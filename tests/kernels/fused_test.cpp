// Fused kernels against the reference kernels over whole tensors, including ResNet-like
// convolution shapes at small batch and batched / broadcast matmuls.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include <string>
#include <tuple>
#include <vector>

#include "ipu_backend/kernels/apply_update.h"
#include "ipu_backend/kernels/depthwise.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/fused_bf16.h"
#include "ipu_backend/kernels/lamb_update.h"
#include "ipu_backend/kernels/winograd.h"
#include "ipu_backend/precision/half.h"
#include "tests/kernels/test_util.h"

namespace ipu::kernels {
namespace {

using testing::all;
using testing::closeRel;
using testing::randomVec;
using testing::Vec;
using testing::win;

constexpr float kTol = 1e-4f;

class Fused : public ::testing::Test {
 protected:
  // Two threads so that the parallel paths (and oneDNN's threading) are exercised.
  void SetUp() override { fused::setNumThreads(2); }
};

struct ConvCase {
  std::string name;
  Conv2dShape s;
};

Conv2dShape conv(i64 n, i64 hw, i64 c, i64 k, i64 rs, i64 stride, i64 pad, i64 groups = 1,
                 i64 dil = 1) {
  Conv2dShape s;
  s.n = n, s.h = s.w = hw, s.c = c, s.k = k, s.r = s.s = rs;
  s.strideH = s.strideW = stride;
  s.padTop = s.padLeft = s.padBottom = s.padRight = pad;
  s.groups = groups;
  s.dilH = s.dilW = dil;
  return s;
}

std::vector<ConvCase> convCases() {
  std::vector<ConvCase> cases = {
      {"resnet3x3s1", conv(2, 14, 32, 32, 3, 1, 1)},
      {"resnet3x3s2", conv(2, 14, 32, 32, 3, 2, 1)},
      {"pointwise", conv(2, 14, 32, 64, 1, 1, 0)},            // few pixels: a matmul
      {"pointwiseManyPixels", conv(2, 50, 16, 24, 1, 1, 0)},  // 5,000 pixels: a convolution
      // 80,000 pixels: a convolution forward and for the weights, a matmul for the data gradient.
      {"pointwiseVeryManyPixels", conv(2, 200, 8, 16, 1, 1, 0)},
      // Few output pixels: im2col + matmul (strided 1x1 onto 1x1, 3x3 on 2x2 and 4x4 images).
      {"im2colPointwiseS2", conv(4, 2, 24, 40, 1, 2, 0)},
      {"im2col3x3s2", conv(4, 2, 16, 24, 3, 2, 1)},
      {"im2col3x3s1", conv(3, 4, 16, 24, 3, 1, 1)},
      {"pointwiseS2", conv(2, 14, 64, 32, 1, 2, 0)},  // subsample + matmul, all passes
      // 5,000 output pixels: a convolution forward, subsample + matmul for both gradients.
      {"pointwiseS2ManyPixels", conv(2, 100, 16, 24, 1, 2, 0)},
      {"stem7x7s2", conv(2, 32, 3, 16, 7, 2, 3)},
      {"depthwise", conv(2, 14, 32, 32, 3, 1, 1, 32)},
      {"depthwiseS2", conv(2, 14, 16, 16, 3, 2, 1, 16)},
      {"grouped", conv(2, 10, 16, 32, 3, 1, 1, 4)},
      // EfficientNet: depthwise 5x5 stride 2; G16 (16 channels per group), 3x3 and 5x5/2.
      {"depthwise5x5S2", conv(2, 13, 24, 24, 5, 2, 2, 24)},
      {"g16", conv(2, 10, 32, 32, 3, 1, 1, 2)},
      {"g16k5S2", conv(2, 11, 48, 48, 5, 2, 2, 3)},
      {"dilated", conv(2, 12, 8, 12, 3, 1, 2, 1, 2)},
      {"oddChannels", conv(1, 9, 5, 7, 3, 1, 1)},
      // Winograd where the CPU has it (3x3 stride 1, >= 64 channels; see ConvAlgorithm).
      {"winograd3x3s1", conv(2, 14, 64, 64, 3, 1, 1)},
      {"winograd3x3s1Rect", conv(1, 9, 128, 80, 3, 1, 1)},
  };
  Conv2dShape asym = conv(2, 11, 8, 12, 3, 2, 0);
  asym.padTop = 1, asym.padLeft = 0, asym.padBottom = 2, asym.padRight = 1;
  asym.w = 13, asym.strideW = 1, asym.dilH = 2;
  cases.push_back({"asymmetric", asym});
  return cases;
}

TEST_F(Fused, Conv2dAllPasses) {
  unsigned seed = 1;
  for (const auto& [name, s] : convCases()) {
    SCOPED_TRACE(name);
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
              dy = randomVec(s.outputElems(), seed++);
    Vec y(s.outputElems()), dx(s.inputElems()), dw(s.weightElems());
    fused::Conv2dForward fwd(s);
    fused::Conv2dBackwardData bwdData(s);
    fused::Conv2dBackwardFilter bwdFilter(s);
    for (int rep = 0; rep < 2; ++rep) {  // run() is repeatable
      fwd.run(x.data(), w.data(), y.data());
      bwdData.run(dy.data(), w.data(), dx.data());
      bwdFilter.run(x.data(), dy.data(), dw.data());
    }
    EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
    EXPECT_TRUE(closeRel(dx, testing::refConvBwdData(s, dy, w), kTol));
    EXPECT_TRUE(closeRel(dw, testing::refConvBwdFilter(s, x, dy), kTol));
  }
}

// The depthwise weight gradient runs our loop (oneDNN 2.6's generic kernel took its 5x5 ones),
// in f32 and bf16,
// against the reference: the 3x3 and 5x5 register kernels and any other size, channel counts
// with 8- and 1-lane tails, stride, padding on one side only, and enough rows for two threads'
// partial sums (Conv2dAllPasses' depthwise cases are below the parallel threshold).
TEST_F(Fused, DepthwiseWeightGradIsOursAndMatchesTheReference) {
  Conv2dShape asym = conv(2, 15, 20, 20, 5, 1, 2, 20);
  asym.s = 3, asym.w = 17, asym.padLeft = 0, asym.padRight = 2, asym.strideW = 2, asym.dilH = 2;
  unsigned seed = 300;
  for (const auto& [name, s] : std::vector<ConvCase>{{"k5s1c24", conv(3, 20, 24, 24, 5, 1, 2, 24)},
                                                     {"k3s2c40", conv(2, 23, 40, 40, 3, 2, 1, 40)},
                                                     {"k3s1c5", conv(2, 30, 5, 5, 3, 1, 1, 5)},
                                                     {"k7s1c16", conv(2, 18, 16, 16, 7, 1, 3, 16)},
                                                     {"k5x3asym", asym}}) {
    SCOPED_TRACE(name);
    const Vec x = randomVec(s.inputElems(), seed++), dy = randomVec(s.outputElems(), seed++);
    Vec dw(s.weightElems());
    fused::Conv2dBackwardFilter kernel(s);
    EXPECT_EQ(kernel.implementation(), "depthwise weight gradient (ours)");
    kernel.run(x.data(), dy.data(), dw.data());
    EXPECT_TRUE(closeRel(dw, testing::refConvBwdFilter(s, x, dy), kTol));

    // bf16 operands: f32 products and sums (exact products), dw rounded to bf16 once.
    using precision::bf16;
    std::vector<bf16> xb(x.size()), dyb(dy.size()), dwb(dw.size());
    precision::toBF16(x.data(), xb.data(), static_cast<i64>(x.size()));
    precision::toBF16(dy.data(), dyb.data(), static_cast<i64>(dy.size()));
    Vec xr(x.size()), dyr(dy.size()), dwr(dw.size());
    precision::toFloat(xb.data(), xr.data(), static_cast<i64>(x.size()));
    precision::toFloat(dyb.data(), dyr.data(), static_cast<i64>(dy.size()));
    fused::Conv2dBackwardFilter kernelBf16(s, ElementType::BF16);
    EXPECT_EQ(kernelBf16.implementation(), "depthwise weight gradient (ours)");
    kernelBf16.run(xb.data(), dyb.data(), dwb.data());
    precision::toFloat(dwb.data(), dwr.data(), static_cast<i64>(dw.size()));
    EXPECT_TRUE(closeRel(dwr, testing::refConvBwdFilter(s, xr, dyr), 1e-2f));
  }
}

// bf16 inputs widened as they are read: the f32 loops' sums, bit for bit (binary: then rounded
// as precision::toBF16 rounds), over broadcast and reduced shapes with two threads' parts.
TEST_F(Fused, Bf16BinaryAndReduceEqualTheF32LoopsOnWidenedValues) {
  using precision::bf16;
  auto bits = [](const Vec& v) {
    std::vector<bf16> b(v.size());
    precision::toBF16(v.data(), b.data(), static_cast<i64>(v.size()));
    return b;
  };
  auto widened = [](const std::vector<bf16>& b) {
    Vec f(b.size());
    precision::toFloat(b.data(), f.data(), static_cast<i64>(b.size()));
    return f;
  };
  auto raw = [](const std::vector<bf16>& b) {
    return reinterpret_cast<const std::uint16_t*>(b.data());
  };
  const std::vector<i64> xDims = {4, 30, 30, 48}, sDims = {4, 1, 1, 48};
  const auto xb = bits(randomVec(4 * 30 * 30 * 48, 900)), sb = bits(randomVec(4 * 48, 901));
  const Vec x = widened(xb), sc = widened(sb);
  for (const auto& [a, b, aDims, bDims] :
       {std::tuple{&xb, &sb, xDims, sDims}, std::tuple{&sb, &xb, sDims, xDims}}) {
    const auto shape = BroadcastShape::make(aDims, bDims);
    Vec want(static_cast<size_t>(shape.outElems()));
    fused::binary(BinaryKind::Mul, shape, widened(*a).data(), widened(*b).data(), want.data());
    std::vector<bf16> got(want.size());
    fused::binaryBf16(BinaryKind::Mul, shape, raw(*a), raw(*b),
                      reinterpret_cast<std::uint16_t*>(got.data()));
    EXPECT_EQ(got, bits(want));
  }
  for (const ReduceKind kind : {ReduceKind::Mean, ReduceKind::Sum, ReduceKind::Max}) {
    for (const std::vector<bool>& reduced : {std::vector<bool>{false, true, true, false},
                                             std::vector<bool>{true, true, true, false}}) {
      const ReduceShape s{xDims, reduced};
      ASSERT_TRUE(fused::reduceBf16Runs(s));
      Vec want(static_cast<size_t>(s.outElems())), got(want.size());
      fused::reduce(kind, s, x.data(), want.data());
      fused::reduceBf16(kind, s, raw(xb), got.data());
      EXPECT_EQ(got, want);
    }
  }
  EXPECT_FALSE(fused::reduceBf16Runs(ReduceShape{xDims, {false, false, false, true}}));
}

// The sum of products over one run of reduced axes equals mul then reduce to the bit: each
// product rounded before it is added, the sums in reduce()'s order, on one and two threads,
// with several outputs per thread and with one output split into per-thread partials.
TEST_F(Fused, MulReduceSumEqualsMulThenReduce) {
  const std::vector<i64> seDims = {4, 7, 9, 24}, longDims = {1, 300, 64};
  for (const auto& [dims, reduced] :
       {std::pair{seDims, std::vector<bool>{false, true, true, false}},
        std::pair{longDims, std::vector<bool>{false, true, false}}}) {
    const ReduceShape s{dims, reduced};
    ASSERT_TRUE(fused::mulReduceSumRuns(s));
    const Vec a = randomVec(s.inElems(), 910), b = randomVec(s.inElems(), 911);
    Vec products(a.size());
    fused::binaryChunk(BinaryKind::Mul, a.data(), b.data(), products.data(),
                       static_cast<i64>(a.size()));
    for (int threads : {1, 2}) {
      fused::setNumThreads(threads);
      Vec want(static_cast<size_t>(s.outElems())), got(want.size(), -1.0f);
      fused::reduce(ReduceKind::Sum, s, products.data(), want.data());
      fused::mulReduceSum(s, a.data(), b.data(), got.data());
      EXPECT_EQ(got, want) << dims.size() << "-d, " << threads << " threads";
    }
  }
  EXPECT_FALSE(fused::mulReduceSumRuns(ReduceShape{seDims, {false, false, false, true}}));
  EXPECT_THROW(fused::mulReduceSum(ReduceShape{seDims, {true, false, false, true}}, nullptr,
                                   nullptr, nullptr),
               std::invalid_argument);
}

// Our depthwise tap-table loop (detail::DepthwiseConv), both passes, against the reference:
// four-register channel groups (72 = 4 x 16 + 8), one-register, 8- and 1-lane tails, strides 1
// and 2 (the data gradient's taps skip the odd rows and columns), dilation, padding on one side
// only, and enough rows for two threads. The kernels take it for the strided f32 data gradient
// alone (the rest stays on oneDNN, where it was as fast or faster).
TEST_F(Fused, DepthwiseTapLoopMatchesTheReferenceAndRunsTheStridedDataGrad) {
  Conv2dShape asym = conv(2, 15, 20, 20, 5, 1, 2, 20);
  asym.s = 3, asym.w = 17, asym.padLeft = 0, asym.padRight = 2, asym.strideW = 2, asym.dilH = 2;
  unsigned seed = 400;
  using Pass = fused::detail::DepthwiseConv::Pass;
  for (const auto& [name, s] : std::vector<ConvCase>{{"k3s1c72", conv(2, 17, 72, 72, 3, 1, 1, 72)},
                                                     {"k5s2c72", conv(2, 19, 72, 72, 5, 2, 2, 72)},
                                                     {"k3s2c40", conv(2, 23, 40, 40, 3, 2, 1, 40)},
                                                     {"k5s1c24", conv(3, 20, 24, 24, 5, 1, 2, 24)},
                                                     {"k3s1c5", conv(2, 30, 5, 5, 3, 1, 1, 5)},
                                                     {"k5x3asym", asym}}) {
    SCOPED_TRACE(name);
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
              dy = randomVec(s.outputElems(), seed++);
    Vec y(s.outputElems(), 7.0f), dx(s.inputElems(), 7.0f), dxKernel(s.inputElems(), 7.0f);
    fused::detail::DepthwiseConv(Pass::Forward, s).run(x.data(), w.data(), y.data());
    fused::detail::DepthwiseConv(Pass::BackwardData, s).run(dy.data(), w.data(), dx.data());
    EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
    EXPECT_TRUE(closeRel(dx, testing::refConvBwdData(s, dy, w), kTol));
    fused::Conv2dBackwardData bwdData(s);
    const bool strided = s.strideH > 1 || s.strideW > 1;
    EXPECT_EQ(bwdData.implementation() == "depthwise data gradient (ours)", strided);
    EXPECT_NE(fused::Conv2dForward(s).implementation(), "depthwise forward (ours)");
    bwdData.run(dy.data(), w.data(), dxKernel.data());
    EXPECT_TRUE(closeRel(dxKernel, testing::refConvBwdData(s, dy, w), kTol));
  }
}

// bf16 convolutions (native oneDNN bf16: pointwise stride-1 ones run as matmuls) against the f32
// reference on the same bf16-rounded operands: within bf16 output rounding (2^-8) plus the
// different accumulation order.
TEST_F(Fused, Conv2dBf16AllPasses) {
  if (!fused::bf16PrimitivesAvailable()) GTEST_SKIP() << "this CPU has no oneDNN bf16 kernels";
  using precision::bf16;
  auto rounded = [](Vec v, std::vector<bf16>* out) {
    out->resize(v.size());
    precision::toBF16(v.data(), out->data(), static_cast<i64>(v.size()));
    precision::toFloat(out->data(), v.data(), static_cast<i64>(v.size()));
    return v;
  };
  auto widened = [](const std::vector<bf16>& v) {
    Vec f(v.size());
    precision::toFloat(v.data(), f.data(), static_cast<i64>(v.size()));
    return f;
  };
  unsigned seed = 100;
  for (const auto& [name, s] :
       std::vector<ConvCase>{{"pointwise", conv(2, 14, 32, 64, 1, 1, 0)},
                             {"pointwiseS2", conv(2, 14, 64, 32, 1, 2, 0)},
                             {"resnet3x3s1", conv(2, 14, 32, 32, 3, 1, 1)},
                             {"depthwise5x5S2", conv(2, 13, 24, 24, 5, 2, 2, 24)},
                             {"g16", conv(2, 10, 32, 32, 3, 1, 1, 2)}}) {
    SCOPED_TRACE(name);
    std::vector<bf16> xb, wb, dyb;
    const Vec x = rounded(randomVec(s.inputElems(), seed++), &xb);
    const Vec w = rounded(randomVec(s.weightElems(), seed++), &wb);
    const Vec dy = rounded(randomVec(s.outputElems(), seed++), &dyb);
    std::vector<bf16> y(s.outputElems()), dx(s.inputElems()), dw(s.weightElems());
    fused::Conv2dForward(s, ElementType::BF16).run(xb.data(), wb.data(), y.data());
    fused::Conv2dBackwardData(s, ElementType::BF16).run(dyb.data(), wb.data(), dx.data());
    fused::Conv2dBackwardFilter(s, ElementType::BF16).run(xb.data(), dyb.data(), dw.data());
    constexpr float kBf16Tol = 1e-2f;
    EXPECT_TRUE(closeRel(widened(y), testing::refConvFwd(s, x, w), kBf16Tol));
    EXPECT_TRUE(closeRel(widened(dx), testing::refConvBwdData(s, dy, w), kBf16Tol));
    EXPECT_TRUE(closeRel(widened(dw), testing::refConvBwdFilter(s, x, dy), kBf16Tol));
  }
}

// Auto takes Winograd for ResNet's 3x3 stride-1 shapes on AVX-512 and direct otherwise; Direct
// never does; both agree with the reference (Conv2dAllPasses runs Auto).
TEST_F(Fused, Conv2dAlgorithmChoice) {
  const Conv2dShape s = conv(2, 14, 64, 64, 3, 1, 1);
  const std::string autoImpl = fused::Conv2dForward(s).implementation();
  if (autoImpl.find("avx512") != std::string::npos) {  // oneDNN has Winograd for AVX-512
    EXPECT_NE(autoImpl.find("wino"), std::string::npos) << autoImpl;
  }
  EXPECT_EQ(fused::Conv2dForward(conv(2, 14, 64, 64, 3, 2, 1)).implementation().find("wino"),
            std::string::npos);
  // Pointwise stride-1 convolutions over few pixels run as a matmul; over many, as a convolution.
  EXPECT_EQ(fused::Conv2dForward(conv(2, 14, 32, 64, 1, 1, 0)).implementation().find("matmul"), 0u);
  EXPECT_EQ(fused::Conv2dForward(conv(2, 50, 16, 24, 1, 1, 0)).implementation().find("matmul"),
            std::string::npos);
  // Their weight gradients as a matmul up to 16,384 pixels (EfficientNet-B4's 24x24 stage at
  // batch 8), not over its larger ones.
  EXPECT_EQ(
      fused::Conv2dBackwardFilter(conv(2, 50, 16, 24, 1, 1, 0)).implementation().find("matmul"),
      0u);
  EXPECT_EQ(
      fused::Conv2dBackwardFilter(conv(8, 100, 16, 24, 1, 1, 0)).implementation().find("matmul"),
      std::string::npos);
  EXPECT_EQ(fused::Conv2dForward(conv(4, 2, 16, 24, 3, 2, 1)).implementation(),
            "matmul (im2col convolution)");
  // Strided pointwise ones: a subsample + matmul forward over few output pixels only.
  EXPECT_EQ(fused::Conv2dForward(conv(2, 14, 64, 32, 1, 2, 0)).implementation(),
            "matmul (strided pointwise convolution)");
  EXPECT_EQ(fused::Conv2dForward(conv(2, 100, 16, 24, 1, 2, 0)).implementation().find("matmul"),
            std::string::npos);
  fused::setConvAlgorithm(fused::ConvAlgorithm::Direct);
  const Vec x = randomVec(s.inputElems(), 5), w = randomVec(s.weightElems(), 6);
  Vec y(s.outputElems());
  fused::Conv2dForward direct(s);
  fused::setConvAlgorithm(fused::ConvAlgorithm::Auto);
  EXPECT_EQ(direct.implementation().find("wino"), std::string::npos) << direct.implementation();
  direct.run(x.data(), w.data(), y.data());
  EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
}

// Our Winograd F(4x4, 3x3), every pass against the reference: ResNet-50's 3x3 shapes (whole
// and partial 4x4 tiles, channels beyond one 64-channel transform chunk) through the public
// kernels with the algorithm forced (Auto takes it on AVX2 only), and the kernel itself on
// padding 0 / 2 / asymmetric and odd channel counts, which the rule never gives it.
TEST_F(Fused, OwnWinogradAllPasses) {
  std::vector<ConvCase> cases = {
      {"resnet56", conv(2, 16, 64, 64, 3, 1, 1)},   // 4x4 tiles exactly
      {"resnet14", conv(2, 14, 64, 128, 3, 1, 1)},  // a partial tile at each edge
      {"resnet7", conv(3, 7, 192, 64, 3, 1, 1)},    // 2x2 tiles of 7x7, 3 chunks of C
      {"rect", conv(1, 9, 128, 80, 3, 1, 1)},
  };
  unsigned seed = 300;
  fused::setConvAlgorithm(fused::ConvAlgorithm::OwnWinograd);
  for (const auto& [name, s] : cases) {
    SCOPED_TRACE(name);
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
              dy = randomVec(s.outputElems(), seed++);
    Vec y(s.outputElems()), dx(s.inputElems()), dw(s.weightElems());
    fused::Conv2dForward fwd(s);
    EXPECT_EQ(fwd.implementation(), "winograd F(4x4,3x3) (ours) + batched matmul");
    fused::Conv2dBackwardData bwdData(s);
    fused::Conv2dBackwardFilter bwdFilter(s);
    for (int rep = 0; rep < 2; ++rep) {
      fwd.run(x.data(), w.data(), y.data());
      bwdData.run(dy.data(), w.data(), dx.data());
      bwdFilter.run(x.data(), dy.data(), dw.data());
    }
    EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
    EXPECT_TRUE(closeRel(dx, testing::refConvBwdData(s, dy, w), kTol));
    EXPECT_TRUE(closeRel(dw, testing::refConvBwdFilter(s, x, dy), kTol));
  }
  // Shapes the rule keeps direct (stride 2, few channels) stay direct under the override.
  EXPECT_EQ(fused::Conv2dForward(conv(2, 14, 64, 64, 3, 2, 1)).implementation().find("ours"),
            std::string::npos);
  fused::setConvAlgorithm(fused::ConvAlgorithm::Auto);

  Conv2dShape asym = conv(2, 10, 5, 7, 3, 1, 0);
  asym.w = 13, asym.padTop = 2, asym.padBottom = 0, asym.padLeft = 1, asym.padRight = 2;
  for (const auto& [name, s] : std::vector<ConvCase>{{"pad0", conv(1, 11, 3, 9, 3, 1, 0)},
                                                     {"pad2", conv(2, 6, 17, 70, 3, 1, 2)},
                                                     {"asymmetric", asym}}) {
    SCOPED_TRACE(name);
    using fused::detail::WinogradF43;
    using fused::detail::WinogradPass;
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
              dy = randomVec(s.outputElems(), seed++);
    Vec y(s.outputElems()), dx(s.inputElems()), dw(s.weightElems());
    WinogradF43(WinogradPass::Forward, s).run(x.data(), w.data(), y.data());
    WinogradF43(WinogradPass::BackwardData, s).run(dy.data(), w.data(), dx.data());
    WinogradF43(WinogradPass::BackwardFilter, s).run(x.data(), dy.data(), dw.data());
    EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
    EXPECT_TRUE(closeRel(dx, testing::refConvBwdData(s, dy, w), kTol));
    EXPECT_TRUE(closeRel(dw, testing::refConvBwdFilter(s, x, dy), kTol));
  }
  EXPECT_THROW(
      fused::detail::WinogradF43(fused::detail::WinogradPass::Forward, conv(1, 8, 4, 4, 3, 2, 1)),
      std::invalid_argument);
}

// The AVX2 rule's matmul routes (KernelRule: smallImagePointwiseMatMul, wideWeightGradMatMul,
// stride2Conv3x3Im2col), chosen through setRuleIsa on any host, every pass against the
// reference: a 3x3 stride-2 convolution whose patch matrix takes two blocks (a full one and a
// partial one), a pointwise convolution beyond the 4096-pixel bound onto 14x14 (all passes), a
// pointwise weight gradient over 28x28 beyond it with C < K (transposed), a strided pointwise
// one with C < K (transposed). The AVX-512 rule keeps them as they were.
TEST_F(Fused, Avx2RuleMatMulRoutes) {
  struct RouteCase {
    std::string name;
    Conv2dShape s;
    std::string forward, data, filter;  // implementations under the AVX2 rule
  };
  const std::vector<RouteCase> cases = {
      {"stride2_3x3_two_blocks", conv(4, 64, 64, 16, 3, 2, 1),
       "matmul (blocked im2col convolution)", "", "matmul (blocked im2col convolution)"},
      // (its weight gradient is a matmul under every rule: under 16,384 pixels)
      {"pointwise_14x14", conv(24, 14, 24, 8, 1, 1, 0), "matmul (pointwise convolution)",
       "matmul (pointwise convolution)", ""},
      {"pointwise_28x28_wide", conv(6, 28, 8, 24, 1, 1, 0), "", "",
       "matmul (pointwise convolution, dW^T = x^T dy)"},
      {"strided_pointwise_wide", conv(2, 14, 16, 32, 1, 2, 0), "", "",
       "matmul (strided pointwise convolution, dW^T = x^T dy)"},
  };
  unsigned seed = 700;
  for (const auto isa : {fused::KernelIsa::Avx2, fused::KernelIsa::Avx512}) {
    fused::setRuleIsa(isa);
    for (const auto& [name, s, forward, data, filter] : cases) {
      SCOPED_TRACE(name + " rule " + fused::isaName(isa));
      const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
                dy = randomVec(s.outputElems(), seed++);
      Vec y(s.outputElems()), dx(s.inputElems()), dw(s.weightElems(), 7.0f);
      fused::Conv2dForward fwd(s);
      fused::Conv2dBackwardData bwdData(s);
      fused::Conv2dBackwardFilter bwdFilter(s);
      const std::string impls[] = {fwd.implementation(), bwdData.implementation(),
                                   bwdFilter.implementation()};
      const std::string* want[] = {&forward, &data, &filter};
      for (int p = 0; p < 3; ++p) {  // "": a pass the AVX2 rule leaves as every ISA runs it
        if (want[p]->empty()) continue;
        if (isa == fused::KernelIsa::Avx2)
          EXPECT_EQ(impls[p], *want[p]) << "pass " << p;
        else
          EXPECT_NE(impls[p], *want[p]) << "pass " << p;
      }
      for (int rep = 0; rep < 2; ++rep) {  // twice: the weight gradient's blocks accumulate
        fwd.run(x.data(), w.data(), y.data());
        bwdData.run(dy.data(), w.data(), dx.data());
        bwdFilter.run(x.data(), dy.data(), dw.data());
      }
      EXPECT_TRUE(closeRel(y, testing::refConvFwd(s, x, w), kTol));
      EXPECT_TRUE(closeRel(dx, testing::refConvBwdData(s, dy, w), kTol));
      EXPECT_TRUE(closeRel(dw, testing::refConvBwdFilter(s, x, dy), kTol));
    }
  }
  fused::setRuleIsa(std::nullopt);
}

// The per-ISA kernel rule: a function of the ISA and the override alone.
TEST(KernelRule, ConvolutionAlgorithmPerIsa) {
  using fused::Conv3x3Kernel;
  using fused::ConvAlgorithm;
  using fused::KernelIsa;
  EXPECT_EQ(fused::kernelRule(KernelIsa::Avx512, ConvAlgorithm::Auto).conv3x3,
            Conv3x3Kernel::OnednnWinograd);
  EXPECT_EQ(fused::kernelRule(KernelIsa::Avx2, ConvAlgorithm::Auto).conv3x3,
            Conv3x3Kernel::OwnWinograd);
  EXPECT_EQ(fused::kernelRule(KernelIsa::Older, ConvAlgorithm::Auto).conv3x3,
            Conv3x3Kernel::Direct);
  for (KernelIsa isa : {KernelIsa::Avx512, KernelIsa::Avx2, KernelIsa::Older}) {
    EXPECT_EQ(fused::kernelRule(isa, ConvAlgorithm::Direct).conv3x3, Conv3x3Kernel::Direct);
    EXPECT_EQ(fused::kernelRule(isa, ConvAlgorithm::OwnWinograd).conv3x3,
              Conv3x3Kernel::OwnWinograd);
  }
  const std::string avx2 = fused::describe(fused::kernelRule(KernelIsa::Avx2, ConvAlgorithm::Auto));
  EXPECT_EQ(avx2.find("isa avx2: f32 conv 3x3 stride 1"), 0u) << avx2;
  EXPECT_NE(avx2.find("winograd F(4x4,3x3) (ours)"), std::string::npos) << avx2;
  const std::string avx512 =
      fused::describe(fused::kernelRule(KernelIsa::Avx512, ConvAlgorithm::Auto));
  EXPECT_NE(avx512.find("winograd F(4x4,3x3) (oneDNN)"), std::string::npos);
  // The matmul routes over oneDNN's direct kernels: AVX2's alone, whatever the override.
  for (ConvAlgorithm a : {ConvAlgorithm::Auto, ConvAlgorithm::Direct, ConvAlgorithm::OwnWinograd}) {
    const fused::KernelRule r2 = fused::kernelRule(KernelIsa::Avx2, a);
    EXPECT_TRUE(r2.smallImagePointwiseMatMul && r2.wideWeightGradMatMul && r2.stride2Conv3x3Im2col);
    for (KernelIsa isa : {KernelIsa::Avx512, KernelIsa::Older}) {
      const fused::KernelRule r = fused::kernelRule(isa, a);
      EXPECT_FALSE(r.smallImagePointwiseMatMul || r.wideWeightGradMatMul || r.stride2Conv3x3Im2col)
          << fused::isaName(isa);
    }
  }
  EXPECT_NE(avx2.find("conv 3x3 stride 2 forward, weight gradient = blocked im2col + matmul"),
            std::string::npos)
      << avx2;
  EXPECT_EQ(avx512.find("stride 2"), std::string::npos) << avx512;
}

// setRuleIsa chooses the rule the kernels follow; nullopt returns to the CPU's.
TEST(KernelRule, RuleIsaOverride) {
  fused::setRuleIsa(fused::KernelIsa::Older);
  EXPECT_EQ(fused::activeKernelRule().isa, fused::KernelIsa::Older);
  EXPECT_EQ(fused::activeKernelRule().conv3x3, fused::Conv3x3Kernel::Direct);
  fused::setRuleIsa(std::nullopt);
  EXPECT_EQ(fused::activeKernelRule().isa, fused::kernelIsa());
}

// The rule in force follows oneDNN's ISA, which ONEDNN_MAX_CPU_ISA limits: `ctest` runs this on
// the host's ISA, and under ONEDNN_MAX_CPU_ISA=AVX2 (kernels_test.avx2) on AVX2, where a ResNet
// 3x3 convolution must then run our Winograd.
TEST(KernelRule, ActiveRuleFollowsTheIsaLimit) {
  const char* limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  const fused::KernelRule rule = fused::activeKernelRule();
  if (limit && std::string(limit) == "AVX2") {
    EXPECT_EQ(rule.isa, fused::KernelIsa::Avx2);
  }
  const std::string impl = fused::Conv2dForward(conv(2, 14, 64, 64, 3, 1, 1)).implementation();
  if (rule.isa == fused::KernelIsa::Avx2) {
    EXPECT_EQ(impl, "winograd F(4x4,3x3) (ours) + batched matmul");
  }
  if (rule.isa == fused::KernelIsa::Avx512) {
    EXPECT_NE(impl.find("wino"), std::string::npos) << impl;
  }
  EXPECT_EQ(impl.find("ours") != std::string::npos,
            rule.conv3x3 == fused::Conv3x3Kernel::OwnWinograd)
      << impl;
}

TEST_F(Fused, MatMul) {
  std::vector<MatMulShape> shapes;
  for (int flags = 0; flags < 8; ++flags) {
    MatMulShape s;
    s.batch = 3, s.m = 17, s.k = 33, s.n = 9;
    s.transA = flags & 1, s.transB = flags & 2, s.broadcastB = flags & 4;
    shapes.push_back(s);
    s.batch = 1, s.broadcastB = false, s.m = 64, s.k = 48, s.n = 80;
    shapes.push_back(s);
  }
  MatMulShape bert;  // [batch*seq, hidden] x shared weight
  bert.batch = 4, bert.m = 16, bert.k = 64, bert.n = 96, bert.broadcastB = true;
  shapes.push_back(bert);
  MatMulShape head;  // classifier: M=8, K=256, N=100, weight transposed
  head.m = 8, head.k = 256, head.n = 100, head.transB = true;
  shapes.push_back(head);
  unsigned seed = 50;
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "batch " << s.batch << " m " << s.m << " tA " << s.transA
                                      << " tB " << s.transB << " bB " << s.broadcastB);
    const Vec a = randomVec(s.aElems(), seed++), b = randomVec(s.bElems(), seed++);
    Vec c(s.cElems());
    fused::MatMul mm(s);
    mm.run(a.data(), b.data(), c.data());
    EXPECT_TRUE(closeRel(c, testing::refMatMul(s, a, b), kTol));
  }
}

// Dense layers over many tokens pack their shared operand into oneDNN's blocked layout first
// (x W, the weight gradient x^T dy, a shared W over sequences): the products of the reference;
// few rows, a transposed B and bf16 keep the plain GEMM.
TEST_F(Fused, MatMulWithPackedOperandsEqualsTheReference) {
  struct Case {
    MatMulShape s;
    bool packs;
  };
  std::vector<Case> cases;
  MatMulShape s;
  s.m = 512, s.k = 40, s.n = 72;
  cases.push_back({s, true});  // x W
  s.transA = true;
  cases.push_back({s, true});  // x^T dy
  s.transA = false, s.batch = 2, s.m = 256, s.broadcastB = true;
  cases.push_back({s, true});  // a shared W over 2 x 256 rows
  s.batch = 1, s.m = 512, s.broadcastB = false, s.transB = true;
  cases.push_back({s, false});  // x W^T
  s.transB = false, s.m = 152;
  cases.push_back({s, false});  // few rows
  unsigned seed = 70;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "batch " << c.s.batch << " m " << c.s.m << " tA "
                                      << c.s.transA << " tB " << c.s.transB);
    const Vec a = randomVec(c.s.aElems(), seed++), b = randomVec(c.s.bElems(), seed++);
    fused::MatMul mm(c.s);
    EXPECT_EQ(mm.packsOperands(), c.packs);
    for (int run = 0; run < 2; ++run) {  // the packed copies are redone per run
      Vec out(c.s.cElems(), 7.0f);
      mm.run(a.data(), b.data(), out.data());
      EXPECT_TRUE(closeRel(out, testing::refMatMul(c.s, a, b), kTol));
    }
  }
  MatMulShape bf16;
  bf16.m = 512, bf16.k = 40, bf16.n = 72;
  if (fused::bf16PrimitivesAvailable()) {
    EXPECT_FALSE(fused::MatMul(bf16, ElementType::BF16).packsOperands());
  }
}

TEST_F(Fused, BatchNorm) {
  const std::pair<i64, i64> shapes[] = {{2 * 7 * 7, 32}, {1000, 3}, {2 * 14 * 14, 64}, {5, 17}};
  unsigned seed = 100;
  const float eps = 1e-5f;
  for (const auto& [rows, c] : shapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << c);
    const Vec x = randomVec(rows * c, seed++, -2, 3), gamma = randomVec(c, seed++, 0.5f, 1.5f),
              beta = randomVec(c, seed++), dy = randomVec(rows * c, seed++);
    Vec mean, var;
    testing::refBnStats(rows, c, x, mean, var);
    Vec yRef(rows * c);
    ref::batchNormNormalize(rows, c, eps, win(x), win(mean), win(var), win(gamma), win(beta),
                            yRef.data(), all(rows * c));

    Vec y(rows * c), fMean(c), fVar(c);
    fused::BatchNormForwardTraining train(rows, c, eps);
    train.run(x.data(), gamma.data(), beta.data(), y.data(), fMean.data(), fVar.data());
    EXPECT_TRUE(closeRel(fMean, mean, kTol));
    EXPECT_TRUE(closeRel(fVar, var, kTol));
    EXPECT_TRUE(closeRel(y, yRef, kTol));

    // Inference with other statistics than the batch's own.
    const Vec rMean = randomVec(c, seed++), rVar = randomVec(c, seed++, 0.5f, 2.0f);
    Vec yInf(rows * c), yInfRef(rows * c);
    fused::BatchNormForwardInference inf(rows, c, eps);
    inf.run(x.data(), gamma.data(), beta.data(), rMean.data(), rVar.data(), yInf.data());
    ref::batchNormNormalize(rows, c, eps, win(x), win(rMean), win(rVar), win(gamma), win(beta),
                            yInfRef.data(), all(rows * c));
    EXPECT_TRUE(closeRel(yInf, yInfRef, kTol));

    Vec sumDy(c), sumDyXhat(c), dxRef(rows * c);
    ref::batchNormBackwardSums(rows, c, eps, win(x), win(dy), win(mean), win(var), sumDy.data(),
                               sumDyXhat.data(), all(c), all(rows));
    ref::batchNormBackwardData(rows, c, eps, win(x), win(dy), win(mean), win(var), win(gamma),
                               win(sumDy), win(sumDyXhat), dxRef.data(), all(rows * c));
    Vec dx(rows * c), dgamma(c), dbeta(c);
    fused::BatchNormBackward bwd(rows, c, eps);
    bwd.run(x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(), dgamma.data(),
            dbeta.data());
    EXPECT_TRUE(closeRel(dx, dxRef, kTol));
    EXPECT_TRUE(closeRel(dgamma, sumDyXhat, kTol));
    EXPECT_TRUE(closeRel(dbeta, sumDy, kTol));
  }
}

// The fused batch norm + ReLU pair against f64 sums, on shapes that span several threads, row
// blocks and channel blocks (with a channel tail), and on activations whose mean is 1000x
// their spread: the single-pass variance must not cancel. The backward is checked with the
// ReLU decisions the forward's own output shows (y > 0), so a tie never decides the test;
// what must hold is that the backward recomputes exactly those decisions.
TEST_F(Fused, BatchNormReluTrainingAgainstDoubleSums) {
  const std::pair<i64, i64> shapes[] = {{4099, 40}, {3000, 96}, {70000, 3}};
  unsigned seed = 300;
  const float eps = 1e-5f;
  for (const float offset : {0.0f, 1000.0f}) {
    for (const auto& [rows, c] : shapes) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << c << " offset " << offset);
      Vec x = randomVec(rows * c, seed++, -1, 1);
      for (float& v : x) v += offset;
      const Vec gamma = randomVec(c, seed++, 0.5f, 1.5f), beta = randomVec(c, seed++, -0.5f, 0.5f),
                dy = randomVec(rows * c, seed++);
      std::vector<double> mean(c, 0.0), var(c, 0.0);
      for (i64 i = 0; i < rows * c; ++i) mean[i % c] += x[i];
      for (double& m : mean) m /= static_cast<double>(rows);
      for (i64 i = 0; i < rows * c; ++i) var[i % c] += (x[i] - mean[i % c]) * (x[i] - mean[i % c]);
      for (double& v : var) v /= static_cast<double>(rows);

      Vec y(rows * c), fMean(c), fVar(c);
      fused::BatchNormForwardTraining train(rows, c, eps, BatchNormRelu::kFused);
      std::vector<unsigned char> workspace(train.workspaceBytes());
      train.run(x.data(), gamma.data(), beta.data(), y.data(), fMean.data(), fVar.data(),
                workspace.data());
      double meanErr = 0, varErr = 0, yErr = 0;
      for (i64 j = 0; j < c; ++j) {
        meanErr = std::max(meanErr, std::abs(fMean[j] - mean[j]) / (1 + std::abs(mean[j])));
        varErr = std::max(varErr, std::abs(fVar[j] - var[j]) / var[j]);
      }
      for (i64 i = 0; i < rows * c; ++i) {
        const i64 j = i % c;
        const double yRef =
            std::max(0.0, (x[i] - mean[j]) / std::sqrt(var[j] + eps) * gamma[j] + beta[j]);
        yErr = std::max(yErr, std::abs(y[i] - yRef));
      }
      EXPECT_LT(meanErr, 1e-6);
      EXPECT_LT(varErr, 1e-5);
      EXPECT_LT(yErr, offset == 0 ? 1e-5 : 1e-3);  // y = x * a + b: b = beta - mean * a rounds

      std::vector<double> sumDy(c, 0.0), sumDyXmu(c, 0.0);
      Vec g(rows * c);
      for (i64 i = 0; i < rows * c; ++i) {
        const i64 j = i % c;
        g[i] = y[i] > 0 ? dy[i] : 0.0f;
        sumDy[j] += g[i];
        sumDyXmu[j] += g[i] * (x[i] - fMean[j]);
      }
      Vec dx(rows * c), dgamma(c), dbeta(c);
      fused::BatchNormBackward bwd(rows, c, eps, BatchNormRelu::kFused);
      bwd.run(x.data(), dy.data(), gamma.data(), fMean.data(), fVar.data(), dx.data(),
              dgamma.data(), dbeta.data(), workspace.data());
      double dxErr = 0, dxMax = 0;
      for (i64 j = 0; j < c; ++j) {
        const double rstd = 1 / std::sqrt(double(fVar[j]) + eps);
        EXPECT_NEAR(dbeta[j], sumDy[j], 1e-4 * (1 + std::abs(sumDy[j])));
        EXPECT_NEAR(dgamma[j], sumDyXmu[j] * rstd, 1e-4 * (1 + std::abs(sumDyXmu[j] * rstd)));
      }
      for (i64 i = 0; i < rows * c; ++i) {
        const i64 j = i % c;
        const double rstd = 1 / std::sqrt(double(fVar[j]) + eps), n = double(rows);
        const double xhat = (x[i] - fMean[j]) * rstd;
        const double ref = gamma[j] * rstd * (g[i] - sumDy[j] / n - xhat * sumDyXmu[j] * rstd / n);
        dxErr = std::max(dxErr, std::abs(dx[i] - ref));
        dxMax = std::max(dxMax, std::abs(ref));
      }
      EXPECT_LT(dxErr, 1e-5 * dxMax);
    }
  }
}

// batch_norm_train -> add -> relu as one pass (the engine's host fusion) is bit-identical to
// the three kernels run one after the other, and the statistics it starts from are the
// unfused batch norm's.
// Batch norm with the swish fused (forward: swish(y); backward: swish' applied inside) gives the
// bits of batch norm, swish, swish_grad and batch norm backward run one by one, with channel
// counts off the vector width and enough rows for two threads.
TEST_F(Fused, BatchNormSwishEqualsTheOpsBitForBit) {
  const std::pair<i64, i64> shapes[] = {{2 * 7 * 7, 48}, {5000, 40}, {333, 5}};
  unsigned seed = 450;
  for (const auto& [rows, c] : shapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << c);
    const i64 n = rows * c;
    const Vec x = randomVec(n, seed++, -2, 3), dz = randomVec(n, seed++),
              gamma = randomVec(c, seed++, 0.5f, 1.5f), beta = randomVec(c, seed++);
    fused::BatchNormForwardTraining bn(rows, c, 1e-5f);
    fused::BatchNormBackward bnBackward(rows, c, 1e-5f);
    Vec y(n), z(n), dy(n), dx(n), mean(c), var(c), dgamma(c), dbeta(c);
    bn.run(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data());
    fused::unaryChunk(UnaryKind::Swish, 1.0f, y.data(), z.data(), n);
    fused::unaryGradChunk(UnaryKind::Swish, 1.0f, y.data(), dz.data(), dy.data(), n);
    bnBackward.run(x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                   dgamma.data(), dbeta.data());

    fused::BatchNormForwardTraining bnSwish(rows, c, 1e-5f, BatchNormRelu::kSwish);
    fused::BatchNormBackward bnSwishBackward(rows, c, 1e-5f, BatchNormRelu::kSwish);
    std::vector<char> workspace(bnSwish.workspaceBytes());
    ASSERT_GT(workspace.size(), 0u);
    Vec z2(n), dx2(n), mean2(c), var2(c), dgamma2(c), dbeta2(c);
    bnSwish.run(x.data(), gamma.data(), beta.data(), z2.data(), mean2.data(), var2.data(),
                workspace.data());
    bnSwishBackward.run(x.data(), dz.data(), gamma.data(), mean2.data(), var2.data(), dx2.data(),
                        dgamma2.data(), dbeta2.data(), workspace.data());
    EXPECT_EQ(mean2, mean);
    EXPECT_EQ(var2, var);
    EXPECT_EQ(z2, z);
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(dgamma2, dgamma);
    EXPECT_EQ(dbeta2, dbeta);
  }
}

TEST_F(Fused, BatchNormAddReluEqualsTheThreeOpsBitForBit) {
  const std::pair<i64, i64> shapes[] = {{2 * 7 * 7, 48}, {5000, 64}, {333, 5}};
  unsigned seed = 400;
  for (const auto& [rows, c] : shapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << c);
    const i64 n = rows * c;
    const Vec x = randomVec(n, seed++, -2, 3), other = randomVec(n, seed++),
              gamma = randomVec(c, seed++, 0.5f, 1.5f), beta = randomVec(c, seed++);
    fused::BatchNormForwardTraining bn(rows, c, 1e-5f);
    Vec y(n), sum(n), unfused(n), mean(c), var(c);
    bn.run(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data());
    fused::binaryChunk(BinaryKind::Add, y.data(), other.data(), sum.data(), n);
    fused::unaryChunk(UnaryKind::Relu, 1.0f, sum.data(), unfused.data(), n);

    Vec affine(2 * c), mean2(c), var2(c), out(n);
    bn.runStatistics(x.data(), gamma.data(), beta.data(), mean2.data(), var2.data(), affine.data());
    fused::batchNormAddRelu(x.data(), affine.data(), other.data(), nullptr, out.data(), rows, c);
    EXPECT_EQ(mean2, mean);
    EXPECT_EQ(var2, var);
    EXPECT_EQ(out, unfused);

    // A projection shortcut: `other` is the input of a second batch norm, normalised in the
    // same pass.
    const Vec xs = randomVec(n, seed++, -1, 2), gs = randomVec(c, seed++, 0.5f, 1.5f),
              bs = randomVec(c, seed++);
    Vec ys(n), meanS(c), varS(c), unfused2(n), affineS(2 * c), out2(n);
    bn.run(xs.data(), gs.data(), bs.data(), ys.data(), meanS.data(), varS.data());
    fused::binaryChunk(BinaryKind::Add, y.data(), ys.data(), sum.data(), n);
    fused::unaryChunk(UnaryKind::Relu, 1.0f, sum.data(), unfused2.data(), n);
    bn.runStatistics(xs.data(), gs.data(), bs.data(), meanS.data(), varS.data(), affineS.data());
    fused::batchNormAddRelu(x.data(), affine.data(), xs.data(), affineS.data(), out2.data(), rows,
                            c);
    EXPECT_EQ(out2, unfused2);
    if (c % 16 == 0) {  // the ReLU-bit path computes the same values
      std::vector<std::uint8_t> bits(n / 8);
      fused::batchNormAddRelu(x.data(), affine.data(), xs.data(), affineS.data(), out2.data(), rows,
                              c, bits.data());
      EXPECT_EQ(out2, unfused2);
    }
  }
}

// The ReLU bits batchNormAddRelu writes are out > 0, and the gradient sum + ReLU backward that
// reads them equals the one that reads the ReLU's output, bit for bit, NaN and inf included.
TEST_F(Fused, ReluBitsPathEqualsTheReluOutputPath) {
  const i64 rows = 3000, c = 48, n = rows * c;
  const Vec x = randomVec(n, 500, -2, 2), other = randomVec(n, 501),
            affine = randomVec(2 * c, 502, -1, 1);
  Vec out(n), outBits(n);
  std::vector<std::uint8_t> bits(n / 8, 0xA5);
  fused::batchNormAddRelu(x.data(), affine.data(), other.data(), nullptr, out.data(), rows, c);
  fused::batchNormAddRelu(x.data(), affine.data(), other.data(), nullptr, outBits.data(), rows, c,
                          bits.data());
  EXPECT_EQ(outBits, out);
  for (i64 i = 0; i < n; ++i)
    ASSERT_EQ((bits[i / 8] >> (i % 8)) & 1, out[i] > 0 ? 1 : 0) << "element " << i;

  Vec a = randomVec(n, 503), b = randomVec(n, 504);
  a[17] = std::numeric_limits<float>::quiet_NaN();
  a[18] = std::numeric_limits<float>::infinity();
  a[19] = -std::numeric_limits<float>::infinity();
  Vec viaX(n), viaBits(n);
  fused::addReluBackward(a.data(), b.data(), out.data(), viaX.data(), n);
  fused::addReluBackwardBits(a.data(), b.data(), bits.data(), viaBits.data(), n);
  for (i64 i = 0; i < n; ++i) {
    if (std::isnan(viaX[i])) {
      ASSERT_TRUE(std::isnan(viaBits[i])) << i;
      continue;
    }
    ASSERT_EQ(viaBits[i], viaX[i]) << i;
  }
  EXPECT_THROW(fused::batchNormAddRelu(x.data(), affine.data(), other.data(), nullptr, out.data(),
                                       n / 8, 8, bits.data()),
               std::invalid_argument);
}

Pool2dShape pool(i64 n, i64 hw, i64 c, i64 k, i64 stride, i64 pad) {
  Pool2dShape s;
  s.n = n, s.h = s.w = hw, s.c = c, s.kh = s.kw = k, s.strideH = s.strideW = stride;
  s.padTop = s.padLeft = s.padBottom = s.padRight = pad;
  return s;
}

TEST_F(Fused, Pooling) {
  std::vector<Pool2dShape> shapes = {pool(2, 16, 8, 3, 2, 1),  // ResNet stem max pool
                                     pool(2, 8, 16, 2, 2, 0), pool(2, 7, 32, 7, 1, 0),  // global
                                     pool(1, 9, 5, 3, 1, 1)};
  Pool2dShape asym = pool(2, 10, 4, 3, 2, 0);
  asym.padTop = 1, asym.padRight = 2, asym.kw = 4, asym.w = 11;
  shapes.push_back(asym);
  unsigned seed = 200;
  for (const auto& base : shapes) {
    for (bool include : {false, true}) {
      Pool2dShape s = base;
      s.countIncludePad = include;
      SCOPED_TRACE(::testing::Message()
                   << s.h << "x" << s.w << " k" << s.kh << "x" << s.kw << " include " << include);
      const Vec x = testing::distinctVec(s.inputElems(), seed++, 0.01f),
                dy = randomVec(s.outputElems(), seed++);
      const i64 no = s.outputElems(), ni = s.inputElems();
      Vec y(no), yRef(no), dx(ni), dxRef(ni);
      fused::MaxPoolForward(s).run(x.data(), y.data());
      ref::maxPoolForward(s, win(x), yRef.data(), all(no));
      EXPECT_TRUE(closeRel(y, yRef, kTol));
      fused::MaxPoolBackward mpb(s);
      mpb.run(x.data(), dy.data(), dx.data());
      mpb.run(x.data(), dy.data(), dx.data());  // repeatable (dx fully overwritten)
      ref::maxPoolBackward(s, win(x), win(dy), dxRef.data(), all(ni));
      EXPECT_TRUE(closeRel(dx, dxRef, kTol));
      fused::AvgPoolForward(s).run(x.data(), y.data());
      ref::avgPoolForward(s, win(x), yRef.data(), all(no));
      EXPECT_TRUE(closeRel(y, yRef, kTol));
      fused::AvgPoolBackward(s).run(dy.data(), dx.data());
      ref::avgPoolBackward(s, win(dy), dxRef.data(), all(ni));
      EXPECT_TRUE(closeRel(dx, dxRef, kTol));
    }
  }
}

// After a ReLU many windows hold several zeros: the gradient must still go to the first
// maximum of each window, as in the reference.
TEST_F(Fused, MaxPoolBackwardTies) {
  for (const Pool2dShape& s : {pool(2, 16, 8, 3, 2, 1), pool(1, 8, 16, 2, 2, 0)}) {
    Vec x = randomVec(s.inputElems(), 250);
    for (float& v : x) v = std::max(v, 0.0f);
    for (i64 i = 0; i < s.inputElems(); i += 7) x[i] = 0.5f;  // some tied positive maxima too
    const Vec dy = randomVec(s.outputElems(), 251);
    Vec dx(s.inputElems()), dxRef(s.inputElems());
    fused::MaxPoolBackward(s).run(x.data(), dy.data(), dx.data());
    ref::maxPoolBackward(s, win(x), win(dy), dxRef.data(), all(s.inputElems()));
    EXPECT_TRUE(closeRel(dx, dxRef, kTol));
  }
}

const UnaryKind kUnaryKinds[] = {
    UnaryKind::Identity, UnaryKind::Relu,  UnaryKind::Neg,    UnaryKind::Exp,     UnaryKind::Log,
    UnaryKind::Sqrt,     UnaryKind::Rsqrt, UnaryKind::Square, UnaryKind::Sigmoid, UnaryKind::Tanh,
    UnaryKind::Gelu,     UnaryKind::Swish, UnaryKind::Scale};

TEST_F(Fused, UnaryAndGrad) {
  for (i64 n : {i64{7}, i64{100003}}) {  // serial and parallel paths
    for (UnaryKind kind : kUnaryKinds) {
      SCOPED_TRACE(::testing::Message() << "kind " << int(kind) << " n " << n);
      const bool positive =
          kind == UnaryKind::Log || kind == UnaryKind::Sqrt || kind == UnaryKind::Rsqrt;
      const Vec x = randomVec(n, 300 + int(kind), positive ? 0.1f : -4.0f, 4.0f),
                dy = randomVec(n, 400 + int(kind));
      Vec y(n), yRef(n), dx(n), dxRef(n);
      fused::unary(kind, 0.3f, x.data(), y.data(), n);
      ref::unary(kind, 0.3f, win(x), yRef.data(), all(n));
      EXPECT_TRUE(closeRel(y, yRef, kTol));
      fused::unaryGrad(kind, 0.3f, x.data(), dy.data(), dx.data(), n);
      ref::unaryGrad(kind, 0.3f, win(x), win(dy), dxRef.data(), all(n));
      EXPECT_TRUE(closeRel(dx, dxRef, kTol));
    }
  }
}

TEST_F(Fused, BinaryBroadcast) {
  using Dims = std::vector<i64>;
  const std::pair<Dims, Dims> cases[] = {
      {{2, 14, 14, 32}, {2, 14, 14, 32}},        // same shape
      {{2, 14, 14, 32}, {32}},                   // per-channel (bias)
      {{2, 14, 14, 32}, {}},                     // scalar b
      {{}, {3, 5}},                              // scalar a
      {{64, 300}, {64, 1}},                      // b broadcast along the last dim
      {{4, 1, 6}, {5, 1}},                       // both broadcast
      {{2, 1, 3, 1, 4, 5}, {1, 3, 1, 2, 1, 5}},  // rank 6
      {{1}, {1}},
      {{300, 1, 128}, {300, 64, 1}},  // large, parallel, mixed
  };
  const BinaryKind kinds[] = {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul,
                              BinaryKind::Div, BinaryKind::Max, BinaryKind::Min};
  unsigned seed = 500;
  for (const auto& [ad, bd] : cases) {
    const auto s = BroadcastShape::make(ad, bd);
    i64 na = 1, nb = 1;
    for (i64 d : ad) na *= d;
    for (i64 d : bd) nb *= d;
    const Vec a = randomVec(na, seed++), b = randomVec(nb, seed++, 0.5f, 2.0f);
    for (BinaryKind kind : kinds) {
      SCOPED_TRACE(::testing::Message() << "case " << seed << " kind " << int(kind));
      Vec y(s.outElems()), yRef(s.outElems());
      fused::binary(kind, s, a.data(), b.data(), y.data());
      ref::binary(kind, s, win(a), win(b), yRef.data(), all(s.outElems()));
      EXPECT_TRUE(closeRel(y, yRef, kTol));
    }
  }
}

TEST_F(Fused, Reduce) {
  const ReduceShape cases[] = {
      {{2 * 14 * 14, 64}, {true, false}},  // leading: [N*H*W, C] -> [C] (parallel partials)
      {{2, 14, 14, 64}, {true, true, true, false}},
      {{300, 200}, {false, true}},                 // trailing rows
      {{2, 49, 256}, {false, true, false}},        // global average pool style
      {{4, 5, 6}, {true, true, true}},             // everything
      {{100000}, {true}},                          // one long vector
      {{4, 5, 6}, {false, false, false}},          // nothing
      {{3, 4, 5, 6}, {true, false, true, false}},  // generic pattern
      {{1, 7, 1, 3}, {true, false, true, true}},   // size-1 dims
  };
  unsigned seed = 600;
  for (const auto& s : cases) {
    const Vec x = randomVec(s.inElems(), seed++);
    for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max}) {
      SCOPED_TRACE(::testing::Message() << "case " << seed << " kind " << int(kind));
      Vec y(s.outElems()), yRef(s.outElems());
      fused::reduce(kind, s, x.data(), y.data());
      ref::reduce(kind, s, win(x), yRef.data(), all(s.outElems()), all(s.reducedCount()));
      EXPECT_TRUE(closeRel(y, yRef, kTol));
    }
  }
}

TEST_F(Fused, Transpose) {
  using Dims = std::vector<i64>;
  const std::pair<Dims, std::vector<int>> cases[] = {
      {{2, 14, 14, 32}, {0, 3, 1, 2}},  // NHWC -> NCHW
      {{2, 32, 14, 14}, {0, 2, 3, 1}},  // NCHW -> NHWC
      {{100, 70}, {1, 0}},
      {{3, 4, 5}, {0, 1, 2}},  // identity
      {{3, 4, 5}, {1, 0, 2}},  // innermost unmoved
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {{1, 5, 1, 7}, {3, 2, 1, 0}},     // size-1 dims
      {{8, 16, 12, 64}, {0, 2, 1, 3}},  // BERT head split
      {{2, 3, 4, 5, 6, 2}, {5, 4, 3, 2, 1, 0}},
  };
  unsigned seed = 700;
  for (const auto& [dims, perm] : cases) {
    i64 n = 1;
    for (i64 d : dims) n *= d;
    const Vec x = randomVec(n, seed++);
    Vec y(n), yRef(n);
    fused::transpose(dims, perm, x.data(), y.data());
    ref::transpose(dims, perm, win(x), yRef.data(), all(n));
    EXPECT_EQ(y, yRef) << "case " << seed;
  }
}

TEST_F(Fused, SoftmaxAndCrossEntropy) {
  const std::pair<i64, i64> shapes[] = {{4, 10}, {64, 1000}, {3, 1}};
  unsigned seed = 800;
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const i64 n = rows * cols;
    const Vec x = randomVec(n, seed++, -5, 5), dy = randomVec(n, seed++);
    Vec y(n), yRef(n), dx(n), dxRef(n);
    fused::softmax(rows, cols, x.data(), y.data());
    ref::softmax(cols, win(x), yRef.data(), all(n));
    EXPECT_TRUE(closeRel(y, yRef, kTol));
    fused::softmaxGrad(rows, cols, yRef.data(), dy.data(), dx.data());
    ref::softmaxGrad(cols, win(yRef), win(dy), dxRef.data(), all(n));
    EXPECT_TRUE(closeRel(dx, dxRef, kTol));

    std::vector<std::int32_t> labels(rows);
    for (i64 i = 0; i < rows; ++i) labels[i] = std::int32_t((i * 7919) % cols);
    const auto lw = Window<std::int32_t>::whole(labels.data(), rows);
    const Vec dloss = randomVec(rows, seed++);
    for (float smoothing : {0.0f, 0.1f}) {
      Vec loss(rows), lossRef(rows), dl(n), dlRef(n);
      fused::softmaxCrossEntropy(rows, cols, smoothing, x.data(), labels.data(), loss.data());
      ref::softmaxCrossEntropy(cols, smoothing, win(x), lw, lossRef.data(), all(rows));
      EXPECT_TRUE(closeRel(loss, lossRef, kTol));
      fused::softmaxCrossEntropyGrad(rows, cols, smoothing, x.data(), labels.data(), dloss.data(),
                                     dl.data());
      ref::softmaxCrossEntropyGrad(cols, smoothing, win(x), lw, win(dloss), dlRef.data(), all(n));
      EXPECT_TRUE(closeRel(dl, dlRef, kTol));
    }
  }
}

TEST_F(Fused, LabelOutOfRangeMessage) {
  const Vec logits(4 * 10, 0.0f);
  const std::vector<std::int32_t> labels = {0, 1, 2, 10};
  Vec loss(4), dloss(4, 1.0f), dl(40);
  try {
    fused::softmaxCrossEntropy(4, 10, 0.0f, logits.data(), labels.data(), loss.data());
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sample 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
  }
  EXPECT_THROW(fused::softmaxCrossEntropyGrad(4, 10, 0.0f, logits.data(), labels.data(),
                                              dloss.data(), dl.data()),
               std::invalid_argument);
}

TEST_F(Fused, EmaUpdate) {
  for (i64 n : {i64{5}, i64{50001}}) {
    Vec r = randomVec(n, 903), rRef = r;
    const Vec val = randomVec(n, 904);
    fused::emaUpdate(0.9f, 1.01f, r.data(), val.data(), n);
    ref::emaUpdate(0.9f, 1.01f, rRef.data(), val.data(), n);
    EXPECT_TRUE(closeRel(r, rRef, 1e-6f));
  }
}

TEST_F(Fused, NumThreads) {
  fused::setNumThreads(1);
  EXPECT_EQ(fused::numThreads(), 1);
  fused::setNumThreads(2);
  EXPECT_EQ(fused::numThreads(), 2);
  EXPECT_THROW(fused::setNumThreads(0), std::invalid_argument);
}

// LAMB's one-loop moments against the ops it stands for, run one after another as the update
// group's members did (the unary / binary chunk functions, apply_update), bit for bit: with
// and without the state's keep, with a skipped update, over a length with a vector tail.
TEST(LambMoments, EqualsTheOpsItStandsForToTheBit) {
  const i64 n = 1000 + 13;
  const Vec g = randomVec(n, 1, -3.0f, 3.0f), w = randomVec(n, 2);
  const Vec m0 = randomVec(n, 3, -0.1f, 0.1f), v0 = randomVec(n, 4, 0.0f, 0.2f);
  struct Case {
    float mKeep, vKeep;
    bool vSkipped;
  };
  for (const Case& k :
       {Case{0.9f, 0.999f, false}, Case{0.0f, 0.0f, false}, Case{0.9f, 0.999f, true}}) {
    LambMoments a;
    a.clip = 0.37f;
    a.mKeep = k.mKeep;
    a.mFactor = 1.0f;
    a.mC = 0.1f;
    a.vKeep = k.vKeep;
    a.vFactor = 1.0f;
    a.vC = 0.001f;
    a.vSkipped = k.vSkipped;
    a.mCorrection = 0.271f;
    a.vCorrection = 0.00299f;
    a.eps = 1e-6f;
    a.decay = 0.01f;
    // The ops, one after another over the whole length.
    Vec m = m0, v = v0, gc(n), g2(n), mHat(n), vHat(n), vSqrt(n), denominator(n), step(n),
        decayed(n), u(n);
    const Vec clip(n, a.clip), mCorrection(n, a.mCorrection), vCorrection(n, a.vCorrection),
        eps(n, a.eps);
    fused::binaryChunk(BinaryKind::Mul, g.data(), clip.data(), gc.data(), n);
    const float* gcIn[] = {gc.data()};
    applyUpdate(a.mKeep, a.mFactor, 1, gcIn, &a.mC, m.data(), n);
    fused::unaryChunk(UnaryKind::Square, 1.0f, gc.data(), g2.data(), n);
    const float* g2In[] = {g2.data()};
    if (!a.vSkipped) applyUpdate(a.vKeep, a.vFactor, 1, g2In, &a.vC, v.data(), n);
    fused::binaryChunk(BinaryKind::Div, m.data(), mCorrection.data(), mHat.data(), n);
    fused::binaryChunk(BinaryKind::Div, v.data(), vCorrection.data(), vHat.data(), n);
    fused::unaryChunk(UnaryKind::Sqrt, 1.0f, vHat.data(), vSqrt.data(), n);
    fused::binaryChunk(BinaryKind::Add, vSqrt.data(), eps.data(), denominator.data(), n);
    fused::binaryChunk(BinaryKind::Div, mHat.data(), denominator.data(), step.data(), n);
    fused::unaryChunk(UnaryKind::Scale, a.decay, w.data(), decayed.data(), n);
    fused::binaryChunk(BinaryKind::Add, step.data(), decayed.data(), u.data(), n);
    // The loop, in two calls (the engine's chunks).
    Vec m1 = m0, v1 = v0, u1(n, -1.0f);
    a.g = g.data();
    a.m = m1.data();
    a.v = v1.data();
    a.w = w.data();
    a.u = u1.data();
    lambMoments(a, 0, 512);
    lambMoments(a, 512, n - 512);
    for (i64 i = 0; i < n; ++i) {
      ASSERT_EQ(m1[i], m[i]) << "m " << i;
      ASSERT_EQ(v1[i], v[i]) << "v " << i;
      ASSERT_EQ(u1[i], u[i]) << "u " << i;
    }
    if (a.vSkipped) {
      EXPECT_EQ(v1, v0);
    }
  }
}

}  // namespace
}  // namespace ipu::kernels
