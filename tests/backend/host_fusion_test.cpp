// Host fusions of the fused engine (engine/host_fusion.h): which op pairs fuse, that a fused
// training step computes what tile mode computes op by op, and that a tensor fused away is a
// clear error to read rather than stale memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/engine/host_fusion.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/half.h"

namespace ipu {
namespace {

// A residual block as ResNet's: conv -> bn -> relu -> conv -> bn -> (+ x) -> relu, then a mean
// loss; `blocks` of them in a chain (each block's output is the next one's input and skip, so
// the gradient at a later block's input is the sum of two). `keepBnOutput` marks the first
// batch norm's output as a graph output, which must keep that pair (and its backward) unfused.
struct Block {
  Graph g;
  int x = -1, lr = -1, loss = -1, bn1 = -1, bn2 = -1, sum = -1;
};

Block residualBlock(bool keepBnOutput, int blocks = 1, bool projection = false) {
  Block b;
  Builder B(b.g);
  const i64 n = 4, h = 6, w = 6, c = 16;  // C % 16 == 0: the ReLU-bit path
  b.x = B.input("x", {n, h, w, c});
  b.lr = B.input("lr", {});
  const auto conv = Conv2dOptions::make(1, 1);
  int in = b.x;
  for (int k = 0; k < blocks; ++k) {
    // name("w1") is w1, w1_1, ... (appended, not operator+: GCC 12 warns falsely on that).
    const auto name = [k](const char* base) {
      std::string n(base);
      if (k > 0) n.append("_").append(std::to_string(k));
      return n;
    };
    const int w1 = B.variable(name("w1"), {c, 3, 3, c}), w2 = B.variable(name("w2"), {c, 3, 3, c});
    const int g1 = B.variable(name("g1"), {c}), be1 = B.variable(name("be1"), {c});
    const int g2 = B.variable(name("g2"), {c}), be2 = B.variable(name("be2"), {c});
    const BatchNormOutputs n1 =
        B.batchNormTrain(B.conv2d(in, w1, conv), g1, be1, 1e-5, name("bn1"));
    const int a1 = B.relu(n1.y, name("relu1"));
    const BatchNormOutputs n2 =
        B.batchNormTrain(B.conv2d(a1, w2, conv), g2, be2, 1e-5, name("bn2"));
    int skip = in;
    if (projection) {  // the skip through a 1x1 convolution and its own batch norm
      const int ws = B.variable(name("ws"), {c, 1, 1, c});
      const int gs = B.variable(name("gs"), {c}), bes = B.variable(name("bes"), {c});
      skip =
          B.batchNormTrain(B.conv2d(in, ws, Conv2dOptions::make(1, 0)), gs, bes, 1e-5, name("bnsc"))
              .y;
    }
    const int sum = B.add(n2.y, skip, name("sum"));
    if (k == 0) b.bn1 = n1.y, b.bn2 = n2.y, b.sum = sum;
    in = B.relu(sum, name("out"));
  }
  b.loss = B.reduceMean(B.mul(in, in), {0, 1, 2, 3}, false, "loss");
  b.g.markOutput(b.loss);
  if (keepBnOutput) b.g.markOutput(b.bn1);
  const GradientResult gr = appendBackward(b.g, b.loss, trainableVariables(b.g));
  SgdOptions sgd;
  sgd.momentum = 0.9;
  appendSgdUpdate(b.g, gr.grads, b.lr, sgd);
  return b;
}

struct BlockRun {
  std::shared_ptr<const Executable> exe;
  std::unique_ptr<Engine> engine;
  std::vector<float> x;
  float lr = 0.05f, loss = 0;
};

BlockRun makeRun(const Block& b, EngineMode mode) {
  BlockRun r;
  CompileOptions opts;
  r.exe = std::make_shared<const Executable>(compile(b.g, Target::small(16, 1 << 20), opts));
  r.engine = std::make_unique<Engine>(r.exe, mode);
  const Graph& g = r.exe->graph;
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    std::vector<float> v(static_cast<size_t>(t.elements()));
    const bool gamma = t.name[0] == 'g';
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t.name.find("momentum") != std::string::npos ? 0.0f
             : gamma                                      ? 1.0f + 0.1f * std::sin(float(i))
                     : 0.2f * std::sin(0.7f * float(i) + float(t.id));
    r.engine->writeTensor(t.name, v);
  }
  r.x.resize(static_cast<size_t>(g.tensor(b.x).elements()));
  for (size_t i = 0; i < r.x.size(); ++i) r.x[i] = std::cos(0.37f * float(i));
  r.engine->connectInput(b.x, r.x.data());
  r.engine->connectInput(b.lr, &r.lr);
  r.engine->connectOutput(b.loss, &r.loss);
  return r;
}

// Three SGD steps: fused (with `fusedOps` ops fused away) against tile mode (every op on its
// own, reference kernels): losses and every variable agree within f32 rounding.
void expectFusedStepsEqualTileMode(const Block& b, int fusedOps) {
  BlockRun fused = makeRun(b, EngineMode::Fused), tile = makeRun(b, EngineMode::Tile);
  EXPECT_EQ(fused.engine->hostFusedOps(), fusedOps);
  EXPECT_EQ(tile.engine->hostFusedOps(), 0);
  for (int step = 0; step < 3; ++step) {
    fused.engine->run();
    tile.engine->run();
    EXPECT_NEAR(fused.loss, tile.loss, 1e-5 * std::max(1.0f, std::abs(tile.loss)))
        << "step " << step;
  }
  for (const Tensor& t : fused.exe->graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    const auto f = fused.engine->readFloats(t.name), r = tile.engine->readFloats(t.name);
    double scale = 1e-6;
    for (float v : r) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < f.size(); ++i)
      ASSERT_NEAR(f[i], r[i], 1e-4 * scale) << t.name << "[" << i << "]";
  }
}

