// Reference kernels against hand-computed values and naive whole-tensor formulas, plus the
// partial-reduction and output sub-range properties the tile planner relies on.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "ipu_backend/kernels/elementwise_math.h"
#include "tests/kernels/test_util.h"

namespace ipu::kernels {
namespace {

using testing::all;
using testing::closeRel;
using testing::randomVec;
using testing::Vec;
using testing::win;

// Scatter-style convolution over the whole tensor: every (output, filter tap) pair adds its
// product; structurally unlike the gather loops of the reference kernel.
Vec naiveConv(const Conv2dShape& s, const Vec& x, const Vec& w) {
  const i64 oh = s.outH(), ow = s.outW(), cpg = s.cPerGroup(), kpg = s.kPerGroup();
  Vec y(s.outputElems(), 0.0f);
  for (i64 n = 0; n < s.n; ++n)
    for (i64 g = 0; g < s.groups; ++g)
      for (i64 kl = 0; kl < kpg; ++kl)
        for (i64 p = 0; p < oh; ++p)
          for (i64 q = 0; q < ow; ++q)
            for (i64 r = 0; r < s.r; ++r)
              for (i64 t = 0; t < s.s; ++t)
                for (i64 cl = 0; cl < cpg; ++cl) {
                  const i64 ih = p * s.strideH + r * s.dilH - s.padTop;
                  const i64 iw = q * s.strideW + t * s.dilW - s.padLeft;
                  if (ih < 0 || iw < 0 || ih >= s.h || iw >= s.w) continue;
                  const i64 k = g * kpg + kl, c = g * cpg + cl;
                  y[((n * oh + p) * ow + q) * s.k + k] += x[((n * s.h + ih) * s.w + iw) * s.c + c] *
                                                          w[((k * s.r + r) * s.s + t) * cpg + cl];
                }
  return y;
}

// Checks that computing [0, n) as three sub-ranges gives exactly the one-range result.
void expectSubRangesAgree(i64 n, const std::function<void(Range, float*)>& kernel) {
  Vec full(n), pieces(n);
  kernel(all(n), full.data());
  const i64 cuts[] = {0, n / 3, n / 3 + (n > 2 ? 1 : 0), n};
  for (int i = 0; i < 3; ++i) {
    kernel(Range{cuts[i], cuts[i + 1]}, pieces.data() + cuts[i]);
  }
  EXPECT_EQ(full, pieces);
}

// ---- hand-checked --------------------------------------------------------------------------

TEST(RefConv, HandChecked2x2) {
  Conv2dShape s;
  s.h = s.w = 3;
  s.r = s.s = 2;
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 2, 3, 4};
  EXPECT_EQ(testing::refConvFwd(s, x, w), (Vec{37, 47, 67, 77}));
}

TEST(RefConv, HandCheckedOnesPad1) {
  Conv2dShape s;
  s.h = s.w = 3;
  s.r = s.s = 3;
  s.padTop = s.padLeft = s.padBottom = s.padRight = 1;
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w(9, 1.0f);
  EXPECT_EQ(testing::refConvFwd(s, x, w), (Vec{12, 21, 16, 27, 45, 33, 24, 39, 28}));
}

TEST(RefConv, HandCheckedDepthwise) {
  // Two channels, 1x1 filters: channel 0 scaled by 2, channel 1 by -1.
  Conv2dShape s;
  s.h = 1;
  s.w = 2;
  s.c = s.k = s.groups = 2;
  const Vec x = {1, 10, 2, 20}, w = {2, -1};
  EXPECT_EQ(testing::refConvFwd(s, x, w), (Vec{2, -10, 4, -20}));
}

struct NaiveConvCase {
  const char* name;
  Conv2dShape s;
};

Conv2dShape convShape(i64 n, i64 h, i64 w, i64 c, i64 k, i64 r, i64 s, i64 stride, i64 pt, i64 pl,
                      i64 pb, i64 pr, i64 dil, i64 groups) {
  Conv2dShape cs;
  cs.n = n, cs.h = h, cs.w = w, cs.c = c, cs.k = k, cs.r = r, cs.s = s;
  cs.strideH = cs.strideW = stride;
  cs.padTop = pt, cs.padLeft = pl, cs.padBottom = pb, cs.padRight = pr;
  cs.dilH = cs.dilW = dil;
  cs.groups = groups;
  return cs;
}

TEST(RefConv, MatchesNaiveFormula) {
  const Conv2dShape cases[] = {
      convShape(2, 7, 6, 4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1),
      convShape(2, 9, 8, 4, 6, 3, 2, 2, 1, 0, 2, 1, 2, 1),  // stride 2, dil 2, asymmetric pad
      convShape(1, 6, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2),  // grouped
      convShape(2, 5, 7, 5, 5, 3, 3, 2, 1, 1, 1, 1, 1, 5),  // depthwise
      convShape(1, 8, 8, 3, 4, 5, 5, 2, 2, 2, 2, 2, 1, 1),
  };
  unsigned seed = 1;
  for (const auto& s : cases) {
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++);
    EXPECT_TRUE(closeRel(testing::refConvFwd(s, x, w), naiveConv(s, x, w), 1e-5f));
  }
}

