// LARS: the optimizer_update "lars", lowered by the compiler into the norms of the weight and
// its gradient, a per-weight learning rate and an SGD momentum step, against a plain
// double-precision implementation of TensorFlow's LARSOptimizer (the MLPerf ResNet-50 reference's
// optimizer), in both engine modes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "op_test_util.h"

namespace ipu::testing {
namespace {

constexpr i64 kRows = 96, kCols = 40;  // the weight: 3,840 elements, spread over several tiles
constexpr double kEta = 0.001, kMomentum = 0.9, kWeightDecay = 5e-4, kEpsilon = 1e-9;

// loss = sum((x * w + b)^2) / 2 over a [rows, cols] weight and a [cols] bias; LARS on w only.
Graph larsGraph(DType dt = DType::F32) {
  Graph g("lars");
  Builder b(g);
  int w = b.variable("w", {kRows, kCols}, dt);
  int bias = b.variable("b", {kCols}, dt);
  int x = b.input("x", {kRows, kCols}, dt);
  int lr = b.input("lr", {});
  int y = b.add(b.mul(x, w), bias);
  int loss = b.scale(b.reduceSum(b.mul(y, y), {0, 1}, false), 0.5, "loss");
  g.markOutput(loss);
  auto grads = appendBackward(g, loss, {w, bias}).grads;
  SgdOptions o;
  o.momentum = kMomentum;
  o.weightDecay = kWeightDecay;
  o.larsEta = kEta;
  o.larsEpsilon = kEpsilon;
  o.decay = [](const Tensor& t) { return t.name == "w"; };
  appendSgdUpdate(g, grads, lr, o);
  return g;
}

// TensorFlow's LARSOptimizer step (tf.contrib.opt): trust ratio from the norms, then
// apply_momentum with the scaled rate; the skip-listed bias takes the plain rate, no decay.
struct Reference {
  std::vector<double> w, v, b, vb;
  void step(const std::vector<float>& x, double lr) {
    const size_t n = w.size();
    std::vector<double> gw(n), gb(static_cast<size_t>(kCols), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double y = x[i] * w[i] + b[i % kCols];
      gw[i] = y * x[i];
      gb[i % kCols] += y;
    }
    double wn = 0, gn = 0;
    for (size_t i = 0; i < n; ++i) wn += w[i] * w[i], gn += gw[i] * gw[i];
    wn = std::sqrt(wn), gn = std::sqrt(gn);
    const double trust = wn > 0 && gn > 0 ? kEta * wn / (gn + kWeightDecay * wn + kEpsilon) : 1.0;
    for (size_t i = 0; i < n; ++i) {
      v[i] = kMomentum * v[i] + gw[i] + kWeightDecay * w[i];
      w[i] -= lr * trust * v[i];
    }
    for (size_t c = 0; c < b.size(); ++c) {
      vb[c] = kMomentum * vb[c] + gb[c];
      b[c] -= lr * vb[c];
    }
  }
};

double maxRelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / std::max(scale, 1e-30);
}

TEST(Lars, MatchesTensorFlowsLarsOptimizerInBothModes) {
  auto exe = std::make_shared<Executable>(compile(larsGraph(), testTarget()));
  // The weight is split over tiles, so its norms are reductions across tiles.
  EXPECT_GT(exe->mapping[exe->graph.get("w")].size(), 1u);
  const std::vector<float> x = randomVec(kRows * kCols, 3), w0 = randomVec(kRows * kCols, 4),
                           b0 = randomVec(kCols, 5);
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor("w", w0);
    e.writeTensor("b", b0);
    e.writeTensor("w/momentum", std::vector<float>(w0.size(), 0.f));
    e.writeTensor("b/momentum", std::vector<float>(b0.size(), 0.f));
    e.connectInput(exe->graph.get("x"), x.data());
    Reference ref{{w0.begin(), w0.end()},
                  std::vector<double>(w0.size(), 0.0),
                  {b0.begin(), b0.end()},
                  std::vector<double>(b0.size(), 0.0)};
    // A warm-up-like schedule: the rate changes every step, the trust ratio with the weights.
    for (float lr : {2.0f, 4.0f, 6.0f, 3.0f}) {
      e.connectInput(exe->graph.get("lr"), &lr);
      e.run();
      ref.step(x, lr);
    }
    EXPECT_LT(maxRelativeError(e.readFloats("w"), ref.w), 2e-5) << engineModeName(mode);
    EXPECT_LT(maxRelativeError(e.readFloats("b"), ref.b), 2e-5) << engineModeName(mode);
    // And LARS mattered: plain SGD at these rates moves w far more (trust ~ 1e-3).
    double moved = 0, sgdMove = 0;
    for (size_t i = 0; i < w0.size(); ++i) moved = std::max(moved, std::fabs(ref.w[i] - w0[i]));
    for (size_t i = 0; i < w0.size(); ++i) sgdMove = std::max(sgdMove, 2.0 * std::fabs(x[i]));
    EXPECT_LT(moved, 0.1 * sgdMove);
  }
}