TEST(HostFusion, ResidualBlockFusesEveryBatchNormReluAndTheResidualAdd) {
  const Block b = residualBlock(false);
  const HostFusionPlan plan = planHostFusions(b.g);
  // bn1 + relu1; bn2's normalisation, the add and its relu in one pass (bn2 computes only its
  // statistics); relu1's backward into bn1's backward; the loss's two gradients of `out`
  // (out * out) summed into out's ReLU backward.
  EXPECT_EQ(plan.absorbedOps, 4);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(b.bn1)]);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(b.bn2)]);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(b.sum)]);
  int forward = 0, backward = 0, statistics = 0, addBnRelu = 0, addRelu = 0, addReluBackward = 0;
  for (const Op& op : b.g.ops()) {
    const auto r = plan.role[op.id];
    forward += r == HostFusionPlan::Role::kBatchNormRelu;
    backward += r == HostFusionPlan::Role::kBatchNormReluBackward;
    statistics += r == HostFusionPlan::Role::kBatchNormStatistics;
    addRelu += r == HostFusionPlan::Role::kAddRelu;
    addReluBackward += r == HostFusionPlan::Role::kAddReluBackward;
    if (r != HostFusionPlan::Role::kAddBatchNormRelu) continue;
    ++addBnRelu;
    const Op& bn = b.g.op(plan.forwardOp[op.id]);
    EXPECT_EQ(bn.outputs[0], b.bn2);
    EXPECT_EQ(plan.inputsOf(op), (std::vector<int>{bn.inputs[0], b.x}))
        << "it reads bn2's input and the skip, not bn2's output";
    EXPECT_EQ(plan.outputsOf(bn), (std::vector<int>{bn.outputs[1], bn.outputs[2]}));
  }
  EXPECT_EQ(forward, 1);
  EXPECT_EQ(backward, 1);
  EXPECT_EQ(statistics, 1);
  EXPECT_EQ(addBnRelu, 1);
  EXPECT_EQ(addRelu, 0);
  EXPECT_EQ(addReluBackward, 1);
}

// bn2's output kept as a graph output: bn2 normalises on its own, the add + relu still fuse.
TEST(HostFusion, AKeptBatchNormOutputLeavesTheAddAndReluFused) {
  Block b = residualBlock(false);
  b.g.markOutput(b.bn2);
  const HostFusionPlan plan = planHostFusions(b.g);
  EXPECT_FALSE(plan.elided[static_cast<size_t>(b.bn2)]);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(b.sum)]);
  int addRelu = 0, statistics = 0;
  for (auto r : plan.role) {
    addRelu += r == HostFusionPlan::Role::kAddRelu;
    statistics += r == HostFusionPlan::Role::kBatchNormStatistics;
  }
  EXPECT_EQ(addRelu, 1);
  EXPECT_EQ(statistics, 0);
  EXPECT_EQ(plan.absorbedOps, 4);
}

// Two chained blocks: the gradient at the second block's input (its skip's plus its first
// conv's) and the first block's output ReLU backward fuse into one loop, as the loss's two
// gradients of the last output do; fused training steps still equal tile mode.
TEST(HostFusion, GradientSumAndReluBackwardFuseBetweenChainedBlocks) {
  kernels::fused::setNumThreads(2);
  const Block b = residualBlock(false, 2);
  const HostFusionPlan plan = planHostFusions(b.g);
  std::vector<std::string> masks;
  for (const Op& op : b.g.ops()) {
    if (plan.role[op.id] != HostFusionPlan::Role::kAddReluBackward) continue;
    masks.push_back(b.g.tensor(plan.reluX[op.id]).name);
    EXPECT_TRUE(plan.elided[static_cast<size_t>(op.outputs[0])]);
    // Each block's output comes from a fused batch norm + add + relu, which writes its ReLU
    // bits: the gradient reads those, not the output.
    const int writer = plan.reluBitsFrom[op.id];
    ASSERT_GE(writer, 0) << b.g.tensor(plan.reluX[op.id]).name;
    EXPECT_EQ(plan.role[writer], HostFusionPlan::Role::kAddBatchNormRelu);
    EXPECT_TRUE(plan.writesReluBits[writer]);
    EXPECT_EQ(plan.reluOut[writer], plan.reluX[op.id]);
    EXPECT_EQ(plan.inputsOf(op), (std::vector<int>{op.inputs[0], op.inputs[1]}));
  }
  // Backward order: the last block's output first, then the first block's.
  EXPECT_EQ(masks, (std::vector<std::string>{"out_1", "out"}));
  EXPECT_EQ(plan.absorbedOps, 8)
      << "2 x (bn + relu, add + relu, relu grad + bn grad, sum + relu grad)";
  expectFusedStepsEqualTileMode(b, 8);
}