// The data gradient from dy in k-blocks (the split over k of an ungrouped convolution, each part
// reading the blocks its k-range spans) equals the plain kernel bit for bit over the same k-range,
// including ranges that start and end inside a block and a last block smaller than the others.
TEST(RefConv, DataGradientFromDyKBlocksEqualsThePlainKernelOverItsRange) {
  const Conv2dShape s = convShape(2, 5, 6, 3, 22, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  const i64 kb = 8, pixels = s.n * s.outH() * s.outW();  // blocks of 8, 8, 6 channels
  const Vec dy = randomVec(s.outputElems(), 11), w = randomVec(s.weightElems(), 12);
  Vec blocks(dy.size());
  ref::toChannelBlocks(pixels, s.k, kb, win(dy), blocks.data(), all(s.outputElems()));
  for (const Range red : {Range{0, 22}, Range{3, 13}, Range{8, 16}, Range{15, 22}, Range{17, 19}}) {
    std::vector<ref::W> spanned;
    for (i64 b = red.begin / kb; b * kb < red.end; ++b) {
      const i64 begin = b * kb * pixels, size = std::min(kb, s.k - b * kb) * pixels;
      spanned.push_back(ref::W{blocks.data() + begin, begin, size});
    }
    Vec want(static_cast<size_t>(s.inputElems())), got(want.size());
    ref::conv2dBackwardData(s, win(dy), win(w), want.data(), all(s.inputElems()), red);
    ref::conv2dBackwardDataKBlocks(s, kb, spanned, win(w), got.data(), all(s.inputElems()), red);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << "k " << red.begin << ".." << red.end << " element " << i;
  }
}

TEST(RefMatMul, MatchesNaiveAllFlags) {
  for (int flags = 0; flags < 8; ++flags) {
    MatMulShape s;
    s.batch = 3, s.m = 4, s.k = 5, s.n = 6;
    s.transA = flags & 1, s.transB = flags & 2, s.broadcastB = flags & 4;
    const Vec a = randomVec(s.aElems(), 10 + flags), b = randomVec(s.bElems(), 20 + flags);
    Vec expect(s.cElems(), 0.0f);
    for (i64 bt = 0; bt < s.batch; ++bt) {
      const i64 bb = s.broadcastB ? 0 : bt;
      for (i64 i = 0; i < s.m; ++i)
        for (i64 j = 0; j < s.n; ++j)
          for (i64 kk = 0; kk < s.k; ++kk) {
            // A[bt] as a matrix with rows i and cols kk, whatever its storage.
            const float av =
                s.transA ? a[bt * s.m * s.k + kk * s.m + i] : a[bt * s.m * s.k + i * s.k + kk];
            const float bv =
                s.transB ? b[bb * s.k * s.n + j * s.k + kk] : b[bb * s.k * s.n + kk * s.n + j];
            expect[(bt * s.m + i) * s.n + j] += av * bv;
          }
    }
    EXPECT_TRUE(closeRel(testing::refMatMul(s, a, b), expect, 1e-5f)) << "flags " << flags;
  }
}

TEST(RefElementwise, UnaryValues) {
  const Vec x = {-1.5f, -0.25f, 0.5f, 2.0f};
  const Vec pos = {0.25f, 0.5f, 1.0f, 4.0f};
  auto run = [](UnaryKind k, const Vec& in, float alpha = 0) {
    Vec y(in.size());
    ref::unary(k, alpha, win(in), y.data(), all(in.size()));
    return y;
  };
  EXPECT_EQ(run(UnaryKind::Relu, x), (Vec{0, 0, 0.5f, 2.0f}));
  EXPECT_EQ(run(UnaryKind::Neg, x), (Vec{1.5f, 0.25f, -0.5f, -2.0f}));
  EXPECT_EQ(run(UnaryKind::Square, x), (Vec{2.25f, 0.0625f, 0.25f, 4.0f}));
  EXPECT_EQ(run(UnaryKind::Scale, x, 2.0f), (Vec{-3.0f, -0.5f, 1.0f, 4.0f}));
  EXPECT_EQ(run(UnaryKind::Identity, x), x);
  EXPECT_EQ(run(UnaryKind::Sqrt, pos), (Vec{0.5f, std::sqrt(0.5f), 1.0f, 2.0f}));
  EXPECT_TRUE(closeRel(run(UnaryKind::Rsqrt, pos), (Vec{2.0f, 1.4142135f, 1.0f, 0.5f}), 1e-6f));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    EXPECT_NEAR(run(UnaryKind::Exp, x)[i], std::exp(v), 1e-6);
    EXPECT_NEAR(run(UnaryKind::Log, pos)[i], std::log(double(pos[i])), 1e-6);
    EXPECT_NEAR(run(UnaryKind::Sigmoid, x)[i], 1 / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(run(UnaryKind::Tanh, x)[i], std::tanh(v), 1e-6);
    EXPECT_NEAR(run(UnaryKind::Gelu, x)[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
    EXPECT_NEAR(run(UnaryKind::Swish, x)[i], v / (1 + std::exp(-v)), 1e-6);
  }
  EXPECT_NEAR(run(UnaryKind::Gelu, Vec{1.0f})[0], 0.8413447f, 1e-6);  // GELU(1), erf form
}

TEST(RefElementwise, BinaryBroadcastHandChecked) {
  const auto s = BroadcastShape::make({2, 3}, {3});
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.outElems(), 6);
  const Vec a = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30};
  Vec y(6);
  ref::binary(BinaryKind::Add, s, win(a), win(b), y.data(), all(6));
  EXPECT_EQ(y, (Vec{11, 22, 33, 14, 25, 36}));
  // [2,1] with [1,3] -> [2,3]
  const auto s2 = BroadcastShape::make({2, 1}, {1, 3});
  const Vec c = {1, 2}, d = {1, 2, 4};
  ref::binary(BinaryKind::Mul, s2, win(c), win(d), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 2, 4, 2, 4, 8}));
  ref::binary(BinaryKind::Max, s2, win(c), win(d), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 2, 4, 2, 2, 4}));
  ref::binary(BinaryKind::Sub, s2, win(c), win(d), y.data(), all(6));
  EXPECT_EQ(y, (Vec{0, -1, -3, 1, 0, -2}));
  ref::binary(BinaryKind::Div, s2, win(c), win(d), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 0.5f, 0.25f, 2, 1, 0.5f}));
  ref::binary(BinaryKind::Min, s2, win(c), win(d), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 1, 1, 1, 2, 2}));
}