TEST(Lars, LowersToNormsARateAndApplyUpdates) {
  Graph g = larsGraph();
  EXPECT_EQ(expandOptimizers(g).updates, 2);  // w (LARS) and the skip-listed bias (SGD)
  int rateOp = -1, writes = 0;
  for (const Op& op : g.ops()) {
    EXPECT_NE(op.kind, OpKind::OptimizerUpdate);
    if (op.kind == OpKind::LarsLearningRate) {
      rateOp = op.id;
      EXPECT_EQ(g.tensor(op.outputs[0]).name, "w/lars_lr");
      EXPECT_EQ(g.tensor(op.inputs[0]).name, "w/lars_weight_sumsq");
      EXPECT_EQ(g.tensor(op.inputs[1]).name, "w/lars_grad_sumsq");
    }
    if (op.kind != OpKind::ApplyUpdate) continue;
    ++writes;
    const std::string target = g.tensor(op.inputs[0]).name;
    if (target == "w" || target == "w/momentum") {
      EXPECT_LT(rateOp, op.id) << target;
    }
  }
  EXPECT_GE(rateOp, 0);
  EXPECT_EQ(writes, 4);                       // w, w/momentum, b, b/momentum
  EXPECT_EQ(expandOptimizers(g).updates, 0);  // lowered once: lowering again changes nothing
}

TEST(Lars, SixteenBitWeightsAreWidenedForTheirNorms) {
  // f16 weights and gradients ("16.16" runs): the norms and the rate are f32.
  Graph g = larsGraph(DType::F16);
  expandOptimizers(g);
  for (const std::string what : {"weight", "grad"}) {
    const Tensor& sq = g.tensor(g.get("w/lars_" + what + "_squared"));
    EXPECT_EQ(sq.dtype, DType::F32) << what;
    EXPECT_EQ(sq.shape, (Shape{kRows, kCols})) << what;
    EXPECT_EQ(g.tensor(g.get("w/lars_" + what + "_sumsq")).elements(), 1) << what;
  }
  auto exe = std::make_shared<Executable>(compile(larsGraph(DType::F16), Target::mk2(), {}));
  EXPECT_EQ(exe->graph.tensor(exe->graph.get("w/lars_lr")).dtype, DType::F32);
}

TEST(Lars, RateUnderLossScalingAndAtZeroNorms) {
  using kernels::ref::larsLearningRate;
  const float plain = larsLearningRate(0.5f, 4.0f, 9.0f, 1.0f, 0.001f, 1e-4f, 0.0f);
  EXPECT_NEAR(plain, 0.5 * 0.001 * 2.0 / (3.0 + 1e-4 * 2.0), 1e-9);
  // Gradients scaled by S = 128: the sum of squares grows by S^2, 1/S undoes it.
  EXPECT_FLOAT_EQ(larsLearningRate(0.5f, 4.0f, 9.0f * 128 * 128, 1.0f / 128, 0.001f, 1e-4f, 0.0f),
                  plain);
  // TensorFlow's where(): a zero weight or a zero gradient keeps the plain rate.
  EXPECT_EQ(larsLearningRate(0.5f, 0.0f, 9.0f, 1.0f, 0.001f, 1e-4f, 0.0f), 0.5f);
  EXPECT_EQ(larsLearningRate(0.5f, 4.0f, 0.0f, 1.0f, 0.001f, 1e-4f, 0.0f), 0.5f);
  // An overflowed step (the scaled update skips it) gives NaN, never a finite made-up rate.
  EXPECT_TRUE(std::isnan(larsLearningRate(0.5f, 4.0f, INFINITY, 1.0f, 0.001f, 0.f, 0.f)));
}

TEST(Lars, BadAttributesAreRefusedNamingTheOp) {
  Graph g("bad");
  Builder b(g);
  int s = b.input("s", {});
  try {
    g.addOp1(OpKind::LarsLearningRate, {s, s, s, s},
             Attrs{{"eta", 0.0}, {"weight_decay", 0.0}, {"epsilon", 0.0}}, "rate");
    FAIL() << "eta 0 accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("lars_learning_rate 'rate'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ipu::testing