// A projection shortcut's batch norm folds into the add too: both batch norms compute only
// their statistics, the add normalises both operands; training still equals tile mode.
TEST(HostFusion, AProjectionShortcutsBatchNormFoldsIntoTheAdd) {
  kernels::fused::setNumThreads(2);
  const Block b = residualBlock(false, 1, true);
  const HostFusionPlan plan = planHostFusions(b.g);
  int statistics = 0, adds = 0;
  for (const Op& op : b.g.ops()) {
    statistics += plan.role[op.id] == HostFusionPlan::Role::kBatchNormStatistics;
    if (plan.role[op.id] != HostFusionPlan::Role::kAddBatchNormRelu) continue;
    ++adds;
    ASSERT_GE(plan.otherBn[op.id], 0);
    const Op& bnsc = b.g.op(plan.otherBn[op.id]);
    EXPECT_EQ(b.g.tensor(bnsc.outputs[0]).name, "bnsc");
    EXPECT_TRUE(plan.elided[static_cast<size_t>(bnsc.outputs[0])]);
    EXPECT_EQ(plan.inputsOf(op)[1], bnsc.inputs[0]) << "the add reads the shortcut conv's output";
  }
  EXPECT_EQ(statistics, 2);
  EXPECT_EQ(adds, 1);
  expectFusedStepsEqualTileMode(b, 4);
}

TEST(HostFusion, AGraphOutputBetweenTheOpsKeepsThePairUnfused) {
  const Block b = residualBlock(true);
  const HostFusionPlan plan = planHostFusions(b.g);
  EXPECT_EQ(plan.absorbedOps, 2)
      << "only add + relu and its gradient's: bn1's output is a graph output";
  EXPECT_FALSE(plan.elided[static_cast<size_t>(b.bn1)]);
}

// EfficientNet's conv -> batch norm -> swish, twice (the second swish feeds the loss): each
// batch norm writes swish(y) and its backward applies swish'(y) itself (y and the swish's
// gradient never written); a step equals tile mode's. With y a graph output, nothing fuses.
// squeezeExcite: the first swish's output scaled by sigmoid(its spatial mean) per sample and
// channel, as EfficientNet's squeeze-excitation (without its two 1x1 convolutions).
Block swishBlock(bool keepBnOutput, bool squeezeExcite = false) {
  Block b;
  Builder B(b.g);
  const i64 n = 4, h = 6, w = 6, c = 8;
  b.x = B.input("x", {n, h, w, c});
  b.lr = B.input("lr", {});
  int in = b.x;
  for (const char* k : {"1", "2"}) {
    const int wt = B.variable(std::string("w") + k, {c, 3, 3, c});
    const int g = B.variable(std::string("g") + k, {c}),
              be = B.variable(std::string("be") + k, {c});
    const BatchNormOutputs bn = B.batchNormTrain(B.conv2d(in, wt, Conv2dOptions::make(1, 1)), g, be,
                                                 1e-5, std::string("bn") + k);
    if (b.bn1 < 0) b.bn1 = bn.y;
    in = B.unary("swish", bn.y, std::string("swish") + k);
    if (squeezeExcite && b.sum < 0) {
      const int pooled = B.reduceMean(in, {1, 2}, true, "se_pool");
      b.sum = in = B.mul(in, B.unary("sigmoid", pooled, "se_gate"), "se_scaled");
    }
  }
  b.loss = B.reduceMean(B.mul(in, in), {0, 1, 2, 3}, false, "loss");
  b.g.markOutput(b.loss);
  if (keepBnOutput) b.g.markOutput(b.bn1);
  const GradientResult gr = appendBackward(b.g, b.loss, trainableVariables(b.g));
  appendSgdUpdate(b.g, gr.grads, b.lr, SgdOptions{});
  return b;
}

TEST(HostFusion, BatchNormSwishAndItsBackwardFuseAndEqualTileMode) {
  using Role = HostFusionPlan::Role;
  const Block b = swishBlock(false);
  const HostFusionPlan plan = planHostFusions(b.g);
  int forward = 0, backward = 0;
  for (const Op& op : b.g.ops()) {
    const auto id = static_cast<size_t>(op.id);
    if (op.kind == OpKind::BatchNormTrain) {
      EXPECT_EQ(plan.role[id], Role::kBatchNormRelu) << op.id;
      EXPECT_TRUE(plan.swish[id]);
      EXPECT_TRUE(plan.elided[static_cast<size_t>(op.outputs[0])]);
      ++forward;
    } else if (op.kind == OpKind::BatchNormBackward) {
      EXPECT_EQ(plan.role[id], Role::kBatchNormReluBackward) << op.id;
      EXPECT_TRUE(plan.swish[id]);
      EXPECT_TRUE(plan.elided[static_cast<size_t>(op.inputs[1])]);
      ++backward;
    } else if (op.kind == OpKind::Unary || op.kind == OpKind::UnaryGrad) {
      if (op.attrs.getString("fn") == "swish") {
        EXPECT_EQ(plan.role[id], Role::kAbsorbed) << op.id;
      }
    }
  }
  EXPECT_EQ(forward, 2);
  EXPECT_EQ(backward, 2);
  expectFusedStepsEqualTileMode(b, plan.absorbedOps);

  const Block kept = swishBlock(true);
  const HostFusionPlan keptPlan = planHostFusions(kept.g);
  const int keptBn = kept.g.tensor(kept.bn1).producer;
  EXPECT_EQ(keptPlan.role[static_cast<size_t>(keptBn)], Role::kNone);
  EXPECT_FALSE(keptPlan.swish[static_cast<size_t>(keptBn)]);
  expectFusedStepsEqualTileMode(kept, keptPlan.absorbedOps);
}