TEST(RefElementwise, BroadcastShapeStrides) {
  const auto s = BroadcastShape::make({4, 1, 3}, {5, 1});
  ASSERT_EQ(s.rank, 3);
  EXPECT_EQ((std::vector<i64>{s.outDims[0], s.outDims[1], s.outDims[2]}),
            (std::vector<i64>{4, 5, 3}));
  EXPECT_EQ((std::vector<i64>{s.aStrides[0], s.aStrides[1], s.aStrides[2]}),
            (std::vector<i64>{3, 0, 1}));
  EXPECT_EQ((std::vector<i64>{s.bStrides[0], s.bStrides[1], s.bStrides[2]}),
            (std::vector<i64>{0, 1, 0}));
  const auto scalar = BroadcastShape::make({}, {});
  EXPECT_EQ(scalar.rank, 0);
  EXPECT_EQ(scalar.outElems(), 1);
}

TEST(RefReduce, HandChecked) {
  // x[2,3] = {{1,2,3},{4,5,6}}
  const Vec x = {1, 2, 3, 4, 5, 6};
  const ReduceShape rows{{2, 3}, {false, true}}, cols{{2, 3}, {true, false}};
  Vec y(3);
  ref::reduce(ReduceKind::Sum, rows, win(x), y.data(), all(2), all(3));
  EXPECT_EQ((Vec{y[0], y[1]}), (Vec{6, 15}));
  ref::reduce(ReduceKind::Mean, cols, win(x), y.data(), all(3), all(2));
  EXPECT_EQ(y, (Vec{2.5f, 3.5f, 4.5f}));
  ref::reduce(ReduceKind::Max, cols, win(x), y.data(), all(3), all(2));
  EXPECT_EQ(y, (Vec{4, 5, 6}));
  EXPECT_EQ(cols.outElems(), 3);
  EXPECT_EQ(cols.reducedCount(), 2);
  EXPECT_EQ(cols.inElems(), 6);
}