// The squeeze-excitation gradient's sums run as one pass over dy' and x, and its
// dy = dy' * gate + broadcast(pool gradient) is formed inside the first batch norm + swish
// backward (the chain absorbed, dy never written); three steps equal tile mode's.
TEST(HostFusion, SqueezeExcitationGradientFormsTheSwishBackwardsDy) {
  using Role = HostFusionPlan::Role;
  kernels::fused::setNumThreads(2);
  const Block b = swishBlock(false, true);
  const HostFusionPlan plan = planHostFusions(b.g);
  int perSample = 0, mulSums = 0;
  for (const Op& op : b.g.ops()) {
    const auto id = static_cast<size_t>(op.id);
    if (op.kind == OpKind::BatchNormBackward && plan.perSampleDy[id] >= 0) {
      EXPECT_EQ(plan.role[id], Role::kBatchNormReluBackward);
      EXPECT_EQ(b.g.tensor(plan.perSampleScale[id]).name, "se_gate");
      EXPECT_TRUE(plan.elided[static_cast<size_t>(plan.reluGradIn[id])]);
      EXPECT_EQ(plan.role[static_cast<size_t>(b.g.tensor(plan.reluGradIn[id]).producer)],
                Role::kAbsorbed);
      ++perSample;
    }
    if (plan.role[id] == Role::kMulReduceSum) ++mulSums;
  }
  EXPECT_EQ(perSample, 1);
  EXPECT_EQ(mulSums, 1);
  expectFusedStepsEqualTileMode(b, plan.absorbedOps);
}

TEST(HostFusion, FusedTrainingStepsEqualTileMode) {
  kernels::fused::setNumThreads(2);
  expectFusedStepsEqualTileMode(residualBlock(false), 4);
}

TEST(HostFusion, ReadingATensorFusedAwayNamesItAndTheFix) {
  const Block b = residualBlock(false);
  BlockRun fused = makeRun(b, EngineMode::Fused);
  fused.engine->run();
  try {
    (void)fused.engine->readFloats("bn1");
    FAIL() << "reading a tensor that is never materialised must throw";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'bn1'"), std::string::npos) << m;
    EXPECT_NE(m.find("graph output"), std::string::npos) << m;
  }
  // Tile mode materialises every tensor.
  BlockRun tile = makeRun(b, EngineMode::Tile);
  tile.engine->run();
  EXPECT_NO_THROW((void)tile.engine->readFloats("bn1"));
}

// square -> reduce sum over every axis (the optimizers' norms) runs as one pass; a square that
// anything else reads stays unfused. Both sums equal tile mode and a double-precision sum.
TEST(HostFusion, SquareThenSumIsOnePass) {
  kernels::fused::setNumThreads(2);
  Graph g("sum_of_squares");
  Builder B(g);
  const i64 rows = 300, cols = 301;  // past the parallel threshold: both threads take part
  const int x = B.input("x", {rows, cols});
  const int sq = B.unary("square", x, "squared");
  const int sum = B.reduceSum(sq, {0, 1}, false, "sum");
  const int kept = B.unary("square", x, "kept_squared");
  const int keptSum = B.reduceSum(kept, {0, 1}, false, "kept_sum");
  for (int t : {sum, kept, keptSum}) g.markOutput(t);
  const HostFusionPlan plan = planHostFusions(g);
  EXPECT_EQ(plan.role[static_cast<size_t>(g.tensor(sq).producer)],
            HostFusionPlan::Role::kSquareSum);
  EXPECT_EQ(plan.sumOut[static_cast<size_t>(g.tensor(sq).producer)], sum);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(sq)]);
  EXPECT_EQ(plan.role[static_cast<size_t>(g.tensor(kept).producer)], HostFusionPlan::Role::kNone)
      << "kept_squared is a graph output";
  EXPECT_EQ(plan.absorbedOps, 1);

  std::vector<float> xs(static_cast<size_t>(rows * cols));
  double want = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = std::sin(0.01f * static_cast<float>(i)) * 3.0f;
    want += static_cast<double>(xs[i]) * xs[i];
  }
  auto exe = std::make_shared<const Executable>(compile(g, Target::small(16, 1 << 22)));
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    float got = 0, gotKept = 0;
    std::vector<float> keptValues(xs.size());
    e.connectInput(exe->graph.get("x"), xs.data());
    e.connectOutput(exe->graph.get("sum"), &got);
    e.connectOutput(exe->graph.get("kept_sum"), &gotKept);
    e.connectOutput(exe->graph.get("kept_squared"), keptValues.data());
    e.run();
    EXPECT_NEAR(got, want, 1e-5 * want) << engineModeName(mode);
    EXPECT_NEAR(gotKept, want, 1e-5 * want) << engineModeName(mode);
    EXPECT_FLOAT_EQ(keptValues[7], xs[7] * xs[7]);
    EXPECT_EQ(e.hostFusedOps(), mode == EngineMode::Fused ? 1 : 0);
  }
}

// The squeeze-excitation scale's gradient (EfficientNet): for y = x * s, s [N,1,1,C],
// ds = sum over H, W of dy * x runs as one pass (the products never written), and
// dx = dy * s + broadcast(dp) (the pooling's gradient) as one chain that reads s and dp
// broadcast (the broadcast op absorbed, never written); an add of a broadcast op's result
// alone fuses as a chain of one op. Fused mode gives the op-by-op values to the bit, tile mode
// the same within rounding (its sums split over tiles).
TEST(HostFusion, SqueezeExcitationGradientSumsAndBroadcastChain) {
  kernels::fused::setNumThreads(2);
  Graph g("se_gradient");
  Builder B(g);
  const i64 n = 3, h = 5, w = 7, c = 24;
  const Shape full = {n, h, w, c}, perChannel = {n, 1, 1, c};
  const int dy = B.input("dy", full), x = B.input("x", full);
  const int s = B.input("s", perChannel), dp = B.input("dp", perChannel);
  const int products = B.mul(dy, x, "products");
  const int ds = B.reduceSum(products, {1, 2}, true, "ds");
  const int scaled = B.mul(dy, s, "scaled");
  const int spread = B.broadcast(dp, full, "spread");
  const int dx = B.add(scaled, spread, "dx");
  const int shifted = B.add(x, B.broadcast(s, full, "s_spread"), "shifted");
  // Operands that repeat along the innermost dimension, and a link of two broadcast operands.
  const int perPixel = B.input("t", {n, h, w, 1});
  const int rowScaled = B.add(B.mul(x, perPixel, "pixel_scaled"), s, "row_scaled");
  const int both = B.unary("neg", B.add(perPixel, s, "pixel_plus_channel"), "both");
  for (int t : {ds, dx, shifted, rowScaled, both}) g.markOutput(t);
  const HostFusionPlan plan = planHostFusions(g);
  using Role = HostFusionPlan::Role;
  const auto role = [&](int t) { return plan.role[static_cast<size_t>(g.tensor(t).producer)]; };
  EXPECT_EQ(role(products), Role::kMulReduceSum);
  EXPECT_EQ(plan.sumOut[static_cast<size_t>(g.tensor(products).producer)], ds);
  EXPECT_EQ(role(ds), Role::kAbsorbed);
  EXPECT_EQ(role(scaled), Role::kAbsorbed);
  EXPECT_EQ(role(spread), Role::kAbsorbed);
  EXPECT_EQ(role(dx), Role::kElementwiseChain);
  EXPECT_EQ(role(shifted), Role::kElementwiseChain);
  EXPECT_EQ(role(g.get("s_spread")), Role::kAbsorbed);
  EXPECT_EQ(role(rowScaled), Role::kElementwiseChain);
  EXPECT_EQ(role(both), Role::kElementwiseChain);
  for (int t : {products, scaled, spread, g.get("s_spread")})
    EXPECT_TRUE(plan.elided[static_cast<size_t>(t)]) << g.tensor(t).name;
  EXPECT_EQ(plan.absorbedOps, 6);

  const size_t nFull = static_cast<size_t>(n * h * w * c), nC = static_cast<size_t>(n * c);
  const size_t nPixels = static_cast<size_t>(n * h * w);
  std::vector<float> dyv(nFull), xv(nFull), sv(nC), dpv(nC), tv(nPixels);
  for (size_t i = 0; i < nPixels; ++i) tv[i] = 1.0f + 0.01f * static_cast<float>(i);
  for (size_t i = 0; i < nFull; ++i) {
    dyv[i] = std::sin(0.37f * static_cast<float>(i)) * 1.7f;
    xv[i] = std::cos(0.11f * static_cast<float>(i)) + 0.25f;
  }
  for (size_t i = 0; i < nC; ++i) {
    sv[i] = 0.5f + 0.4f * std::sin(0.9f * static_cast<float>(i));
    dpv[i] = i % 5 == 0 ? -0.0f : 0.03f * static_cast<float>(i) - 0.6f;
  }
  // Op by op on the host: products rounded (stored before they are added, so that no
  // multiply-add contracts), then summed over H, W in order.
  const auto channel = [&](size_t i) {
    return i / static_cast<size_t>(h * w * c) * static_cast<size_t>(c) + i % c;
  };
  std::vector<float> prod(nFull), scale(nFull), pixelScaled(nFull);
  for (size_t i = 0; i < nFull; ++i) {
    prod[i] = dyv[i] * xv[i];
    scale[i] = dyv[i] * sv[channel(i)];
    pixelScaled[i] = xv[i] * tv[i / static_cast<size_t>(c)];
  }
  std::vector<float> wantDs(nC, 0.0f), wantDx(nFull), wantShifted(nFull), wantRow(nFull),
      wantBoth(nFull);
  for (size_t i = 0; i < nFull; ++i) {
    wantDs[channel(i)] += prod[i];
    wantDx[i] = scale[i] + (dpv[channel(i)] + 0.0f);
    wantShifted[i] = xv[i] + (sv[channel(i)] + 0.0f);
    wantRow[i] = pixelScaled[i] + sv[channel(i)];
    wantBoth[i] = -(tv[i / static_cast<size_t>(c)] + sv[channel(i)]);
  }
  auto exe = std::make_shared<const Executable>(compile(g, Target::small(16, 1 << 22)));
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    std::vector<float> gotDs(nC), gotDx(nFull), gotShifted(nFull), gotRow(nFull), gotBoth(nFull);
    e.connectInput(exe->graph.get("t"), tv.data());
    e.connectOutput(exe->graph.get("row_scaled"), gotRow.data());
    e.connectOutput(exe->graph.get("both"), gotBoth.data());
    e.connectInput(exe->graph.get("dy"), dyv.data());
    e.connectInput(exe->graph.get("x"), xv.data());
    e.connectInput(exe->graph.get("s"), sv.data());
    e.connectInput(exe->graph.get("dp"), dpv.data());
    e.connectOutput(exe->graph.get("ds"), gotDs.data());
    e.connectOutput(exe->graph.get("dx"), gotDx.data());
    e.connectOutput(exe->graph.get("shifted"), gotShifted.data());
    e.run();
    EXPECT_EQ(gotDx, wantDx) << engineModeName(mode);
    EXPECT_EQ(gotShifted, wantShifted) << engineModeName(mode);
    EXPECT_EQ(gotRow, wantRow) << engineModeName(mode);
    EXPECT_EQ(gotBoth, wantBoth) << engineModeName(mode);
    if (mode == EngineMode::Fused) {
      EXPECT_EQ(gotDs, wantDs);
      EXPECT_EQ(e.hostFusedOps(), 6);
    } else {
      for (size_t i = 0; i < nC; ++i) EXPECT_NEAR(gotDs[i], wantDs[i], 1e-5f) << i;
    }
  }
}