TEST(RefTranspose, HandChecked) {
  const Vec x = {1, 2, 3, 4, 5, 6};  // [2,3]
  Vec y(6);
  ref::transpose({2, 3}, {1, 0}, win(x), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 4, 2, 5, 3, 6}));
  // [1,2,3] -> perm {2,0,1} -> [3,1,2]
  ref::transpose({1, 2, 3}, {2, 0, 1}, win(x), y.data(), all(6));
  EXPECT_EQ(y, (Vec{1, 4, 2, 5, 3, 6}));
}

TEST(RefPool, HandChecked) {
  Pool2dShape s;
  s.h = s.w = 4;
  s.kh = s.kw = 2;
  s.strideH = s.strideW = 2;
  Vec x(16);
  for (int i = 0; i < 16; ++i) x[i] = float(i);
  Vec y(4);
  ref::maxPoolForward(s, win(x), y.data(), all(4));
  EXPECT_EQ(y, (Vec{5, 7, 13, 15}));
  ref::avgPoolForward(s, win(x), y.data(), all(4));
  EXPECT_EQ(y, (Vec{2.5f, 4.5f, 10.5f, 12.5f}));
  const Vec dy = {1, 2, 3, 4};
  Vec dx(16);
  ref::maxPoolBackward(s, win(x), win(dy), dx.data(), all(16));
  Vec expect(16, 0.0f);
  expect[5] = 1, expect[7] = 2, expect[13] = 3, expect[15] = 4;
  EXPECT_EQ(dx, expect);
  // Padding: 3x3 window, pad 1, on a 2x2 image of ones. Exclude-pad average is 1 everywhere;
  // include-pad divides by 9.
  Pool2dShape p;
  p.h = p.w = 2;
  p.kh = p.kw = 3;
  p.padTop = p.padLeft = p.padBottom = p.padRight = 1;
  const Vec ones(4, 1.0f);
  ref::avgPoolForward(p, win(ones), y.data(), all(4));
  EXPECT_EQ(y, Vec(4, 1.0f));
  p.countIncludePad = true;
  ref::avgPoolForward(p, win(ones), y.data(), all(4));
  EXPECT_EQ(y, Vec(4, 4.0f / 9.0f));
  // Ties: the first maximum (row-major) of the window takes the gradient.
  Pool2dShape t;
  t.h = t.w = 2;
  t.kh = t.kw = 2;
  const Vec tie(4, 3.0f), one = {1.0f};
  Vec g(4);
  ref::maxPoolBackward(t, win(tie), win(one), g.data(), all(4));
  EXPECT_EQ(g, (Vec{1, 0, 0, 0}));
}

TEST(RefLoss, HandChecked) {
  const Vec logits = {0, 0, 1, 1};  // 2 samples x 2 classes
  const std::vector<std::int32_t> labels = {0, 1};
  const auto lw = Window<std::int32_t>::whole(labels.data(), 2);
  Vec loss(2);
  ref::softmaxCrossEntropy(2, 0.0f, win(logits), lw, loss.data(), all(2));
  EXPECT_NEAR(loss[0], std::log(2.0), 1e-6);
  EXPECT_NEAR(loss[1], std::log(2.0), 1e-6);
  // Smoothing 0.2 over 2 classes: target {0.9, 0.1}; logits {0, ln 3} -> softmax {1/4, 3/4}.
  const Vec l2 = {0, float(std::log(3.0))};
  const std::vector<std::int32_t> lab2 = {0};
  ref::softmaxCrossEntropy(2, 0.2f, win(l2), Window<std::int32_t>::whole(lab2.data(), 1),
                           loss.data(), all(1));
  EXPECT_NEAR(loss[0], -(0.9 * std::log(0.25) + 0.1 * std::log(0.75)), 1e-6);
  const Vec dl = {2.0f};
  Vec dlogits(2);
  ref::softmaxCrossEntropyGrad(2, 0.2f, win(l2), Window<std::int32_t>::whole(lab2.data(), 1),
                               win(dl), dlogits.data(), all(2));
  EXPECT_NEAR(dlogits[0], 2.0 * (0.25 - 0.9), 1e-6);
  EXPECT_NEAR(dlogits[1], 2.0 * (0.75 - 0.1), 1e-6);
  Vec sm(2);
  ref::softmax(2, win(l2), sm.data(), all(2));
  EXPECT_NEAR(sm[0], 0.25, 1e-6);
  EXPECT_NEAR(sm[1], 0.75, 1e-6);
}