// A bf16 add whose sum only a cast to f32 reads writes the widened sum itself (the sum never
// written in bf16); one whose sum is also a graph output keeps its cast. Both engine modes give
// float(bf16(a + b)) to the bit.
TEST(HostFusion, Bf16AddThenCastWritesTheWidenedSum) {
  kernels::fused::setNumThreads(2);
  Graph g("bf16_add_cast");
  Builder B(g);
  const i64 rows = 300, cols = 301;  // past one 4,096-element chunk, with a tail
  const int a = B.input("a", {rows, cols}, DType::BF16);
  const int b = B.input("b", {rows, cols}, DType::BF16);
  const int sum = B.add(a, b, "sum");
  const int wide = B.cast(sum, DType::F32, "wide");
  const int keptSum = B.add(b, a, "kept_sum");
  const int keptWide = B.cast(keptSum, DType::F32, "kept_wide");
  for (int t : {wide, keptSum, keptWide}) g.markOutput(t);
  const HostFusionPlan plan = planHostFusions(g);
  const int addOp = g.tensor(sum).producer;
  EXPECT_EQ(plan.role[static_cast<size_t>(addOp)], HostFusionPlan::Role::kWidenedOutput);
  EXPECT_EQ(plan.widenOut[static_cast<size_t>(addOp)], wide);
  EXPECT_EQ(plan.role[static_cast<size_t>(g.tensor(wide).producer)],
            HostFusionPlan::Role::kAbsorbed);
  EXPECT_TRUE(plan.elided[static_cast<size_t>(sum)]);
  EXPECT_EQ(plan.role[static_cast<size_t>(g.tensor(keptSum).producer)], HostFusionPlan::Role::kNone)
      << "kept_sum is a graph output";

  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> af(n), bf(n);
  for (size_t i = 0; i < n; ++i) {
    af[i] = std::sin(0.01f * static_cast<float>(i)) * 3.0f;
    bf[i] = std::cos(0.037f * static_cast<float>(i)) * 0.01f;
  }
  std::vector<precision::bf16> ah(n), bh(n), wantH(n);
  precision::toBF16(af.data(), ah.data(), static_cast<i64>(n));
  precision::toBF16(bf.data(), bh.data(), static_cast<i64>(n));
  std::vector<float> aw(n), bw(n), want(n);
  precision::toFloat(ah.data(), aw.data(), static_cast<i64>(n));
  precision::toFloat(bh.data(), bw.data(), static_cast<i64>(n));
  for (size_t i = 0; i < n; ++i) want[i] = aw[i] + bw[i];
  precision::toBF16(want.data(), wantH.data(), static_cast<i64>(n));
  precision::toFloat(wantH.data(), want.data(), static_cast<i64>(n));
  auto exe = std::make_shared<const Executable>(compile(g, Target::small(16, 1 << 22)));
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    std::vector<float> got(n), gotKept(n);
    std::vector<precision::bf16> kept(n);
    e.connectInput(exe->graph.get("a"), ah.data());
    e.connectInput(exe->graph.get("b"), bh.data());
    e.connectOutput(exe->graph.get("wide"), got.data());
    e.connectOutput(exe->graph.get("kept_wide"), gotKept.data());
    e.connectOutput(exe->graph.get("kept_sum"), kept.data());
    e.run();
    EXPECT_EQ(got, want) << engineModeName(mode);
    EXPECT_EQ(gotKept, want) << engineModeName(mode);
  }
}

// A reshape of an activation is a view of its bytes in the fused engine: no memory of its own
// and no copy (copies would need more buffers where `r` and `other_r` are read beside `flat`
// and `other`). A viewed tensor lives until its last view is read: `a` is read only through
// its views, after `nx` and `other` were made (which must not take its bytes). Softmaxes, not
// elementwise ops, make the tensors: no elementwise chain elides them.
TEST(HostFusion, ReshapeOfAnActivationIsAViewOfItsBytes) {
  kernels::fused::setNumThreads(2);
  const i64 rows = 96, cols = 130;
  auto build = [&](bool reshapes) {
    auto g = std::make_shared<Graph>("reshape_views");
    Builder B(*g);
    const int x = B.input("x", {rows, cols});
    const int a = B.softmax(x, "a");
    const int flat = reshapes ? B.reshape(a, {rows * cols}, "flat") : a;
    const int other = B.softmax(B.unary("neg", x, "nx"), "other");
    const int r = reshapes ? B.reshape(flat, {cols, rows}, "r") : a;
    const int otherR = reshapes ? B.reshape(other, {cols, rows}, "other_r") : other;
    g->markOutput(B.add(r, otherR, "y"));
    // a read again only through a view, other directly: both after their views
    g->markOutput(B.add(reshapes ? B.reshape(flat, {rows, cols}, "again") : a, other, "z"));
    return g;
  };
  std::vector<float> x(static_cast<size_t>(rows * cols)), want(x.size());
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.01f * static_cast<float>(k));
  for (i64 i = 0; i < rows; ++i) {
    double sum = 0, sumNeg = 0;
    for (i64 j = 0; j < cols; ++j) {
      sum += std::exp(x[static_cast<size_t>(i * cols + j)]);
      sumNeg += std::exp(-x[static_cast<size_t>(i * cols + j)]);
    }
    for (i64 j = 0; j < cols; ++j) {
      const double v = x[static_cast<size_t>(i * cols + j)];
      want[static_cast<size_t>(i * cols + j)] =
          static_cast<float>(std::exp(v) / sum + std::exp(-v) / sumNeg);
    }
  }
  i64 bytes[2] = {0, 0};
  for (bool reshapes : {false, true}) {
    auto exe =
        std::make_shared<const Executable>(compile(*build(reshapes), Target::small(16, 1 << 22)));
    for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
      Engine e(exe, mode);
      std::vector<float> y(x.size()), z(x.size());
      e.connectInput(exe->graph.get("x"), x.data());
      e.connectOutput(exe->graph.get("y"), y.data());
      e.connectOutput(exe->graph.get("z"), z.data());
      e.run();
      for (size_t k = 0; k < x.size(); ++k) {
        ASSERT_NEAR(y[k], want[k], 1e-5f * (1 + std::abs(want[k])))
            << engineModeName(mode) << " reshapes " << reshapes << " element " << k;
        ASSERT_EQ(y[k], z[k]) << engineModeName(mode) << " reshapes " << reshapes << " element "
                              << k;
      }
      if (mode == EngineMode::Fused) bytes[reshapes] = e.tensorMemoryBytes();
    }
  }
  EXPECT_EQ(bytes[1], bytes[0]) << "the reshapes took tensor memory of their own";
}

// LAMB's update arithmetic u = (m / c1) / (sqrt(v / c2) + eps) + wd w as the optimizer lowers
// it runs as two chains (their links never written); every value equals tile mode's.
TEST(HostFusion, ElementwiseChainRunsAsOneLoopWithTileModesValues) {
  kernels::fused::setNumThreads(2);
  Graph g("lamb_arithmetic");
  Builder B(g);
  const i64 n = 20000;  // past the parallel threshold, not a multiple of the chunk
  const int m = B.input("m", {n}), v = B.input("v", {n}), w = B.input("w", {n});
  const int c1 = B.input("c1", {}), c2 = B.input("c2", {});
  const int mHat = B.binary("div", m, c1, "m_hat");
  const int vHat = B.binary("div", v, c2, "v_hat");
  const int root = B.unary("sqrt", vHat, "v_sqrt");
  const int denom = B.add(root, B.constant({}, 1e-6, DType::F32, "eps"), "denominator");
  const int step = B.binary("div", mHat, denom, "adam_step");
  const int decayed = B.scale(w, 0.01, "decay");
  const int u = B.add(step, decayed, "u");
  // A link that is a graph output keeps its pair apart: m + v is written, its sqrt is not
  // chained to it.
  const int kept = B.add(m, v, "sum_kept");
  const int keptRoot = B.unary("sqrt", kept, "sqrt_kept");
  for (int t : {u, kept, keptRoot}) g.markOutput(t);
  const HostFusionPlan plan = planHostFusions(g);
  // Chains start at the first op in program order: m / c1 -> m^ / . -> + wd w, and
  // v / c2 -> sqrt -> + eps (whose reader, the division, is in the first chain already).
  auto producers = [&](std::vector<int> ts) {
    for (int& t : ts) t = g.tensor(t).producer;
    return ts;
  };
  const int last = g.tensor(u).producer, lastB = g.tensor(denom).producer;
  ASSERT_EQ(plan.role[static_cast<size_t>(last)], HostFusionPlan::Role::kElementwiseChain);
  ASSERT_EQ(plan.role[static_cast<size_t>(lastB)], HostFusionPlan::Role::kElementwiseChain);
  EXPECT_EQ(plan.chain[static_cast<size_t>(last)], producers({mHat, step, u}));
  EXPECT_EQ(plan.chain[static_cast<size_t>(lastB)], producers({vHat, root, denom}));
  for (int t : {mHat, step, vHat, root}) EXPECT_TRUE(plan.elided[static_cast<size_t>(t)]);
  EXPECT_FALSE(plan.elided[static_cast<size_t>(denom)]) << "read by the other chain";
  EXPECT_EQ(plan.role[static_cast<size_t>(g.tensor(keptRoot).producer)],
            HostFusionPlan::Role::kNone);
  EXPECT_FALSE(plan.elided[static_cast<size_t>(kept)]);
  EXPECT_EQ(plan.absorbedOps, 4);

  std::vector<float> ms(n), vs(n), ws(n);
  for (i64 i = 0; i < n; ++i) {
    ms[i] = std::sin(0.3f * static_cast<float>(i));
    vs[i] = 1e-4f * (1.5f + std::cos(0.11f * static_cast<float>(i)));
    ws[i] = std::cos(0.05f * static_cast<float>(i));
  }
  float c1v = 0.1f, c2v = 0.001f;
  auto exe = std::make_shared<const Executable>(compile(g, Target::small(16, 1 << 22)));
  std::vector<std::vector<float>> got;
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    std::vector<float> out(n);
    e.connectInput(exe->graph.get("m"), ms.data());
    e.connectInput(exe->graph.get("v"), vs.data());
    e.connectInput(exe->graph.get("w"), ws.data());
    e.connectInput(exe->graph.get("c1"), &c1v);
    e.connectInput(exe->graph.get("c2"), &c2v);
    e.connectOutput(exe->graph.get("u"), out.data());
    e.run();
    got.push_back(out);
  }
  for (i64 i = 0; i < n; ++i) {
    const double ref = (ms[i] / c1v) / (std::sqrt(vs[i] / c2v) + 1e-6) + 0.01 * ws[i];
    ASSERT_NEAR(got[0][i], ref, 1e-5 * std::max(1.0, std::abs(ref))) << i;
    ASSERT_EQ(got[0][i], got[1][i]) << "fused and tile mode differ at " << i;
  }
}