TEST(RefEmaUpdate, HandChecked) {
  Vec run = {1.0f};
  const Vec val = {3.0f};
  ref::emaUpdate(0.9f, 2.0f, run.data(), val.data(), 1);
  EXPECT_NEAR(run[0], 0.9f + 0.1f * 6.0f, 1e-6);
}

TEST(RefBatchNorm, NormalizeHandChecked) {
  // rows=2, c=1: x = {1, 3}: mean 2, var 1.
  const Vec x = {1, 3};
  Vec mean, var;
  testing::refBnStats(2, 1, x, mean, var);
  EXPECT_EQ(mean, Vec{2.0f});
  EXPECT_EQ(var, Vec{1.0f});
  const Vec gamma = {2.0f}, beta = {0.5f};
  Vec y(2);
  ref::batchNormNormalize(2, 1, 0.0f, win(x), win(mean), win(var), win(gamma), win(beta), y.data(),
                          all(2));
  EXPECT_EQ(y, (Vec{-1.5f, 2.5f}));
}

// ---- errors --------------------------------------------------------------------------------

TEST(RefErrors, LabelOutOfRangeNamesSampleLabelAndClasses) {
  const Vec logits(3 * 10, 0.0f);
  const std::vector<std::int32_t> labels = {0, 12, 3};
  const auto lw = Window<std::int32_t>::whole(labels.data(), 3);
  Vec loss(3), dl(3, 1.0f), dlogits(30);
  try {
    ref::softmaxCrossEntropy(10, 0.0f, win(logits), lw, loss.data(), all(3));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sample 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10"), std::string::npos) << msg;
  }
  EXPECT_THROW(
      ref::softmaxCrossEntropyGrad(10, 0.0f, win(logits), lw, win(dl), dlogits.data(), all(30)),
      std::invalid_argument);
  const std::vector<std::int32_t> negative = {-1};
  EXPECT_THROW(ref::softmaxCrossEntropy(10, 0.0f, win(logits),
                                        Window<std::int32_t>::whole(negative.data(), 1),
                                        loss.data(), all(1)),
               std::invalid_argument);
}