// A lowered LAMB step runs its per-weight arithmetic as one update group: the m and v updates,
// u = m^ / (sqrt(v^) + eps) + wd w and both trust-ratio norms in one pass over the weight, the
// temporaries never written; only u (the weight update's addend, after the trust ratio) is.
// Three steps leave every variable as tile mode.
TEST(HostFusion, LambStepRunsAsOneUpdateGroupAndEqualsTileMode) {
  kernels::fused::setNumThreads(2);
  Graph g("lamb_step");
  Builder B(g);
  const int x = B.input("x", {64, 300});
  const int lr = B.input("lr", {});
  const int w = B.variable("w", {300, 80});
  const int y = B.matmul(x, w);
  const int loss = B.reduceMean(B.mul(y, y), {0, 1}, false, "loss");
  g.markOutput(loss);
  const GradientResult gr = appendBackward(g, loss, {w});
  OptimizerOptions o;
  o.kind = "lamb";
  o.weightDecay = 0.01;
  o.maxGradNorm = 1.0;
  appendOptimizer(g, gr.grads, lr, o);
  auto exe = std::make_shared<const Executable>(compile(g, Target::small(16, 1 << 22)));
  const Graph& c = exe->graph;
  const HostFusionPlan plan = planHostFusions(c);
  std::vector<int> runners;
  for (const Op& op : c.ops())
    if (plan.role[static_cast<size_t>(op.id)] == HostFusionPlan::Role::kUpdateGroup)
      runners.push_back(op.id);
  ASSERT_EQ(runners.size(), 1u);
  const std::vector<int>& members = plan.group[static_cast<size_t>(runners[0])];
  auto producerIn = [&](const std::string& name) {
    const int p = c.tensor(c.get(name)).producer;
    return std::find(members.begin(), members.end(), p) != members.end();
  };
  for (const char* t :
       {"w/grad_clipped", "w/grad_squared", "w/m_hat", "w/v_hat", "w/v_sqrt", "w/denominator",
        "w/adam_step", "w/decay", "w/grad_decayed", "w/lamb_weight_sumsq", "w/lamb_update_sumsq"})
    EXPECT_TRUE(producerIn(t)) << t;
  for (const char* t : {"w/grad_clipped", "w/grad_squared", "w/m_hat", "w/v_hat", "w/v_sqrt",
                        "w/denominator", "w/adam_step", "w/decay"})
    EXPECT_TRUE(plan.elided[static_cast<size_t>(c.get(t))]) << t;
  int stateUpdates = 0;  // m and v, in place; the weight's update reads the norms: after it
  for (int id : members) stateUpdates += c.op(id).kind == OpKind::ApplyUpdate;
  EXPECT_EQ(stateUpdates, 2);
  const auto& outs = plan.groupOutputs[static_cast<size_t>(runners[0])];
  EXPECT_EQ(outs, (std::vector<int>{c.get("w/grad_decayed"), c.get("w/lamb_weight_sumsq"),
                                    c.get("w/lamb_update_sumsq")}));
  EXPECT_FALSE(producerIn("w/lamb_lr")) << "reads the group's sums: runs after it";
  // A group never spans the start of the update part (gradient accumulation runs the ops
  // before it once per micro-batch), nor forms when the program runs in unknown segments.
  HostFusionOptions cutAtV;
  cutAtV.updateFirstOp = c.tensor(c.get("w/grad_squared")).producer;
  const HostFusionPlan cutPlan = planHostFusions(c, cutAtV);
  for (const Op& op : c.ops()) {
    const auto& ids = cutPlan.group[static_cast<size_t>(op.id)];
    if (ids.empty()) continue;
    EXPECT_EQ(ids.front() < cutAtV.updateFirstOp, ids.back() < cutAtV.updateFirstOp)
        << "a group across the cut";
  }
  HostFusionOptions pipelined;
  pipelined.updateGroups = false;
  const HostFusionPlan none = planHostFusions(c, pipelined);
  for (const Op& op : c.ops())
    EXPECT_NE(none.role[static_cast<size_t>(op.id)], HostFusionPlan::Role::kUpdateGroup);

  std::vector<float> xs(64 * 300), ws(300 * 80);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.013f * static_cast<float>(i));
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.05f * std::cos(0.7f * static_cast<float>(i));
  float rate = 0.01f;
  std::vector<std::vector<float>> got;
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    Engine e(exe, mode);
    e.writeTensor("w", ws);
    e.connectInput(exe->graph.get("x"), xs.data());
    e.connectInput(exe->graph.get("lr"), &rate);
    for (int step = 0; step < 3; ++step) e.run();
    got.push_back(e.readFloats("w"));
  }
  double scale = 0;
  for (float v : got[1]) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (size_t i = 0; i < ws.size(); ++i) {
    ASSERT_NEAR(got[0][i], got[1][i], 1e-5 * scale) << i;
    ASSERT_NE(got[0][i], ws[i]) << "the step must move every weight";
  }
  // The group's LAMB loop (kernels/lamb_update.h) leaves m and v as the ops run one by one (an
  // engine whose program runs in segments forms no update groups), to the bit.
  std::vector<std::vector<float>> state;
  for (bool segments : {false, true}) {
    Engine e(exe, EngineMode::Fused, {}, segments);
    e.writeTensor("w", ws);
    e.connectInput(exe->graph.get("x"), xs.data());
    e.connectInput(exe->graph.get("lr"), &rate);
    for (int step = 0; step < 3; ++step) e.run();
    state.push_back(e.readFloats("w/m"));
    state.push_back(e.readFloats("w/v"));
  }
  EXPECT_EQ(state[0], state[2]);
  EXPECT_EQ(state[1], state[3]);
}

}  // namespace
}  // namespace ipu