TEST(RefErrors, BroadcastIncompatibleNamesBothShapes) {
  try {
    BroadcastShape::make({2, 3}, {4});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(BroadcastShape::make({1, 1, 1, 1, 1, 1, 2}, {2}), std::invalid_argument);
}

// ---- partial reductions --------------------------------------------------------------------

TEST(RefPartials, ConvBackwardFilterSplitOverOutputRows) {
  const Conv2dShape s = convShape(4, 6, 5, 4, 6, 3, 3, 2, 1, 1, 0, 1, 1, 2);
  const Vec x = randomVec(s.inputElems(), 1), dy = randomVec(s.outputElems(), 2);
  const Vec full = testing::refConvBwdFilter(s, x, dy);
  Vec sum(full.size(), 0.0f), part(full.size());
  const i64 rows = s.n * s.outH();  // parts cut images in the middle, as the planner does
  for (Range red : {Range{0, 1}, Range{1, 4}, Range{4, rows - 1}, Range{rows - 1, rows}}) {
    ref::conv2dBackwardFilter(s, win(x), win(dy), part.data(), all(s.weightElems()), red);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  EXPECT_TRUE(closeRel(sum, full, 1e-5f));
}

TEST(RefPartials, ConvBackwardDataSplitOverOutputChannels) {
  // Grouped, so that parts also cut through groups.
  const Conv2dShape s = convShape(2, 5, 5, 4, 6, 3, 3, 2, 1, 1, 1, 1, 1, 2);
  const Vec dy = randomVec(s.outputElems(), 5), w = randomVec(s.weightElems(), 6);
  const Vec full = testing::refConvBwdData(s, dy, w);
  Vec sum(full.size(), 0.0f), part(full.size());
  for (Range red : {Range{0, 2}, Range{2, 3}, Range{3, 6}}) {
    ref::conv2dBackwardData(s, win(dy), win(w), part.data(), all(s.inputElems()), red);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  EXPECT_TRUE(closeRel(sum, full, 1e-5f));
}

// The transposed-weights plan of the data gradient (compiler/conv_plan.h): w -> k-blocks (the
// last block shorter) -> wt[C,R,S,K], each step over sub-ranges as tiles compute them, then dx
// from wt: the same bits as the untransposed kernel over every k (same sum, same order).
TEST(RefTransposedWeights, KBlocksThenTransposeThenDataGradientEqualTheDirectKernel) {
  for (const Conv2dShape& s : {convShape(2, 7, 6, 5, 7, 3, 3, 2, 1, 1, 1, 1, 1, 1),
                               convShape(3, 6, 6, 8, 12, 1, 1, 2, 0, 0, 0, 0, 1, 1),
                               convShape(1, 5, 7, 3, 4, 3, 2, 1, 2, 0, 1, 1, 2, 1)}) {
    const Vec dy = randomVec(s.outputElems(), 7), w = randomVec(s.weightElems(), 8);
    const i64 kb = 3, blocks = (s.k + kb - 1) / kb, n = s.weightElems();
    Vec kBlocks(n), wt(n);
    expectSubRangesAgree(
        n, [&](Range r, float* out) { ref::conv2dWeightsToKBlocks(s, kb, win(w), out, r); });
    ref::conv2dWeightsToKBlocks(s, kb, win(w), kBlocks.data(), all(n));
    const std::vector<ref::W> windows(static_cast<size_t>(blocks), win(kBlocks));
    expectSubRangesAgree(
        n, [&](Range r, float* out) { ref::conv2dKBlocksToTransposed(s, kb, windows, out, r); });
    ref::conv2dKBlocksToTransposed(s, kb, windows, wt.data(), all(n));
    for (i64 k = 0; k < s.k; ++k)  // wt[c][r][t][k] = w[k][r][t][c]
      for (i64 rt = 0; rt < s.r * s.s; ++rt)
        for (i64 c = 0; c < s.c; ++c)
          ASSERT_EQ(wt[(c * s.r * s.s + rt) * s.k + k], w[(k * s.r * s.s + rt) * s.c + c]);
    Vec direct(s.inputElems()), transposed(s.inputElems());
    ref::conv2dBackwardData(s, win(dy), win(w), direct.data(), all(s.inputElems()), all(s.k));
    ref::conv2dBackwardDataTransposed(s, win(dy), win(wt), transposed.data(), all(s.inputElems()));
    EXPECT_EQ(direct, transposed);
    EXPECT_TRUE(closeRel(transposed, testing::refConvBwdData(s, dy, w), 1e-5f));
  }
}

TEST(RefPartials, MatMulSplitOverK) {
  MatMulShape s;
  s.batch = 2, s.m = 3, s.k = 10, s.n = 4, s.transA = true;
  const Vec a = randomVec(s.aElems(), 3), b = randomVec(s.bElems(), 4);
  const Vec full = testing::refMatMul(s, a, b);
  Vec sum(full.size(), 0.0f), part(full.size());
  for (Range red : {Range{0, 3}, Range{3, 4}, Range{4, 10}}) {
    ref::matMul(s, win(a), win(b), part.data(), all(s.cElems()), red);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  EXPECT_TRUE(closeRel(sum, full, 1e-5f));
}

TEST(RefPartials, ReduceSplitOverReducedIndices) {
  // x[3,4,5] reduced over dims 0 and 2 (15 reduced indices) -> 4 outputs.
  const ReduceShape s{{3, 4, 5}, {true, false, true}};
  const Vec x = randomVec(s.inElems(), 5);
  for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max}) {
    Vec full(4), acc(4, kind == ReduceKind::Max ? -1e30f : 0.0f), part(4);
    ref::reduce(kind, s, win(x), full.data(), all(4), all(15));
    for (Range red : {Range{0, 4}, Range{4, 11}, Range{11, 15}}) {
      ref::reduce(kind, s, win(x), part.data(), all(4), red);
      for (int i = 0; i < 4; ++i) {
        acc[i] = kind == ReduceKind::Max ? std::max(acc[i], part[i]) : acc[i] + part[i];
      }
    }
    EXPECT_TRUE(closeRel(acc, full, 1e-5f)) << int(kind);
  }
  // Independent check of the full sum.
  Vec y(4);
  ref::reduce(ReduceKind::Sum, s, win(x), y.data(), all(4), all(15));
  for (int j = 0; j < 4; ++j) {
    double e = 0;
    for (int a = 0; a < 3; ++a)
      for (int c = 0; c < 5; ++c) e += x[(a * 4 + j) * 5 + c];
    EXPECT_NEAR(y[j], e, 1e-5);
  }
}

TEST(RefPartials, BatchNormSumsSplitOverRows) {
  const i64 rows = 10, c = 3;
  const Vec x = randomVec(rows * c, 6), dy = randomVec(rows * c, 7);
  Vec mean, var;
  testing::refBnStats(rows, c, x, mean, var);
  Vec s1(c), s2(c), b1(c), b2(c);
  ref::batchNormSums(rows, c, win(x), s1.data(), s2.data(), all(c), all(rows));
  ref::batchNormBackwardSums(rows, c, 1e-5f, win(x), win(dy), win(mean), win(var), b1.data(),
                             b2.data(), all(c), all(rows));
  Vec a1(c, 0), a2(c, 0), a3(c, 0), a4(c, 0), p1(c), p2(c), p3(c), p4(c);
  for (Range red : {Range{0, 4}, Range{4, 5}, Range{5, 10}}) {
    ref::batchNormSums(rows, c, win(x), p1.data(), p2.data(), all(c), red);
    ref::batchNormBackwardSums(rows, c, 1e-5f, win(x), win(dy), win(mean), win(var), p3.data(),
                               p4.data(), all(c), red);
    for (int i = 0; i < c; ++i) a1[i] += p1[i], a2[i] += p2[i], a3[i] += p3[i], a4[i] += p4[i];
  }
  EXPECT_TRUE(closeRel(a1, s1, 1e-5f));
  EXPECT_TRUE(closeRel(a2, s2, 1e-5f));
  EXPECT_TRUE(closeRel(a3, b1, 1e-5f));
  EXPECT_TRUE(closeRel(a4, b2, 1e-5f));
  // Channel sub-ranges too: channels [1, 3) only.
  Vec sub1(2), sub2(2);
  ref::batchNormSums(rows, c, win(x), sub1.data(), sub2.data(), Range{1, 3}, all(rows));
  EXPECT_EQ(sub1, (Vec{s1[1], s1[2]}));
}

// ---- output sub-ranges ---------------------------------------------------------------------

TEST(RefSubRanges, EveryKernel) {
  const Conv2dShape cs = convShape(2, 5, 6, 4, 6, 3, 3, 2, 1, 0, 1, 1, 1, 2);
  const Vec x = randomVec(cs.inputElems(), 1), w = randomVec(cs.weightElems(), 2),
            dy = randomVec(cs.outputElems(), 3);
  expectSubRangesAgree(cs.outputElems(),
                       [&](Range o, float* y) { ref::conv2dForward(cs, win(x), win(w), y, o); });
  expectSubRangesAgree(cs.inputElems(), [&](Range o, float* y) {
    ref::conv2dBackwardData(cs, win(dy), win(w), y, o, all(cs.k));
  });
  expectSubRangesAgree(cs.weightElems(), [&](Range o, float* y) {
    ref::conv2dBackwardFilter(cs, win(x), win(dy), y, o, all(cs.n));
  });

  MatMulShape ms;
  ms.batch = 2, ms.m = 3, ms.k = 4, ms.n = 5, ms.transB = true, ms.broadcastB = true;
  const Vec a = randomVec(ms.aElems(), 4), b = randomVec(ms.bElems(), 5);
  expectSubRangesAgree(
      ms.cElems(), [&](Range o, float* y) { ref::matMul(ms, win(a), win(b), y, o, all(ms.k)); });

  const Vec e = randomVec(60, 6, 0.5f, 2.0f), g = randomVec(60, 7);
  expectSubRangesAgree(60,
                       [&](Range o, float* y) { ref::unary(UnaryKind::Gelu, 0, win(e), y, o); });
  expectSubRangesAgree(
      60, [&](Range o, float* y) { ref::unaryGrad(UnaryKind::Log, 0, win(e), win(g), y, o); });
  const auto bs = BroadcastShape::make({3, 4, 5}, {4, 1});
  const Vec bb = randomVec(4, 8);
  expectSubRangesAgree(
      60, [&](Range o, float* y) { ref::binary(BinaryKind::Div, bs, win(e), win(bb), y, o); });
  const ReduceShape rs{{3, 4, 5}, {false, true, false}};
  expectSubRangesAgree(
      15, [&](Range o, float* y) { ref::reduce(ReduceKind::Mean, rs, win(e), y, o, all(4)); });
  expectSubRangesAgree(60, [&](Range o, float* y) {
    ref::transpose({3, 4, 5}, {2, 0, 1}, win(e), y, o);
  });

  Pool2dShape ps;
  ps.n = 2, ps.h = 5, ps.w = 6, ps.c = 3, ps.kh = ps.kw = 3, ps.strideH = ps.strideW = 2;
  ps.padTop = ps.padLeft = 1;
  const Vec px = randomVec(ps.inputElems(), 9), pdy = randomVec(ps.outputElems(), 10);
  expectSubRangesAgree(ps.outputElems(),
                       [&](Range o, float* y) { ref::maxPoolForward(ps, win(px), y, o); });
  expectSubRangesAgree(ps.inputElems(), [&](Range o, float* y) {
    ref::maxPoolBackward(ps, win(px), win(pdy), y, o);
  });
  expectSubRangesAgree(ps.outputElems(),
                       [&](Range o, float* y) { ref::avgPoolForward(ps, win(px), y, o); });
  expectSubRangesAgree(ps.inputElems(),
                       [&](Range o, float* y) { ref::avgPoolBackward(ps, win(pdy), y, o); });

  const i64 rows = 6, c = 10;
  const Vec bx = randomVec(rows * c, 11), bdy = randomVec(rows * c, 12);
  Vec mean, var;
  testing::refBnStats(rows, c, bx, mean, var);
  const Vec gamma = randomVec(c, 13), beta = randomVec(c, 14);
  Vec sumDy(c), sumDyXhat(c);
  ref::batchNormBackwardSums(rows, c, 1e-5f, win(bx), win(bdy), win(mean), win(var), sumDy.data(),
                             sumDyXhat.data(), all(c), all(rows));
  expectSubRangesAgree(rows * c, [&](Range o, float* y) {
    ref::batchNormNormalize(rows, c, 1e-5f, win(bx), win(mean), win(var), win(gamma), win(beta), y,
                            o);
  });
  expectSubRangesAgree(rows * c, [&](Range o, float* y) {
    ref::batchNormBackwardData(rows, c, 1e-5f, win(bx), win(bdy), win(mean), win(var), win(gamma),
                               win(sumDy), win(sumDyXhat), y, o);
  });

  const std::vector<std::int32_t> labels = {1, 9, 0, 4, 4, 7};
  const auto lw = Window<std::int32_t>::whole(labels.data(), rows);
  const Vec dl = randomVec(rows, 15);
  expectSubRangesAgree(
      rows, [&](Range o, float* y) { ref::softmaxCrossEntropy(c, 0.1f, win(bx), lw, y, o); });
  expectSubRangesAgree(rows * c, [&](Range o, float* y) {
    ref::softmaxCrossEntropyGrad(c, 0.1f, win(bx), lw, win(dl), y, o);
  });
  expectSubRangesAgree(rows * c, [&](Range o, float* y) { ref::softmax(c, win(bx), y, o); });
  expectSubRangesAgree(rows * c,
                       [&](Range o, float* y) { ref::softmaxGrad(c, win(bx), win(bdy), y, o); });
}

// Windows: a kernel reading through a window that holds only part of the tensor (what a tile
// has) must give the same values. Unary over [20, 40) with a window of x[20, 40).
TEST(RefWindows, PartialWindowGivesSameValues) {
  const Vec x = randomVec(60, 16);
  Vec full(60), part(20);
  ref::unary(UnaryKind::Tanh, 0, win(x), full.data(), all(60));
  const ref::W w{x.data() + 20, 20, 20};
  ref::unary(UnaryKind::Tanh, 0, w, part.data(), Range{20, 40});
  EXPECT_EQ(part, Vec(full.begin() + 20, full.begin() + 40));
}

// The vectorised exp of the fused softmax rows: within 2 ulp of std::exp over the whole normal
// range (every 97th float bit pattern in [-87.3, 88.7]), 0 below it, inf above, NaN through.
TEST(VectorExp, WithinTwoUlpOfStdExp) {
  auto ulps = [](float a, float b) {
    return std::abs(static_cast<double>(std::bit_cast<std::int32_t>(a)) -
                    static_cast<double>(std::bit_cast<std::int32_t>(b)));
  };
  double worst = 0;
  int checked = 0;
  for (const float sign : {1.0f, -1.0f})
    for (std::uint32_t bits = 0x00800000u; bits < 0x42b17000u; bits += 97) {
      const float x = sign * std::bit_cast<float>(bits);
      const float want = std::exp(x);
      if (want < std::numeric_limits<float>::min()) continue;  // subnormals: checked below
      worst = std::max(worst, ulps(detail::vectorExp(x), want));
      ++checked;
    }
  EXPECT_GT(checked, 20000000);
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(detail::vectorExp(0.0f), 1.0f);
  // Subnormal results round once, like std::exp's, to within one subnormal step.
  EXPECT_NEAR(detail::vectorExp(-100.0f), std::exp(-100.0f),
              std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(detail::vectorExp(-110.0f), 0.0f);
  EXPECT_EQ(detail::vectorExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::vectorExp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(detail::vectorExp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_NEAR(detail::vectorExp(88.7f), std::exp(88.7f), 2e-7 * std::exp(88.7f));
}

}  // namespace
}  // namespace ipu::kernels
